"""K-means clustering by Lloyd's algorithm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from jobs._common import row_sq_norms, seeded_rows
from jobs.base import AT_LEAST_ONE, Allowed, GroupComm, Shard, Solver


class KMeans(Solver):
    """Lloyd iterations; loss is the mean squared distance to the nearest centroid.

    Initial centroids are ``k`` distinct rows drawn with the job's seed, so the start is the
    same on any number of ranks. An empty cluster keeps its centroid.
    """

    convergence: ClassVar[str] = "linear"
    defaults: ClassVar[dict[str, Any]] = {"k": 8}
    allowed: ClassVar[dict[str, Allowed]] = {"k": AT_LEAST_ONE}
    row_limited: ClassVar[tuple[str, ...]] = ("k",)
    needs_labels: ClassVar[bool] = False
    dataset_kind: ClassVar[str] = "blobs"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        self.centroids = seeded_rows(self, int(self.params["k"]))

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """The ``k x features`` centroids, and a step's cluster sums, allreduce message and
        result and moved centroids: about 5 such matrices."""
        k = int(params["k"])
        return 8 * 5 * k * (features + 1)

    def assign(self) -> tuple[np.ndarray, np.ndarray]:
        """Nearest centroid index and squared distance for every local row."""
        X = self.shard.X
        c = self.centroids
        d2 = row_sq_norms(X)[:, None] - 2.0 * np.asarray(X @ c.T) + np.einsum("ij,ij->i", c, c)[None, :]
        idx = np.argmin(d2, axis=1)
        return idx, np.maximum(d2[np.arange(len(idx)), idx], 0.0)

    def step(self) -> float:
        """Assign rows, then move every centroid to the mean of its rows."""
        k = self.centroids.shape[0]
        idx, dist = self.assign()
        onehot_counts = np.bincount(idx, minlength=k).astype(np.float64)
        sums = _cluster_sums(self.shard.X, idx, k)
        inertia, sums, counts = self.global_sum(dist.sum(), sums, onehot_counts)
        filled = counts > 0
        self.centroids = self.centroids.copy()
        self.centroids[filled] = sums[filled] / counts[filled, None]
        return float(inertia[0]) / self.shard.n_rows

    def get_state(self) -> dict[str, np.ndarray]:
        """The centroids."""
        return {"centroids": self.centroids.copy()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore the centroids."""
        self.centroids = np.array(state["centroids"], dtype=np.float64)


def _cluster_sums(X: Any, idx: np.ndarray, k: int) -> np.ndarray:
    """Per-cluster sums of rows, as one sparse-dense product (fast for dense and CSR X)."""
    member = sp.csr_matrix(
        (np.ones(len(idx)), (idx, np.arange(len(idx)))), shape=(k, len(idx))
    )
    sums = member @ X
    return sums.toarray() if sp.issparse(sums) else np.asarray(sums, dtype=np.float64)
