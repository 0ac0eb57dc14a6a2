"""A multilayer perceptron classifier in numpy: one tanh hidden layer, softmax output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs._common import class_labels
from jobs.base import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Allowed, GroupComm, Shard, Solver

_PARAMS = ("W1", "b1", "W2", "b2")


class MLPClassifier(Solver):
    """Softmax classifier with one ``hidden``-unit tanh layer, trained by full-batch gradient
    descent with heavy-ball momentum on the mean cross-entropy plus l2/2 |W|^2.

    Labels are integers 0..classes-1 (``classes: 0`` reads the count from the labels).
    Weights start Glorot-uniform from the job's seed, the same on any number of ranks.
    """

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {
        "hidden": 32, "learning_rate": 0.5, "momentum": 0.9, "l2": 1e-4, "classes": 0,
    }
    allowed: ClassVar[dict[str, Allowed]] = {
        "hidden": AT_LEAST_ONE, "learning_rate": POSITIVE, "momentum": Allowed(lo=0, hi=1, hi_open=True),
        "l2": NON_NEGATIVE, "classes": NON_NEGATIVE,
    }
    label_kind: ClassVar[str] = "classes"
    class_count: ClassVar[str] = "classes"
    dataset_kind: ClassVar[str] = "blobs"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        self._labels = class_labels(shard)
        k = int(self.params["classes"])
        top = int(comm.allreduce(np.array([float(self._labels.max(initial=0))]), op="max")[0])
        if k <= 0:
            k = top + 1
        elif top >= k:
            raise ValueError(f"mlp classes {k}: the labels go up to {top}; set classes to at least "
                             f"{top + 1}, or to 0 to count them from the labels")
        self.classes = max(k, 2)
        d, h = shard.n_features, int(self.params["hidden"])
        rng = np.random.default_rng(seed)
        a1, a2 = np.sqrt(6.0 / (d + h)), np.sqrt(6.0 / (h + self.classes))
        self.W1 = rng.uniform(-a1, a1, size=(d, h))
        self.b1 = np.zeros(h)
        self.W2 = rng.uniform(-a2, a2, size=(h, self.classes))
        self.b2 = np.zeros(self.classes)
        self.velocity = [np.zeros_like(getattr(self, name)) for name in _PARAMS]

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """Weights and biases (``features x hidden + hidden + hidden x classes + classes``
        floats) and their momentum buffers, and a step's local gradients, allreduce message
        and result and regularized gradients: 6 copies in all. ``classes`` 0 counts as 2."""
        h, c = int(params["hidden"]), max(int(params["classes"]), 2)
        return 8 * 6 * (features * h + h + h * c + c)

    def loss_and_grads(self) -> tuple[float, list[np.ndarray]]:
        """Global objective and its gradients in W1, b1, W2, b2 (collective)."""
        X, lab, n = self.shard.X, self._labels, self.shard.n_rows
        H = np.tanh(np.asarray(X @ self.W1) + self.b1)
        logits = H @ self.W2 + self.b2
        logits -= logits.max(axis=1, keepdims=True)
        lse = np.log(np.exp(logits).sum(axis=1))
        rows = np.arange(len(lab))
        nll = float((lse - logits[rows, lab]).sum())
        delta = np.exp(logits - lse[:, None])
        delta[rows, lab] -= 1.0
        dH = (delta @ self.W2.T) * (1.0 - H * H)
        total, gW1, gb1, gW2, gb2 = self.global_sum(nll, X.T @ dH, dH.sum(0), H.T @ delta,
                                                    delta.sum(0))
        l2 = float(self.params["l2"])
        grads = [gW1 / n + l2 * self.W1, gb1 / n, gW2 / n + l2 * self.W2, gb2 / n]
        penalty = 0.5 * l2 * (float(np.vdot(self.W1, self.W1)) + float(np.vdot(self.W2, self.W2)))
        return float(total[0]) / n + penalty, grads

    def step(self) -> float:
        """One momentum gradient step; returns the objective before it."""
        loss, grads = self.loss_and_grads()
        lr, mu = float(self.params["learning_rate"]), float(self.params["momentum"])
        for i, (name, g) in enumerate(zip(_PARAMS, grads, strict=True)):
            self.velocity[i] = mu * self.velocity[i] - lr * g
            setattr(self, name, getattr(self, name) + self.velocity[i])
        return loss

    def get_state(self) -> dict[str, np.ndarray]:
        """Weights, biases and momentum buffers."""
        state = {name: getattr(self, name).copy() for name in _PARAMS}
        state.update({f"v_{name}": v.copy() for name, v in zip(_PARAMS, self.velocity, strict=True)})
        return state

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore weights, biases and momentum buffers."""
        for name in _PARAMS:
            setattr(self, name, np.array(state[name], dtype=np.float64))
        self.velocity = [np.array(state[f"v_{name}"], dtype=np.float64) for name in _PARAMS]
        self.classes = self.W2.shape[1]
