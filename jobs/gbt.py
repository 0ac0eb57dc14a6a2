"""Gradient-boosted regression trees with histogram splits, data parallel.

Every rank bins its own rows into ``bins`` equal-width bins per feature between the global
minimum and maximum (two allreduces at start). A tree grows level by level: each rank builds
per-(node, feature, bin) sums of gradients and hessians over its rows, one allreduce sums those
histograms, and every rank then picks the same best split from the same global histograms.
No rank ever sees another rank's rows; messages are O(nodes x features x bins) per level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs._common import dense
from jobs.base import NON_NEGATIVE, POSITIVE, Allowed, GroupComm, Shard, Solver

_BLOCK = 32768


class GradientBoostedTrees(Solver):
    """Boosting of depth-``max_depth`` trees on the squared loss 1/2 mean (F(x) - y)^2.

    One iteration adds one tree (Newton leaf values -G/(H + l2), shrunk by ``learning_rate``).
    A node splits at the bin boundary of largest gain if both children keep hessian weight
    >= ``min_child_weight``; otherwise it passes all its rows to its left child.
    """

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {
        "max_depth": 4, "learning_rate": 0.3, "bins": 32, "l2": 1.0, "min_child_weight": 1.0,
    }
    allowed: ClassVar[dict[str, Allowed]] = {
        "max_depth": Allowed(lo=1, hi=16), "learning_rate": POSITIVE, "bins": Allowed(lo=2, hi=256),
        "l2": NON_NEGATIVE, "min_child_weight": NON_NEGATIVE,
    }
    label_kind: ClassVar[str] = "real"
    dataset_kind: ClassVar[str] = "regression"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        assert shard.y is not None
        self._y = np.asarray(shard.y, dtype=np.float64)
        X = dense(shard.X)
        lo = comm.allreduce(X.min(axis=0, initial=np.inf), op="min")
        hi = comm.allreduce(X.max(axis=0, initial=-np.inf), op="max")
        bins = int(self.params["bins"])
        self.lo = lo
        self.width = np.where(hi > lo, (hi - lo) / bins, 1.0)
        self._codes = self._bin(X)
        (total,) = self.global_sum(self._y.sum())
        self.base = self._base_score(float(total[0]) / shard.n_rows)
        self.trees: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._F = np.full(shard.n_local, self.base)

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """The bin edges, one tree an iteration (``2^max_depth`` leaves and ``2^max_depth - 1``
        splits: 24 bytes a leaf), and a step's histograms at the deepest level (``2^(max_depth
        - 1)`` nodes x features x bins, gradients and hessians) with their allreduce message
        and result and the split search's cumulative sums and gains: about 10 histograms.

        Unlike the other solvers it also counts its rows of data: it densifies them (a sparse
        file too) and bins them, 17 bytes a cell at the peak (two float64 copies and the uint8
        codes), and a job starts on one rank, which holds every row."""
        depth, bins = int(params["max_depth"]), int(params["bins"])
        trees = (iterations or 0) * (24 * 2**depth - 16)
        data = 17 * rows * features
        return data + 8 * 2 * features + trees + 8 * 10 * 2 ** (depth - 1) * features * bins

    # --- loss-specific pieces (squared loss here) ---------------------------------------
    def _base_score(self, mean_y: float) -> float:
        return mean_y

    def _loss_grad_hess(self, F: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        r = F - self._y
        return 0.5 * float(r @ r), r, np.ones_like(r)

    # --- trees ------------------------------------------------------------------------------
    def _bin(self, X: np.ndarray) -> np.ndarray:
        bins = int(self.params["bins"])
        codes = np.floor((X - self.lo) / self.width)
        return np.clip(codes, 0, bins - 1).astype(np.uint8)

    def _histograms(self, node: np.ndarray, n_nodes: int, g: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Local (2, nodes, features, bins) sums of g and h."""
        d, bins = self._codes.shape[1], int(self.params["bins"])
        size = n_nodes * d * bins
        offsets = (np.arange(d) * bins)[None, :]
        out = np.zeros((2, size))
        for a in range(0, len(node), _BLOCK):
            sl = slice(a, a + _BLOCK)
            idx = (node[sl, None] * (d * bins) + offsets + self._codes[sl]).ravel()
            out[0] += np.bincount(idx, np.repeat(g[sl], d), minlength=size)
            out[1] += np.bincount(idx, np.repeat(h[sl], d), minlength=size)
        return out.reshape(2, n_nodes, d, bins)

    def _best_splits(self, hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per node: split feature (-1 for none) and threshold bin, from global histograms."""
        lam, mcw = float(self.params["l2"]), float(self.params["min_child_weight"])
        GL, HL = np.cumsum(hist[0], axis=2)[..., :-1], np.cumsum(hist[1], axis=2)[..., :-1]
        G, H = hist[0, :, :1].sum(axis=2)[..., None], hist[1, :, :1].sum(axis=2)[..., None]
        GR, HR = G - GL, H - HL
        gain = GL**2 / (HL + lam) + GR**2 / (HR + lam) - G**2 / (H + lam)
        gain = np.where((HL >= mcw) & (HR >= mcw), gain, -np.inf)
        flat = gain.reshape(gain.shape[0], -1)
        best = np.argmax(flat, axis=1)
        feat, thr = np.divmod(best, gain.shape[2])
        feat = np.where(flat[np.arange(len(best)), best] > 1e-12, feat, -1)
        return feat, thr

    def _route(self, codes: np.ndarray, node: np.ndarray, feat: np.ndarray, thr: np.ndarray) -> np.ndarray:
        f = feat[node]
        right = (f >= 0) & (codes[np.arange(len(node)), np.maximum(f, 0)] > thr[node])
        return 2 * node + right

    def _predict_tree(self, codes: np.ndarray, tree: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        feat, thr, leaf = tree
        node = np.zeros(len(codes), dtype=np.int64)
        for level in range(int(self.params["max_depth"])):
            first = 2**level - 1
            node = self._route(codes, node, feat[first : 2 * first + 1], thr[first : 2 * first + 1])
        return leaf[node]

    def step(self) -> float:
        """Grow one tree on the current gradients; returns the mean loss before adding it."""
        depth, n = int(self.params["max_depth"]), self.shard.n_rows
        loss, g, h = self._loss_grad_hess(self._F)
        node = np.zeros(self.shard.n_local, dtype=np.int64)
        feats, thrs = [], []
        total_loss = 0.0
        for level in range(depth):
            hist = self._histograms(node, 2**level, g, h)
            if level == 0:
                tl, hist = self.global_sum(loss, hist)
                total_loss = float(tl[0])
            else:
                (hist,) = self.global_sum(hist)
            feat, thr = self._best_splits(hist)
            feats.append(feat)
            thrs.append(thr)
            node = self._route(self._codes, node, feat, thr)
        leaves = 2**depth
        (sums,) = self.global_sum(np.stack([np.bincount(node, g, leaves), np.bincount(node, h, leaves)]))
        lam, lr = float(self.params["l2"]), float(self.params["learning_rate"])
        leaf = np.where(sums[1] > 0, -lr * sums[0] / (sums[1] + lam), 0.0)
        self.trees.append((np.concatenate(feats), np.concatenate(thrs), leaf))
        self._F = self._F + leaf[node]
        return total_loss / n

    def get_state(self) -> dict[str, np.ndarray]:
        """Binning, base score and every tree (split features, threshold bins, leaf values)."""
        t, depth = len(self.trees), int(self.params["max_depth"])
        return {
            "lo": self.lo.copy(), "width": self.width.copy(), "base": np.array([self.base]),
            "feat": np.array([tr[0] for tr in self.trees], dtype=np.int64).reshape(t, 2**depth - 1),
            "thr": np.array([tr[1] for tr in self.trees], dtype=np.int64).reshape(t, 2**depth - 1),
            "leaf": np.array([tr[2] for tr in self.trees]).reshape(t, 2**depth),
        }

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore the ensemble and recompute this rank's predictions from it."""
        self.lo = np.array(state["lo"], dtype=np.float64)
        self.width = np.array(state["width"], dtype=np.float64)
        self.base = float(np.asarray(state["base"])[0])
        self._codes = self._bin(dense(self.shard.X))
        self.trees = [
            (np.array(f, dtype=np.int64), np.array(t, dtype=np.int64), np.array(v, dtype=np.float64))
            for f, t, v in zip(state["feat"], state["thr"], state["leaf"], strict=True)
        ]
        F = np.full(self.shard.n_local, self.base)
        for tree in self.trees:
            F = F + self._predict_tree(self._codes, tree)
        self._F = F


class GBTClassifier(GradientBoostedTrees):
    """Gradient-boosted trees for binary labels 0/1 on the logistic loss (mean log-loss)."""

    label_kind: ClassVar[str] = "binary"
    dataset_kind: ClassVar[str] = "classification"

    def _base_score(self, mean_y: float) -> float:
        p = min(max(mean_y, 1e-6), 1.0 - 1e-6)
        return float(np.log(p / (1.0 - p)))

    def _loss_grad_hess(self, F: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        s = 2.0 * self._y - 1.0
        p = np.exp(-np.logaddexp(0.0, -F))
        return float(np.logaddexp(0.0, -s * F).sum()), p - self._y, p * (1.0 - p)
