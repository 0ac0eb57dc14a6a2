"""Linear least squares by conjugate gradients on the normal equations (CGLS)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs._common import with_intercept
from jobs.base import NON_NEGATIVE, Allowed, GroupComm, Shard, Solver


class LinearRegression(Solver):
    """Ridge regression: minimize 1/(2n) |X w + b - y|^2 + l2/2 |w|^2 by conjugate gradients.

    One iteration is one CG step on the normal equations: two passes over the local rows and
    one allreduce. Each rank keeps its rows' residuals ``X w + b - y`` (recomputed on restore).
    Converges in at most ``features + 1`` iterations in exact arithmetic.
    """

    convergence: ClassVar[str] = "linear"
    defaults: ClassVar[dict[str, Any]] = {"l2": 0.0, "fit_intercept": True}
    allowed: ClassVar[dict[str, Allowed]] = {"l2": NON_NEGATIVE}
    label_kind: ClassVar[str] = "real"
    dataset_kind: ClassVar[str] = "regression"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        assert shard.y is not None
        self._y = np.asarray(shard.y, dtype=np.float64)
        self.w = np.zeros(shard.n_features + 1)  # intercept last
        self._resid = -self._y.copy()
        self.r = -self._gradient()  # collective
        self.p = self.r.copy()
        self.rr = float(self.r @ self.r)

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """Weights, CG residual and direction (3 vectors of ``features + 1`` floats), and a
        step's product, allreduce message and result and updated vectors (about 6 more)."""
        return 8 * 9 * (features + 1)

    def _regularize(self, v: np.ndarray) -> np.ndarray:
        out = float(self.params["l2"]) * v
        out[-1] = 0.0
        return out

    def _mask(self, v: np.ndarray) -> np.ndarray:
        if not self.params["fit_intercept"]:
            v[-1] = 0.0
        return v

    def _gradient(self) -> np.ndarray:
        X, e = self.shard.X, self._resid
        gw, gb = self.global_sum(X.T @ e, e.sum())
        g = np.concatenate([gw, gb]) / self.shard.n_rows + self._regularize(self.w)
        return self._mask(g)

    def step(self) -> float:
        """One CG step; returns the objective before it."""
        X, n, e = self.shard.X, self.shard.n_rows, self._resid
        q = with_intercept(X, self.p) if self.params["fit_intercept"] else np.asarray(
            X @ self.p[:-1]).ravel()
        aw, ab, ee = self.global_sum(X.T @ q, q.sum(), e @ e)
        w = self.w[:-1]
        loss = 0.5 * float(ee[0]) / n + 0.5 * float(self.params["l2"]) * float(w @ w)
        Ap = self._mask(np.concatenate([aw, ab]) / n + self._regularize(self.p))
        pAp = float(self.p @ Ap)
        if self.rr <= 0.0 or pAp <= 0.0 or not np.isfinite(pAp):
            return loss
        alpha = self.rr / pAp
        self.w = self.w + alpha * self.p
        self._resid = e + alpha * q
        self.r = self.r - alpha * Ap
        rr_new = float(self.r @ self.r)
        self.p = self.r + (rr_new / self.rr) * self.p
        self.rr = rr_new
        return loss

    def get_state(self) -> dict[str, np.ndarray]:
        """Weights (intercept last), CG residual and direction."""
        return {"w": self.w.copy(), "r": self.r.copy(), "p": self.p.copy(), "rr": np.array([self.rr])}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore the CG state and recompute this rank's row residuals."""
        self.w = np.array(state["w"], dtype=np.float64)
        self.r = np.array(state["r"], dtype=np.float64)
        self.p = np.array(state["p"], dtype=np.float64)
        self.rr = float(np.asarray(state["rr"])[0])
        X = self.shard.X
        pred = with_intercept(X, self.w) if self.params["fit_intercept"] else np.asarray(
            X @ self.w[:-1]).ravel()
        self._resid = pred - self._y
