"""L-BFGS for smooth objectives, and logistic regression trained by it.

Data parallel: only the objective and its gradient are summed over ranks (one allreduce per
evaluation). The two-loop recursion and the backtracking line search then run identically on
every rank, since every rank holds the same iterate, history and reduced values.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs._common import with_intercept
from jobs.base import AT_LEAST_ONE, NON_NEGATIVE, Allowed, GroupComm, Shard, Solver

_ARMIJO = 1e-4
_MAX_HALVINGS = 60


class LBFGSSolver(Solver):
    """Limited-memory BFGS with a deterministic Armijo backtracking line search.

    Subclasses give the starting point (``self.x``) and :meth:`objective`. One ``step`` is one
    L-BFGS iteration (possibly several objective evaluations). The state holds the iterate,
    its objective and gradient, and the correction history, so a restore continues exactly.
    """

    convergence: ClassVar[str] = "linear"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        self.x = np.zeros(0)
        self.f: float | None = None
        self.g = np.zeros(0)
        self.S: list[np.ndarray] = []
        self.Y: list[np.ndarray] = []

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """Iterate and gradient, ``history`` (s, y) pairs (one more while a pair is added),
        and a step's direction, trial point, gradient, allreduce message and result (about 6
        vectors): all of ``features + 1`` floats."""
        return 8 * (2 * (int(params["history"]) + 1) + 8) * (features + 1)

    @abstractmethod
    def objective(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Global objective and gradient at ``x`` (collective: one allreduce)."""

    def _direction(self, g: np.ndarray) -> np.ndarray:
        """``-H g`` by the two-loop recursion over the stored pairs."""
        q = g.copy()
        alphas = []
        for s, y in zip(reversed(self.S), reversed(self.Y), strict=True):
            a = float(s @ q) / float(s @ y)
            alphas.append(a)
            q -= a * y
        if self.S:
            s, y = self.S[-1], self.Y[-1]
            q *= float(s @ y) / float(y @ y)
        for (s, y), a in zip(zip(self.S, self.Y, strict=True), reversed(alphas), strict=True):
            b = float(y @ q) / float(s @ y)
            q += (a - b) * s
        return -q

    def step(self) -> float:
        """One L-BFGS iteration; returns the objective before it."""
        if self.f is None:
            self.f, self.g = self.objective(self.x)
        f0, g = self.f, self.g
        gnorm = float(np.linalg.norm(g))
        if gnorm == 0.0 or not np.isfinite(f0):
            return f0
        d = self._direction(g)
        slope = float(g @ d)
        if not slope < 0.0:  # not a descent direction: forget the history
            self.S, self.Y = [], []
            d, slope = -g, -gnorm * gnorm
        t = 1.0 if self.S else min(1.0, 1.0 / gnorm)
        for _ in range(_MAX_HALVINGS):
            x_new = self.x + t * d
            f_new, g_new = self.objective(x_new)
            if np.isfinite(f_new) and f_new <= f0 + _ARMIJO * t * slope:
                break
            t *= 0.5
        else:
            return f0  # no decrease representable: stay (converged to rounding)
        s, y = x_new - self.x, g_new - g
        if float(s @ y) > 1e-12 * float(y @ y):
            self.S.append(s)
            self.Y.append(y)
            if len(self.S) > int(self.params["history"]):
                self.S.pop(0)
                self.Y.pop(0)
        self.x, self.f, self.g = x_new, f_new, g_new
        return f0

    def get_state(self) -> dict[str, np.ndarray]:
        """Iterate, objective and gradient there, and the (s, y) history, oldest first."""
        n = self.x.size
        state = {
            "x": self.x.copy(),
            "S": np.array(self.S).reshape(len(self.S), n),
            "Y": np.array(self.Y).reshape(len(self.Y), n),
        }
        if self.f is not None:
            state["f"] = np.array([self.f])
            state["g"] = self.g.copy()
        return state

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore a state from :meth:`get_state`."""
        self.x = np.array(state["x"], dtype=np.float64)
        self.S = [np.array(r, dtype=np.float64) for r in np.asarray(state["S"])]
        self.Y = [np.array(r, dtype=np.float64) for r in np.asarray(state["Y"])]
        if "f" in state:
            self.f = float(np.asarray(state["f"])[0])
            self.g = np.array(state["g"], dtype=np.float64)
        else:
            self.f, self.g = None, np.zeros(0)


class LogisticRegressionLBFGS(LBFGSSolver):
    """L2-regularized binary logistic regression (labels 0/1) trained by L-BFGS.

    Same objective as ``logreg``: mean(log(1 + exp(-s (x.w + b)))) + l2/2 |w|^2, s = 2y - 1.
    """

    defaults: ClassVar[dict[str, Any]] = {"l2": 1e-4, "fit_intercept": True, "history": 10}
    allowed: ClassVar[dict[str, Allowed]] = {"l2": NON_NEGATIVE, "history": AT_LEAST_ONE}
    label_kind: ClassVar[str] = "binary"
    dataset_kind: ClassVar[str] = "classification"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        assert shard.y is not None
        self._sign = 2.0 * np.asarray(shard.y, dtype=np.float64) - 1.0
        self.x = np.zeros(shard.n_features + 1)

    def objective(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Global loss and gradient in (w, b)."""
        X, s = self.shard.X, self._sign
        margin = s * with_intercept(X, x)
        coef = -s * np.exp(-np.logaddexp(0.0, margin))
        loss_sum, grad_w, grad_b = self.global_sum(np.logaddexp(0.0, -margin).sum(), X.T @ coef,
                                                   coef.sum())
        n, l2, w = self.shard.n_rows, float(self.params["l2"]), x[:-1]
        g = np.empty_like(x)
        g[:-1] = grad_w / n + l2 * w
        g[-1] = float(grad_b[0]) / n if self.params["fit_intercept"] else 0.0
        return float(loss_sum[0]) / n + 0.5 * l2 * float(w @ w), g
