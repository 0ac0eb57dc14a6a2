"""Gaussian mixture with diagonal covariances, fitted by expectation-maximization."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from scipy.special import logsumexp

from jobs._common import seeded_rows, squared
from jobs.base import AT_LEAST_ONE, POSITIVE, Allowed, GroupComm, Shard, Solver


class GaussianMixture(Solver):
    """EM for a ``k``-component diagonal Gaussian mixture; the loss is the negative mean
    log-likelihood of the rows (it never increases).

    Start: means are ``k`` rows drawn with the job's seed (as in ``kmeans``), every variance is
    the data's per-feature variance, weights are equal. ``reg_covar`` is added to variances.
    """

    convergence: ClassVar[str] = "linear"
    defaults: ClassVar[dict[str, Any]] = {"k": 8, "reg_covar": 1e-6}
    allowed: ClassVar[dict[str, Allowed]] = {"k": AT_LEAST_ONE, "reg_covar": POSITIVE}
    row_limited: ClassVar[tuple[str, ...]] = ("k",)
    needs_labels: ClassVar[bool] = False
    dataset_kind: ClassVar[str] = "blobs"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        X, n = shard.X, shard.n_rows
        self._X2 = squared(X)
        k = int(self.params["k"])
        self.means = seeded_rows(self, k)
        s1, s2 = self.global_sum(np.asarray(X.sum(axis=0)).ravel(), np.asarray(self._X2.sum(axis=0)).ravel())
        var = np.maximum(s2 / n - (s1 / n) ** 2, 0.0) + float(self.params["reg_covar"])
        self.variances = np.tile(var, (k, 1))
        self.weights = np.full(k, 1.0 / k)

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """Means and variances (two ``k x features`` matrices) and weights, and a step's
        precisions, weighted sums of x and x^2, allreduce message and result and the new means
        and variances: about 9 such matrices."""
        k = int(params["k"])
        return 8 * 9 * k * (features + 1)

    def log_joint(self) -> np.ndarray:
        """log(weight_j) + log N(x | mean_j, diag(var_j)) for every local row and component."""
        X, prec = self.shard.X, 1.0 / self.variances
        const = (np.sum(self.means**2 * prec, axis=1) + np.sum(np.log(self.variances), axis=1)
                 + self.means.shape[1] * np.log(2.0 * np.pi))
        quad = np.asarray(self._X2 @ prec.T) - 2.0 * np.asarray(X @ (self.means * prec).T)
        with np.errstate(divide="ignore"):
            return -0.5 * (quad + const) + np.log(self.weights)

    def step(self) -> float:
        """One E-step and M-step; returns the negative mean log-likelihood before them."""
        lj = self.log_joint()
        lse = logsumexp(lj, axis=1)
        resp = np.exp(lj - lse[:, None])
        X = self.shard.X
        ll, nk, s1, s2 = self.global_sum(lse.sum(), resp.sum(axis=0), np.asarray(X.T @ resp).T,
                                         np.asarray(self._X2.T @ resp).T)
        ok = nk > 1e-10 * self.shard.n_rows
        means, var = self.means.copy(), self.variances.copy()
        means[ok] = s1[ok] / nk[ok, None]
        var[ok] = np.maximum(s2[ok] / nk[ok, None] - means[ok] ** 2, 0.0) + float(self.params["reg_covar"])
        self.means, self.variances = means, var
        self.weights = np.where(ok, nk, 0.0) / nk[ok].sum()
        return -float(ll[0]) / self.shard.n_rows

    def get_state(self) -> dict[str, np.ndarray]:
        """Weights, means and variances."""
        return {"weights": self.weights.copy(), "means": self.means.copy(),
                "variances": self.variances.copy()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore weights, means and variances."""
        self.weights = np.array(state["weights"], dtype=np.float64)
        self.means = np.array(state["means"], dtype=np.float64)
        self.variances = np.array(state["variances"], dtype=np.float64)
