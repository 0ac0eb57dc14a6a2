"""Latent Dirichlet allocation by batch variational EM (Blei, Ng and Jordan, 2003)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, psi

from jobs.base import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Allowed, GroupComm, Shard, Solver


class LDA(Solver):
    """Topic model on a document-term count matrix (rows are documents, sparse CSR welcome).

    One iteration: the E-step fits every local document's variational Dirichlet ``gamma``
    (coordinate ascent from a fixed start, each document until its own mean change is below
    ``e_step_tol``), then the M-step sets the topic-word matrix ``beta`` to the normalized
    expected counts, summed over ranks. The loss is minus the evidence lower bound per word
    at the topics before the update; EM makes the bound increase every iteration.
    """

    convergence: ClassVar[str] = "linear"
    defaults: ClassVar[dict[str, Any]] = {
        "topics": 10, "alpha": 0.1, "e_step_iterations": 100, "e_step_tol": 1e-6,
    }
    allowed: ClassVar[dict[str, Allowed]] = {
        "topics": AT_LEAST_ONE, "alpha": POSITIVE, "e_step_iterations": AT_LEAST_ONE,
        "e_step_tol": NON_NEGATIVE,
    }
    needs_labels: ClassVar[bool] = False
    dataset_kind: ClassVar[str] = "documents"
    feature_kind: ClassVar[str] = "counts"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        C = sp.csr_matrix(shard.X, dtype=np.float64)
        C.sum_duplicates()
        C.eliminate_zeros()
        self._C = C
        self._doc = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
        (words,) = self.global_sum(C.data.sum())
        self._words = max(float(words[0]), 1.0)
        k, v = int(self.params["topics"]), shard.n_features
        beta = np.random.default_rng(seed).gamma(100.0, 0.01, size=(k, v))
        self.beta = beta / beta.sum(axis=1, keepdims=True)

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """The ``topics x vocabulary`` topic-word matrix (the vocabulary is the features), and
        a step's expected counts, allreduce message and result and normalized matrix: about 4
        such matrices."""
        return 8 * 4 * int(params["topics"]) * (features + 1)

    def e_step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local documents' ``gamma``, exp(E[log theta]) and per-word normalizers."""
        C, doc, alpha = self._C, self._doc, float(self.params["alpha"])
        k, n_docs = self.beta.shape[0], C.shape[0]
        bw = self.beta.T[C.indices]  # (nnz, k): beta of each document's words
        lengths = np.asarray(C.sum(axis=1)).ravel()
        gamma = np.full((n_docs, k), alpha) + lengths[:, None] / k
        active = np.ones(n_docs, dtype=bool)
        tol = float(self.params["e_step_tol"])
        for _ in range(int(self.params["e_step_iterations"])):
            et = np.exp(psi(gamma) - psi(gamma.sum(axis=1, keepdims=True)))
            norm = np.einsum("ik,ik->i", et[doc], bw)
            ratio = sp.csr_matrix((C.data / norm, C.indices, C.indptr), shape=C.shape)
            new = alpha + et * np.asarray(ratio @ self.beta.T)
            change = np.abs(new - gamma).mean(axis=1)
            gamma = np.where(active[:, None], new, gamma)
            active &= change >= tol
            if not active.any():
                break
        et = np.exp(psi(gamma) - psi(gamma.sum(axis=1, keepdims=True)))
        norm = np.einsum("ik,ik->i", et[doc], bw)
        return gamma, et, norm

    def _local_bound(self, gamma: np.ndarray, norm: np.ndarray) -> float:
        alpha, k = float(self.params["alpha"]), gamma.shape[1]
        elog = psi(gamma) - psi(gamma.sum(axis=1, keepdims=True))
        words = float(self._C.data @ np.log(norm))
        per_doc = (gammaln(k * alpha) - k * gammaln(alpha) + ((alpha - gamma) * elog).sum(axis=1)
                   - gammaln(gamma.sum(axis=1)) + gammaln(gamma).sum(axis=1))
        return words + float(per_doc.sum())

    def step(self) -> float:
        """One variational EM iteration; returns minus the bound per word before it."""
        C = self._C
        gamma, et, norm = self.e_step()
        ratio = sp.csr_matrix((C.data / norm, C.indices, C.indptr), shape=C.shape)
        counts = np.asarray(ratio.T @ et).T * self.beta  # (k, v) expected topic-word counts
        bound, counts = self.global_sum(self._local_bound(gamma, norm), counts)
        totals = counts.sum(axis=1, keepdims=True)
        self.beta = np.where(totals > 0, counts / np.where(totals > 0, totals, 1.0), self.beta)
        return -float(bound[0]) / self._words

    def get_state(self) -> dict[str, np.ndarray]:
        """The topic-word matrix."""
        return {"beta": self.beta.copy()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore the topic-word matrix."""
        self.beta = np.array(state["beta"], dtype=np.float64)
