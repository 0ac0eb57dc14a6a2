"""Solvers with the mistakes ``slaq check-solver`` finds: each is the mean estimator of
docs/solvers.md with one slip."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs.base import Shard, Solver
from slaq_mpi.runtime.protocol import GroupComm


class _Mean(Solver):
    convergence: ClassVar[str] = "linear"
    defaults: ClassVar[dict[str, Any]] = {"step": 0.5}
    needs_labels: ClassVar[bool] = False

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int) -> None:
        super().__init__(comm, shard, params, seed)
        self.mean = np.zeros(shard.n_features)

    def step(self) -> float:
        diff = self.shard.X - self.mean
        sq, col_sum = self.global_sum((diff * diff).sum(), diff.sum(axis=0))
        self.mean = self.mean + self.params["step"] * col_sum / self.shard.n_rows
        return 0.5 * float(sq[0]) / self.shard.n_rows

    def get_state(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean.copy()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.mean = np.array(state["mean"], dtype=np.float64)


class RankSeeded(_Mean):
    """Draws its initial model from the rank: ranks start from different models."""

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int) -> None:
        super().__init__(comm, shard, params, seed)
        self.mean = np.random.default_rng([seed, comm.rank]).standard_normal(shard.n_features)


class LocalUpdate(_Mean):
    """Updates its model from its own rows only: the loss is reduced, the step is not."""

    def step(self) -> float:
        diff = self.shard.X - self.mean
        (sq,) = self.global_sum((diff * diff).sum())
        self.mean = self.mean + self.params["step"] * diff.mean(axis=0)
        return 0.5 * float(sq[0]) / self.shard.n_rows


class ForgetsOnRestore(_Mean):
    """Restores only part of its state: set_state leaves the model at its start."""

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        pass
