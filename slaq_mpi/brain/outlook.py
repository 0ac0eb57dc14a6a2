"""Per-job predictions beyond the next epoch's reduction, built on a :class:`Forecast`.

For every active job and any (possibly fractional) core count ``a``:

* seconds per iteration ``t(a)``; a share below one core is time-slicing: ``t(1) / a``;
* remaining iterations to the stopping rule (``max_iterations`` minus iterations run; without
  a budget, the iterations until ``DONE_SHARE`` of the predicted remaining normalized
  reduction is done);
* the predicted normalized loss reduction over the next epoch;
* the equal share ``min(cap, capacity / N)`` of the ``N`` active jobs;
* useful cores: the most cores that still make an iteration faster (1 for a job predicted to
  have no parallel work).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from slaq_mpi.brain.forecast import ClusterView, Forecast

__all__ = ["Outlook", "build_outlook", "min_cores_within"]

HORIZON_ITERATIONS = 1.0e6  # without a budget, work is predicted up to this many iterations
DONE_SHARE = 0.95  # ... until this share of the predicted remaining reduction is done
FLAT_SPEEDUP = 1e-6  # a job whose useful cores are not this much faster than 1 core uses 1


@dataclass(frozen=True)
class Outlook:
    """Per-job predictions for one decision; row ``i`` is ``forecast.job_ids[i]``.

    Attributes:
        forecast: the forecast (curves, throughput model, caps).
        done: iterations run so far (losses reported).
        remaining: predicted iterations still to run (>= 1).
        arrival: each job's arrival time (seconds since the experiment started).
        elapsed: seconds since each job arrived.
        useful: most cores that still speed each job up (``>= 1``, ``<= cap``).
        share: the equal share ``min(cap, capacity / N)`` (fractional).
        capacity: cores of the cluster.
    """

    forecast: Forecast
    done: np.ndarray
    remaining: np.ndarray
    arrival: np.ndarray
    elapsed: np.ndarray
    useful: np.ndarray
    share: np.ndarray
    capacity: int

    @property
    def ids(self) -> tuple[str, ...]:
        """Job ids in row order."""
        return self.forecast.job_ids

    def seconds(self, cores: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Seconds per iteration on ``cores`` (``(R,)`` or ``(R, K)``; fractional allowed)."""
        speed = self.forecast.speed if rows is None else self.forecast.speed.take(rows)
        a = np.asarray(cores, dtype=np.float64)
        t = speed.seconds(np.maximum(a, 1.0))
        return np.where(a >= 1.0, t, t / np.maximum(a, 1e-12))

    def progress(self, cores: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Predicted normalized loss reduction over the next epoch on ``cores`` (0 for 0)."""
        fc = self.forecast
        a = np.asarray(cores, dtype=np.float64)
        rem = fc.remaining if rows is None else fc.remaining[rows]
        rem = rem[:, None] if a.ndim > 1 else rem
        iters = np.minimum(fc.epoch_seconds / self.seconds(a, rows), rem)
        curves = fc.curves if rows is None else fc.curves.take(rows)
        return np.where(a > 0, curves.reduction(iters), 0.0)


def _remaining(fc: Forecast) -> np.ndarray:
    """Iterations to the stopping rule: the budget left, else a prediction from the curve."""
    rem = fc.remaining.copy()
    open_ended = ~np.isfinite(rem)
    if open_ended.any():
        rows = np.flatnonzero(open_ended)
        curves = fc.curves.take(rows)
        grid = np.geomspace(1.0, HORIZON_ITERATIONS, 61)
        red = curves.reduction(np.broadcast_to(grid, (rows.size, grid.size)))
        target = DONE_SHARE * red[:, -1:]
        reached = red >= target
        first = np.where(reached.any(axis=1), reached.argmax(axis=1), grid.size - 1)
        rem[rows] = grid[first]
    return np.maximum(rem, 1.0)


def build_outlook(cluster: ClusterView, fc: Forecast) -> Outlook:
    """Predictions for every active job of ``cluster`` from its forecast ``fc`` (at least one job)."""
    by_id = {j.job_id: j for j in cluster.jobs}
    jobs = [by_id[i] for i in fc.job_ids]
    count = len(jobs)
    done = np.fromiter((len(j.losses) for j in jobs), dtype=np.float64, count=count)
    arrival = np.fromiter((j.arrival for j in jobs), dtype=np.float64, count=count)
    capacity = max(int(cluster.capacity), 1)
    share = np.minimum(fc.caps.astype(np.float64), capacity / max(count, 1))
    useful = np.maximum(fc.useful_cores(), 1)
    t1, tu = fc.speed.seconds(np.ones(count)), fc.speed.seconds(useful.astype(np.float64))
    useful = np.where(tu < t1 * (1.0 - FLAT_SPEEDUP), useful, 1)  # no parallel work: 1 core
    return Outlook(
        forecast=fc, done=done, remaining=_remaining(fc), arrival=arrival,
        elapsed=np.maximum(float(cluster.now) - arrival, 0.0),
        useful=useful, share=share, capacity=capacity,
    )


def min_cores_within(outlook: Outlook, limit: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Per job, the fewest whole cores in ``[1, useful]`` with ``t(a) <= limit``.

    ``t`` decreases on that range, so a vectorized bisection finds it; jobs that miss the
    limit even on ``useful`` cores get ``useful`` (their best).
    """
    useful = outlook.useful if rows is None else outlook.useful[rows]
    lo = np.ones(useful.shape, dtype=np.int64)
    hi = useful.astype(np.int64).copy()
    limit = np.asarray(limit, dtype=np.float64) * (1.0 + 1e-9)  # equality counts despite rounding
    while True:
        open_ = lo < hi
        if not open_.any():
            return hi
        mid = (lo + hi) // 2
        ok = outlook.seconds(mid.astype(np.float64), rows) <= limit
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid + 1, lo)
