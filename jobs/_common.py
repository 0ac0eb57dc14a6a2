"""Small helpers shared by the built-in solvers (dense/sparse agnostic)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from jobs.base import Shard, Solver


def dense(X: Any) -> np.ndarray:
    """``X`` as a dense float64 array."""
    return X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)


def squared(X: Any) -> Any:
    """Element-wise square of ``X``, keeping sparse input sparse."""
    return X.multiply(X).tocsr() if sp.issparse(X) else np.square(X)


def row_sq_norms(X: Any) -> np.ndarray:
    """Squared Euclidean norm of every row."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1)).ravel()
    return np.einsum("ij,ij->i", X, X)


def seeded_rows(solver: Solver, k: int) -> np.ndarray:
    """``k`` distinct global rows drawn with the solver's seed, gathered to every rank.

    The draw depends only on the seed and the dataset size, so it is the same on any number
    of ranks. Collective: every rank of the group must call it.
    """
    shard: Shard = solver.shard
    rows = np.sort(np.random.default_rng(solver.seed).choice(shard.n_rows, size=k, replace=False))
    local = np.zeros((k, shard.n_features))
    lo, hi = shard.row_start, shard.row_start + shard.n_local
    mine = (rows >= lo) & (rows < hi)
    local[mine] = dense(shard.X[rows[mine] - lo])
    (out,) = solver.global_sum(local)
    return out


def with_intercept(X: Any, w: np.ndarray) -> np.ndarray:
    """``X @ w[:-1] + w[-1]``: the linear predictor with the intercept stored last."""
    return np.asarray(X @ w[:-1]).ravel() + w[-1]


def class_labels(shard: Shard) -> np.ndarray:
    """The labels of a classification shard as non-negative integers."""
    assert shard.y is not None, "this algorithm needs labels"
    return np.asarray(shard.y).astype(np.int64)
