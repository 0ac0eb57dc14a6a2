"""Linear support vector machine by full-batch gradient descent on a smooth hinge loss."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs._common import with_intercept
from jobs.base import NON_NEGATIVE, POSITIVE, Allowed, GroupComm, Shard, Solver

LOSSES = ("squared_hinge", "smoothed_hinge")


def hinge_terms(margin: np.ndarray, loss: str, smoothing: float) -> tuple[float, np.ndarray]:
    """Sum of the per-row losses at ``margin`` and their derivatives in the margin."""
    z = 1.0 - margin
    if loss == "squared_hinge":
        act = np.maximum(z, 0.0)
        return float(act @ act), -2.0 * act
    # smoothed hinge: 0 for z <= 0, z^2 / (2h) for 0 < z < h, z - h/2 for z >= h
    h = smoothing
    quad = np.clip(z, 0.0, h)
    value = quad * (z - 0.5 * quad) / h
    return float(value.sum()), -quad / h


class LinearSVM(Solver):
    """L2-regularized linear SVM, labels 0/1 (mapped to -1/+1), trained by gradient descent.

    Objective: mean(loss(s (x.w + b))) + l2/2 |w|^2 with s = 2y - 1 and ``loss`` either the
    squared hinge max(0, 1 - m)^2 or the smoothed (Huberized) hinge of width ``smoothing``.
    """

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {
        "learning_rate": 0.5, "l2": 1e-4, "fit_intercept": True, "loss": "squared_hinge",
        "smoothing": 1.0,
    }
    allowed: ClassVar[dict[str, Allowed]] = {
        "learning_rate": POSITIVE, "l2": NON_NEGATIVE, "loss": Allowed(choices=LOSSES),
        "smoothing": POSITIVE,
    }
    label_kind: ClassVar[str] = "binary"
    dataset_kind: ClassVar[str] = "classification"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        assert shard.y is not None
        self._sign = 2.0 * np.asarray(shard.y, dtype=np.float64) - 1.0
        self.w = np.zeros(shard.n_features + 1)  # intercept last

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """Weights, and a step's gradient, allreduce message and result, full gradient, its
        temporaries and new weights: about 6 vectors of ``features + 1`` floats."""
        return 8 * 6 * (features + 1)

    def objective(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """Global objective and gradient at ``w`` (collective)."""
        X, s = self.shard.X, self._sign
        total, dmargin = hinge_terms(s * with_intercept(X, w), str(self.params["loss"]),
                                     float(self.params["smoothing"]))
        coef = s * dmargin
        loss_sum, grad_w, grad_b = self.global_sum(total, X.T @ coef, coef.sum())
        n, l2 = self.shard.n_rows, float(self.params["l2"])
        g = np.empty_like(w)
        g[:-1] = grad_w / n + l2 * w[:-1]
        g[-1] = float(grad_b[0]) / n if self.params["fit_intercept"] else 0.0
        return float(loss_sum[0]) / n + 0.5 * l2 * float(w[:-1] @ w[:-1]), g

    def step(self) -> float:
        """One gradient step."""
        loss, g = self.objective(self.w)
        self.w = self.w - float(self.params["learning_rate"]) * g
        return loss

    def get_state(self) -> dict[str, np.ndarray]:
        """Weights, intercept last."""
        return {"w": self.w.copy()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore the weights."""
        self.w = np.array(state["w"], dtype=np.float64)
