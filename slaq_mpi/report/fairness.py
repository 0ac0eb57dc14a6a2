"""Metrics that compare policies beyond loss: utility earned, finish-time fairness and speedup.

Pure functions of a run's traces (:class:`~slaq_mpi.report.evaluation.RunData`), as in
:mod:`slaq_mpi.report.evaluation`:

* utility: a job's ``utility:`` spec evaluated at its completion time (:func:`job_utility`);
* finish-time fairness ``rho`` (Themis): completion time over the time alone on an equal share
  (:func:`rhos`);
* speedup (Pollux): the loss reduction a job made over what an equal share would have made in
  the same time (:func:`speedups`), summarized by a power mean (:func:`power_mean`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from slaq_mpi.report.evaluation import JobTrace, RunData, normalized_loss, observed_end

__all__ = ["P_MEAN_EXPONENT", "job_utility", "power_mean", "rhos", "speedups", "total_utility"]

P_MEAN_EXPONENT = -1.0  # the fairness exponent of p_mean_speedup (Pollux's default)


def job_utility(job: JobTrace) -> float:
    """Utility the job earned: its ``utility:`` at its completion time (0 if unfinished/none)."""
    if not job.utility or not math.isfinite(job.end):
        return 0.0
    from slaq_mpi.policies.utility import utility_at

    return float(utility_at(job.utility, job.end - job.arrival))


def total_utility(run: RunData) -> float:
    """Sum of :func:`job_utility` over the run's jobs."""
    return float(sum(job_utility(j) for j in run.jobs.values()))


