"""The simulator's scaling model: seconds per iteration as a function of cores.

``t(a) = work / a + overhead + comm * log2(a)``: the parallel part shrinks with cores, a fixed
per-iteration cost does not, and the allreduce grows with the log of the group size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["ScalingModel", "fit_scaling"]


@dataclass(frozen=True)
class ScalingModel:
    """Per-job scaling: ``work`` one-core seconds, ``overhead`` and ``comm`` seconds."""

    work: float
    overhead: float = 0.0
    comm: float = 0.0

    def seconds(self, cores: int | float) -> float:
        """Seconds per iteration on ``cores`` cores (inf for 0 cores)."""
        if cores <= 0:
            return math.inf
        return self.work / cores + self.overhead + self.comm * math.log2(cores)

    def seconds_array(self, cores: np.ndarray) -> np.ndarray:
        """Vectorized :meth:`seconds` for cores >= 1."""
        a = np.asarray(cores, dtype=np.float64)
        return self.work / a + self.overhead + self.comm * np.log2(a)


def fit_scaling(pairs: Iterable[tuple[float, float]]) -> ScalingModel:
    """Least-squares non-negative fit of the model to observed (cores, seconds) pairs.

    With observations at one core count only, all the time is attributed to ``work``. A fit
    that would make one core take no time (all of it in the ``log2`` term) is redone without
    that term.
    """
    data = np.array([(float(a), float(s)) for a, s in pairs if a >= 1 and s > 0 and math.isfinite(s)])
    if len(data) == 0:
        raise ValueError("no (cores, seconds) observations to fit")
    a, s = data[:, 0], data[:, 1]
    if len(np.unique(a)) < 2:
        return ScalingModel(work=float(np.median(s * a)))
    from scipy.optimize import nnls  # here: scipy.optimize adds ~0.4 s to every `slaq` start

    A = np.column_stack((1.0 / a, np.ones_like(a), np.log2(a)))
    coef, _ = nnls(A, s)
    if coef[0] + coef[1] <= 1e-9 * float(np.median(s)):
        # all the time in the log2 term: one core would take no time at all (iterations that
        # got slower with more cores, as on an oversubscribed node); fit without that term
        coef, _ = nnls(A[:, :2], s)
        coef = np.append(coef, 0.0)
    return ScalingModel(work=float(coef[0]), overhead=float(coef[1]), comm=float(coef[2]))
