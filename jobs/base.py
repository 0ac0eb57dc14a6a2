"""The solver protocol every training job follows.

A solver is an iterative, data-parallel algorithm. Each rank of a job's group builds one
solver instance on its own row shard of the dataset; every global quantity is combined with
``comm.allreduce``, so every rank holds the same model and sees the same global loss.

Protocol (see ``docs/solvers.md`` for a worked example):

* ``__init__(comm, shard, params, seed)``: set up the initial model. Must give the same
  model on any number of ranks (draw random numbers from ``seed``, never from the rank).
* ``step() -> float``: run one iteration and return the global loss of the model *before*
  the update (so the first loss is the loss of the initial model).
* ``get_state() -> dict[str, np.ndarray]`` / ``set_state(state)``: the complete model
  state, so that restoring it on any number of ranks continues exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import numpy as np
import scipy.sparse as sp

ReduceOp = Literal["sum", "max", "min"]


class GroupComm(Protocol):
    """The communicator a solver sees: its job's group of ranks."""

    rank: int
    size: int

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Element-wise reduction of ``array`` over the group; every rank gets the result."""
        ...


class SerialComm:
    """A one-rank group, for running a solver without MPI (tests, benchmarks, recording)."""

    rank = 0
    size = 1

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Return a copy of ``array``: the reduction over one rank."""
        return np.array(array, dtype=np.float64, copy=True)


@dataclass
class Shard:
    """One rank's rows of a dataset.

    Attributes:
        X: feature rows, a dense ``ndarray`` or a ``scipy.sparse.csr_matrix``.
        y: labels or targets of those rows, or None for unsupervised data.
        row_start: global index of the first row held.
        n_rows: rows in the whole dataset (over all ranks).
    """

    X: np.ndarray | sp.csr_matrix
    y: np.ndarray | None
    row_start: int
    n_rows: int

    @property
    def n_features(self) -> int:
        """Columns of ``X``."""
        return int(self.X.shape[1])

    @property
    def n_local(self) -> int:
        """Rows held by this rank."""
        return int(self.X.shape[0])


class Solver(ABC):
    """Base class of the built-in solvers.

    Class attributes:
        convergence: ``"sublinear"`` (first-order methods) or ``"linear"`` (L-BFGS, EM,
            Lloyd...): chooses the loss-curve family the scheduler fits.
        defaults: every hyperparameter with its default; the YAML may override these only,
            with values of the same type.
        needs_labels: whether the dataset must carry ``y``.
    """

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {}
    needs_labels: ClassVar[bool] = True

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        self.comm = comm
        self.shard = shard
        self.params = {**self.defaults, **params}
        self.seed = seed

    @abstractmethod
    def step(self) -> float:
        """One iteration; returns the global loss of the model before this update."""

    @abstractmethod
    def get_state(self) -> dict[str, np.ndarray]:
        """The complete model state (identical on every rank of the group)."""

    @abstractmethod
    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Replace the model state with one from ``get_state``."""

    def global_sum(self, *values: float | np.ndarray) -> list[np.ndarray]:
        """Allreduce-sum several arrays or scalars in one message."""
        flat = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values]
        total = self.comm.allreduce(np.concatenate([f.ravel() for f in flat]))
        out, at = [], 0
        for f in flat:
            out.append(total[at : at + f.size].reshape(f.shape))
            at += f.size
        return out
