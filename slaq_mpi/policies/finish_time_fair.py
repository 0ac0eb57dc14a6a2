"""``finish-time-fair``: Shockwave / Themis-style finish-time fairness for iterative solvers.

Themis defines a job's finish-time fairness ``rho = T_shared / T_isolated``: its completion
time in the shared cluster over its completion time had it run alone on ``1/N`` of the
cluster. Shockwave keeps the worst ``rho`` low while planning for efficiency, and re-plans as
jobs' throughput changes (dynamic adaptation). Our adaptation, re-planned every epoch from
the brain's predictions (so it follows every change in the fitted curves and speeds):

* work: the job's remaining iterations to its stopping rule (``max_iterations`` minus the
  iterations run; without a budget, the iterations the fitted curve needs for 95% of its
  predicted remaining reduction);
* ``t(a)``: the brain's fitted seconds per iteration on ``a`` cores;
* predicted ``rho_j(a) = (elapsed_j + R_j t_j(a)) / ((n_j + R_j) t_j(f_j))`` if the job keeps
  ``a`` cores from now on, with ``n_j`` iterations done, ``R_j`` remaining, and
  ``f_j = min(cap_j, capacity / N)`` the equal share of the ``N`` active jobs now (a share
  below one core is time-slicing, ``t(1) / f``);
* fairness: the smallest ``rho*`` such that giving every job the fewest cores with
  ``rho_j(a_j) <= rho*`` (at least 1, at most its useful cores; a job that cannot reach
  ``rho*`` gets its useful cores) fits in the capacity. ``rho_j`` falls as ``a`` grows (up to
  the useful cores), so a bisection on ``rho*`` over vectorized per-job bisections on ``a``
  finds it; ``slack >= 1`` relaxes the target to ``slack * rho*``;
* efficiency: the cores left over go by SLAQ's marginal predicted normalized loss reduction
  (largest first), then evenly up to the useful cores (work-conserving). Extra cores only
  lower a job's ``rho``, so the fairness target still holds;
* more jobs than cores: the jobs with the largest predicted ``rho`` on one core (the ones
  falling furthest behind, e.g. after waiting) get one core each.

Pure function of the snapshot.
"""

from __future__ import annotations

import math

import numpy as np

from slaq_mpi.brain.allocate import top_up
from slaq_mpi.brain.forecast import build_forecast
from slaq_mpi.brain.outlook import Outlook, build_outlook, min_cores_within
from slaq_mpi.policies._params import curve_memo, require
from slaq_mpi.policies.snapshot import ClusterSnapshot

__all__ = ["FinishTimeFairPolicy", "predicted_rho"]

_BISECTIONS = 48


def predicted_rho(out: Outlook, cores: np.ndarray) -> np.ndarray:
    """Predicted finish-time fairness of every job if it keeps ``cores`` from now on."""
    total = out.done + out.remaining
    isolated = total * out.seconds(out.share)
    shared = out.elapsed + out.remaining * out.seconds(np.maximum(cores, 1e-12))
    return np.where(np.asarray(cores) > 0, shared / isolated, np.inf)


class FinishTimeFairPolicy:
    """Minimize the worst predicted finish-time fairness ``rho``; leftovers by efficiency.

    Args:
        slack: allowed factor over the least achievable worst ``rho`` (>= 1).
        window, decay: loss-curve fitting parameters (as the ``slaq`` policy).
    """

    name = "finish-time-fair"

    def __init__(self, slack: float = 1.0, window: int = 16, decay: float = 6.0) -> None:
        require("slack", slack, math.isfinite(slack) and slack >= 1.0, "a finite number >= 1")
        self.slack = float(slack)
        self._curves = curve_memo(window, decay)

    def _needed(self, out: Outlook, target: float) -> np.ndarray:
        """Fewest cores per job with predicted ``rho <= target`` (useful cores if none)."""
        isolated = (out.done + out.remaining) * out.seconds(out.share)
        limit = (target * isolated - out.elapsed) / out.remaining
        return min_cores_within(out, limit)

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id for the next epoch."""
        if not snapshot.jobs or snapshot.capacity <= 0:
            return {j.job_id: 0 for j in snapshot.jobs}
        out = build_outlook(snapshot, build_forecast(snapshot, self._curves))
        capacity = int(snapshot.capacity)
        count = len(out.ids)
        if capacity < count:
            behind = predicted_rho(out, np.ones(count))
            order = np.lexsort((np.arange(count), out.arrival, -behind))
            alloc = np.zeros(count, dtype=np.int64)
            alloc[order[:capacity]] = 1
            return dict(zip(out.ids, alloc.tolist(), strict=True))
        best = predicted_rho(out, out.useful.astype(np.float64))
        worst = predicted_rho(out, np.ones(count))
        lo, hi = float(best.max()), float(max(worst.max(), best.max())) * (1.0 + 1e-9)
        if int(self._needed(out, lo).sum()) > capacity:
            llo, lhi = math.log(lo), math.log(hi)
            for _ in range(_BISECTIONS):
                mid = 0.5 * (llo + lhi)
                if int(self._needed(out, math.exp(mid)).sum()) <= capacity:
                    lhi = mid
                else:
                    llo = mid
            hi = math.exp(lhi)
        else:
            hi = lo
        base = self._needed(out, hi * self.slack)
        if int(base.sum()) > capacity:  # slack rounding: fall back to the exact target
            base = self._needed(out, hi)
        if int(base.sum()) > capacity:  # cannot happen (one core each meets hi); never overbook
            base = np.ones(count, dtype=np.int64)
        fc = out.forecast

        def gain(rows: np.ndarray, cores: np.ndarray) -> np.ndarray:
            return fc.reduction(cores, rows)

        alloc = top_up(gain, base, np.maximum(fc.caps, base), capacity - int(base.sum()),
                       spread=np.maximum(out.useful, base), min_gain=1e-9)
        return dict(zip(out.ids, alloc.tolist(), strict=True))
