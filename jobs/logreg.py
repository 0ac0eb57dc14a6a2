"""Binary logistic regression by full-batch gradient descent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs.base import NON_NEGATIVE, POSITIVE, Allowed, GroupComm, Shard, Solver


class LogisticRegression(Solver):
    """L2-regularized logistic regression, labels in {0, 1}, trained by gradient descent.

    Loss: mean(log(1 + exp(-s * (x.w + b)))) + l2/2 * |w|^2 with s = 2y - 1.
    """

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {"learning_rate": 1.0, "l2": 1e-4, "fit_intercept": True}
    allowed: ClassVar[dict[str, Allowed]] = {"learning_rate": POSITIVE, "l2": NON_NEGATIVE}
    label_kind: ClassVar[str] = "binary"
    dataset_kind: ClassVar[str] = "classification"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        assert shard.y is not None
        self._sign = 2.0 * np.asarray(shard.y, dtype=np.float64) - 1.0
        self.w = np.zeros(shard.n_features)
        self.b = np.zeros(1)

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """Weights and intercept, and a step's gradient, allreduce message and result, scaled
        gradient and new weights: about 5 vectors of ``features + 1`` floats."""
        return 8 * 5 * (features + 1)

    def loss_and_grad(self) -> tuple[float, np.ndarray, float]:
        """Global loss, gradient in w and gradient in b at the current model."""
        X, s = self.shard.X, self._sign
        margin = s * (X @ self.w + self.b[0])
        loss_local = np.logaddexp(0.0, -margin).sum()
        coef = -s * np.exp(-np.logaddexp(0.0, margin))  # -s * sigmoid(-margin)
        loss_sum, grad_w, grad_b = self.global_sum(loss_local, X.T @ coef, coef.sum())
        n = self.shard.n_rows
        l2 = float(self.params["l2"])
        loss = float(loss_sum[0]) / n + 0.5 * l2 * float(self.w @ self.w)
        gw = grad_w / n + l2 * self.w
        gb = float(grad_b[0]) / n if self.params["fit_intercept"] else 0.0
        return loss, gw, gb

    def step(self) -> float:
        """One gradient step."""
        loss, gw, gb = self.loss_and_grad()
        lr = float(self.params["learning_rate"])
        self.w = self.w - lr * gw
        self.b = self.b - lr * gb
        return loss

    def get_state(self) -> dict[str, np.ndarray]:
        """Weights and intercept."""
        return {"w": self.w.copy(), "b": self.b.copy()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore weights and intercept."""
        self.w = np.array(state["w"], dtype=np.float64)
        self.b = np.array(state["b"], dtype=np.float64)
