"""``goodput``: Pollux-style allocation (Qiao et al., OSDI 2021) for iterative CPU solvers.

Pollux's goodput is throughput times statistical efficiency; its cluster scheduler gives each
job a *speedup* (goodput on the candidate allocation relative to goodput on a fair share) and
maximizes the generalized (power) mean of the speedups with a fairness exponent ``p``.

Our adaptation (MPI ranks instead of GPUs, solvers with fixed semantics instead of adaptive
batch sizes):

* throughput: iterations per second on ``a`` cores, ``1 / t(a)`` from the brain's fitted
  ``t(a) = alpha / a + beta + gamma log2 a``;
* statistical efficiency: the predicted normalized loss reduction per iteration from the
  job's fitted loss curve (SLAQ's quality model). Their product over the next epoch is the
  predicted normalized reduction ``G_j(a)`` the job would make on ``a`` cores;
* speedup ``s_j(a) = G_j(a) / G_j(f_j)`` with ``f_j = min(cap_j, capacity / N)`` the equal
  share of the ``N`` active jobs (a share below one core is time-slicing). A job predicted to
  make no progress even on its fair share has ``s = 1`` on any allocation (nothing to gain);
* allocation: maximize ``(mean_j s_j^p)^(1/p)`` (geometric mean for ``p = 0``). The objective
  is a sum of concave per-job terms (``-s^p`` for ``p < 0``), so SLAQ's greedy over marginal
  gains (every job starts with one core, then one core at a time to the largest marginal gain
  of the objective) is the exact integer optimum when the terms are concave, and Pollux's
  genetic search is not needed. Cores nobody gains from are spread evenly up to each job's
  useful core count (work-conserving).
* ``p = 1`` maximizes the mean speedup (efficiency); ``p -> -inf`` approaches max-min
  fairness; Pollux's default ``p = -1`` balances them.
* more jobs than cores: every allocation leaves some job with speedup 0, so the power mean
  cannot rank them; the jobs with the least attained core-seconds (then earliest arrival) get
  one core each, so every waiting job's turn comes.

Pure function of the snapshot.
"""

from __future__ import annotations

import math

import numpy as np

from slaq_mpi.brain.allocate import top_up
from slaq_mpi.brain.forecast import build_forecast
from slaq_mpi.brain.outlook import Outlook, build_outlook
from slaq_mpi.policies._params import curve_memo, require
from slaq_mpi.policies.snapshot import ClusterSnapshot

__all__ = ["GoodputPolicy"]


class GoodputPolicy:
    """Maximize the power mean (exponent ``p``) of predicted speedups over the equal share.

    Args:
        p: fairness exponent (Pollux's default -1; must be finite and <= 1).
        window, decay: loss-curve fitting parameters (as the ``slaq`` policy).
    """

    name = "goodput"

    def __init__(self, p: float = -1.0, window: int = 16, decay: float = 6.0) -> None:
        require("p", p, math.isfinite(p) and p <= 1, "a finite number <= 1")
        self.p = float(p)
        self._curves = curve_memo(window, decay)

    def _outlook(self, snapshot: ClusterSnapshot) -> Outlook:
        return build_outlook(snapshot, build_forecast(snapshot, self._curves))

    def speedups(self, snapshot: ClusterSnapshot, cores: dict[str, float]) -> dict[str, float]:
        """Predicted speedup of each job on the given cores (for reports and tests)."""
        out = self._outlook(snapshot)
        a = np.array([float(cores.get(i, 0.0)) for i in out.ids])
        base = out.progress(out.share)
        s = np.where(base > 0, out.progress(a) / np.where(base > 0, base, 1.0), 1.0)
        return dict(zip(out.ids, s.tolist(), strict=True))

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id for the next epoch."""
        if not snapshot.jobs or snapshot.capacity <= 0:
            return {j.job_id: 0 for j in snapshot.jobs}
        capacity = int(snapshot.capacity)
        if capacity < len(snapshot.jobs):
            order = sorted(snapshot.jobs, key=lambda j: (j.attained_core_seconds, j.arrival, j.job_id))
            chosen = {j.job_id for j in order[:capacity]}
            return {j.job_id: int(j.job_id in chosen) for j in snapshot.jobs}
        out = self._outlook(snapshot)
        base = out.progress(out.share)
        moving = base > 0
        scale = np.where(moving, base, 1.0)
        p = self.p

        def gain(rows: np.ndarray, cores: np.ndarray) -> np.ndarray:
            s = out.progress(cores, rows) / scale[rows, None]
            s = np.where(moving[rows, None], s, 1.0)
            return power_utility(s, p)

        count = len(out.ids)
        alloc = top_up(gain, np.ones(count, dtype=np.int64), out.forecast.caps, capacity - count,
                       spread=out.useful)
        return dict(zip(out.ids, alloc.tolist(), strict=True))


def power_utility(speedup: np.ndarray, p: float) -> np.ndarray:
    """A per-job term whose sum the power mean of exponent ``p`` increases with.

    ``s^p`` for ``p > 0``, ``log s`` for ``p = 0``, ``-s^p`` for ``p < 0``.
    """
    s = np.maximum(np.asarray(speedup, dtype=np.float64), 1e-12)
    if p == 0:
        return np.log(s)
    return np.sign(p) * s**p