def _seconds_model(job: JobTrace) -> Callable[[np.ndarray], np.ndarray] | None:
    """Seconds per iteration as a function of (fractional) cores: the job's true model, else
    one fitted to its observations; a share below one core is time-slicing."""
    if job.scaling is not None:
        work, overhead, comm = job.scaling
    else:
        pairs = job.throughput if job.throughput is not None and len(job.throughput) else (
            np.column_stack((job.cores, job.iter_seconds)) if len(job.cores) else np.zeros((0, 2)))
        if len(pairs) == 0:
            return None
        from slaq_mpi.sim.scaling import fit_scaling

        m = fit_scaling((float(a), float(s)) for a, s in pairs)
        work, overhead, comm = m.work, m.overhead, m.comm

    def seconds(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        whole = np.maximum(a, 1.0)
        with np.errstate(divide="ignore"):  # a < 1: time-slicing (a share of 0 takes forever)
            return np.where(a < 1, (work + overhead) / a, work / whole + overhead + comm * np.log2(whole))

    return seconds


def _run_end(run: RunData) -> float:
    end = observed_end(run)
    return end if math.isfinite(end) else 0.0


def rhos(run: RunData) -> np.ndarray:
    """Finish-time fairness ``rho`` of every job, in job order (NaN if it cannot be defined).

    ``rho = (end - arrival) / T_iso`` with ``T_iso = n * t(f)``: the time its ``n`` iterations
    take alone on ``f = min(max_cores, capacity / N)`` cores, ``N`` the time-averaged number of
    active jobs during the job's life in this run (Themis). Unfinished jobs use the run's end
    and the iterations they ran (at least one): a lower bound.
    """
    jobs = list(run.jobs.values())
    if not jobs:
        return np.zeros(0)
    end_run = _run_end(run)
    arr = np.array([j.arrival for j in jobs])
    end = np.array([j.end if math.isfinite(j.end) else end_run for j in jobs])
    life = np.maximum(end - arr, 1e-12)
    overlap = np.clip(np.minimum(end[:, None], end[None, :]) - np.maximum(arr[:, None], arr[None, :]),
                      0.0, None)
    contention = np.maximum(overlap.sum(axis=1) / life, 1.0)
    out = np.full(len(jobs), np.nan)
    for i, job in enumerate(jobs):
        seconds = _seconds_model(job)
        if seconds is None:
            continue
        cap = job.max_cores if job.max_cores > 0 else run.capacity
        share = min(float(cap), run.capacity / contention[i])
        isolated = max(len(job.loss), 1) * float(seconds(share))
        out[i] = (end[i] - arr[i]) / isolated if isolated > 0 else np.nan
    return out


def _progress_at(job: JobTrace, t: np.ndarray) -> np.ndarray:
    """Iterations done by times ``t`` (fractional: iterations advance linearly as they run)."""
    ends = np.asarray(job.time, dtype=np.float64)
    starts = ends - np.asarray(job.iter_seconds, dtype=np.float64)[: len(ends)]
    starts = np.maximum(starts, np.concatenate(([-np.inf], ends[:-1])))
    xp = np.ravel(np.column_stack((starts, ends)))
    fp = np.ravel(np.column_stack((np.arange(len(ends)), np.arange(1, len(ends) + 1))))
    return np.interp(t, xp, fp.astype(np.float64), left=0.0)


def speedups(run: RunData, l_star: Mapping[str, float]) -> np.ndarray:
    """Measured speedup of every job (Pollux's speedup over an equal share), in job order.

    In every epoch the job is active, its speedup is the true normalized loss reduction it
    made over the reduction it would have made from the same iteration on an equal share
    ``min(max_cores, capacity / N_e)`` (``N_e`` jobs active at the epoch start) for the same
    time (0 in an epoch whose loss rose: near convergence a loss that creeps up by a hair,
    over the hair an equal share would have gained, gave ratios such as -150); a job's
    speedup is the time-weighted mean over the epochs where that equal share would make
    progress (NaN if none); a job active in some epoch that never ran an iteration has
    speedup 0. Losses past the last recorded one count as flat.
    """
    times = np.asarray(run.epoch_time, dtype=np.float64)
    names = list(run.jobs)
    out = np.full(len(names), np.nan)
    if len(times) == 0:
        return out
    stops = np.append(times[1:], max(_run_end(run), times[-1]))
    arr = np.array([j.arrival for j in run.jobs.values()])
    end = np.array([j.end if math.isfinite(j.end) else np.inf for j in run.jobs.values()])
    active = (arr[None, :] <= times[:, None] + 1e-9) & (times[:, None] < end[None, :])
    count = np.maximum(active.sum(axis=1), 1)
    for i, (name, job) in enumerate(run.jobs.items()):
        seconds = _seconds_model(job)
        n = len(job.loss)
        if n == 0:  # never ran while active: no progress where any share would have made some
            out[i] = 0.0 if active[:, i].any() else np.nan
            continue
        if seconds is None:
            continue
        q = np.concatenate(([1.0], normalized_loss(job.loss, float(job.loss[0]), l_star.get(name, 0.0))))
        rows = np.flatnonzero(active[:, i])
        t0, t1 = times[rows], np.minimum(stops[rows], end[i])
        k0, k1 = _progress_at(job, t0), _progress_at(job, t1)
        cap = job.max_cores if job.max_cores > 0 else run.capacity
        share = np.minimum(float(cap), run.capacity / count[rows])
        fair_k = np.minimum(k0 + (t1 - t0) / seconds(share), n)
        grid = np.arange(n + 1, dtype=np.float64)
        fair = np.interp(k0, grid, q) - np.interp(fair_k, grid, q)
        got = np.interp(k0, grid, q) - np.interp(k1, grid, q)
        ok = fair > 1e-12
        if ok.any():
            w = (t1 - t0)[ok]
            ratio = np.maximum(got[ok] / fair[ok], 0.0)  # a loss that rose: no progress, not less
            out[i] = float(np.sum(w * ratio) / max(np.sum(w), 1e-12))
    return out


def power_mean(values: np.ndarray, p: float = P_MEAN_EXPONENT) -> float:
    """Generalized mean of the finite values (geometric for ``p = 0``; 0 if ``p <= 0`` and any
    value is 0)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return math.nan
    v = np.maximum(v, 0.0)
    if p <= 0 and np.any(v == 0):
        return 0.0
    if p == 0:
        return float(np.exp(np.mean(np.log(v))))
    return float(np.mean(v**p) ** (1.0 / p))
