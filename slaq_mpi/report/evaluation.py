"""The paper's evaluation metrics as pure functions of a run's traces.

A run (real or simulated) is a :class:`~slaq_mpi.storage.metrics_schema.RunData`, its
metrics.h5 in memory: per job the loss of every iteration and the time it ended, plus the
allocation of every epoch. The metrics (docs/simulation.md, "Metrics"):

* normalized loss of a job at time t: ``(L(t) - L*) / (L_0 - L*)``; it is 1.0 from the job's
  arrival until its first iteration has been reported, then the normalized loss of the latest
  iteration that ended by t (a step function);
* a job is *active* on ``[arrival, end)``; a job that never finished stays active to the end of
  the evaluation window;
* average normalized loss: the mean over active jobs at t, averaged over the time of the
  window at which at least one job is active (computed exactly: the losses are step functions);
* **the experiment window of a comparison** (:func:`comparison_window`): runs of the same
  jobs compared together are averaged over the SAME window, from the first arrival until the
  first of them has no job left (the earliest makespan end). Over that span every run has
  active jobs, so the mean over active jobs is defined for all of them; a run's own longer
  tail of nearly converged jobs is not averaged in (it would reward finishing late). One
  run alone is averaged over its own window;
* normalized loss job-seconds: every job's normalized loss integrated over its active time in
  the window, summed over jobs (:func:`normalized_loss_job_seconds`); :func:`mean_active_jobs`,
  how many were active;
* time to X% loss reduction: from arrival until the end of the first iteration whose normalized
  loss is <= 1 - X/100 (NaN if never reached: such jobs are left out of means and medians and
  counted in ``reached_X``);
* completion time (JCT): from a finished job's arrival to its end (:func:`completion_times`).

**The choice of L\\***: runs of the same jobs compared together must use the same L\\* per job.
:func:`common_l_star` takes, per job name, the lowest loss known in ANY of the runs given: the
minimum over every run's observed losses and every recorded converged loss (the simulator's
``l_star``). In simulation that is the curve's converged loss; for real runs it is the best loss
that job reached under any policy compared.

Utility, finish-time fairness and speedups are in :mod:`slaq_mpi.report.fairness`; the table
of every metric a report shows, in :mod:`slaq_mpi.report.summary`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np

from slaq_mpi.runtime.timing import next_decision
from slaq_mpi.storage.metrics_schema import JobTrace, RunData

__all__ = [
    "JobTrace",
    "RunData",
    "average_normalized_loss",
    "average_core_shares",
    "avg_normalized_loss_series",
    "common_l_star",
    "comparison_window",
    "completion_times",
    "core_share_by_loss_group",
    "evaluation_grid",
    "job_end",
    "makespan",
    "mean_active_jobs",
    "mean_core_shares",
    "normalized_loss",
    "normalized_loss_job_seconds",
    "normalized_loss_at",
    "observed",
    "observed_end",
    "reduction_times",
    "run_span",
    "time_to_reduction",
]

LOSS_GROUPS = ("high", "medium", "low")


# --- per-job functions ----------------------------------------------------------------------

def normalized_loss(loss: np.ndarray | float, l0: float, l_star: float) -> np.ndarray:
    """``(loss - l_star) / (l0 - l_star)``; all zeros when ``l0 <= l_star`` (nothing to gain)."""
    arr = np.asarray(loss, dtype=np.float64)
    span = l0 - l_star
    if not span > 0:
        return np.zeros_like(arr)
    return (arr - l_star) / span


def normalized_loss_at(job: JobTrace, l_star: float, t: np.ndarray) -> np.ndarray:
    """The job's normalized loss at times ``t`` (NaN before arrival and from its end on)."""
    t = np.asarray(t, dtype=np.float64)
    out = np.full(t.shape, np.nan)
    end = job.end if math.isfinite(job.end) else np.inf
    active = (t >= job.arrival) & (t < end)
    if not active.any():
        return out
    if len(job.loss) == 0:
        out[active] = 1.0
        return out
    norm = np.concatenate(([1.0], normalized_loss(job.loss, float(job.loss[0]), l_star)))
    idx = np.searchsorted(job.time, t[active], side="right")
    out[active] = norm[idx]
    return out


def time_to_reduction(job: JobTrace, l_star: float, percent: float) -> float:
    """Seconds from arrival until the normalized loss first falls to ``1 - percent/100``."""
    if len(job.loss) == 0:
        return math.nan
    norm = normalized_loss(job.loss, float(job.loss[0]), l_star)
    hit = np.flatnonzero(norm <= 1.0 - percent / 100.0 + 1e-12)
    if len(hit) == 0:
        return math.nan
    return float(job.time[hit[0]] - job.arrival)


# --- whole-run functions --------------------------------------------------------------------

def common_l_star(runs: Iterable[RunData]) -> dict[str, float]:
    """The same L* per job name for every run given: the lowest loss known in any of them."""
    best: dict[str, float] = {}
    for run in runs:
        for name, job in run.jobs.items():
            cands = [best.get(name, math.inf)]
            if len(job.loss):
                cands.append(float(np.nanmin(job.loss)))
            if job.l_star is not None and math.isfinite(job.l_star):
                cands.append(float(job.l_star))
            best[name] = min(cands)
    return {k: (v if math.isfinite(v) else 0.0) for k, v in best.items()}


def job_end(job: JobTrace) -> float:
    """When ``job`` was last seen: its end if it finished, else the end of its last reported
    iteration, else its arrival."""
    if math.isfinite(job.end):
        return job.end
    return float(job.time[-1]) if len(job.time) else job.arrival


def observed_end(run: RunData) -> float:
    """When the run stopped observing its jobs: its ``stopped`` time, else the decision due
    after its last one (:func:`~slaq_mpi.runtime.timing.next_decision`) or the last job end or
    iteration if later (NaN for a run with none of these)."""
    if math.isfinite(run.stopped):
        return run.stopped
    ends = [job_end(j) for j in run.jobs.values() if len(j.time) or math.isfinite(j.end)]
    if len(run.epoch_time):
        last = float(run.epoch_time[-1])
        due = [j.arrival for j in run.jobs.values() if j.arrival > last]
        ends.append(next_decision(last, min(due, default=None), run.epoch_seconds))
    return max(ends) if ends else math.nan


def observed(run: RunData) -> RunData:
    """``run`` without the jobs that had not arrived when it stopped observing.

    A run cut short (``slaq simulate --max-epochs``, a time limit, a STOP) still lists the
    jobs that were due later; they were never part of it and are left out of its metrics.
    """
    end = observed_end(run)
    if not math.isfinite(end):
        return run
    cols = [i for i, n in enumerate(run.job_names)
            if run.jobs[n].arrival < end or len(run.jobs[n].loss) or math.isfinite(run.jobs[n].end)]
    if len(cols) == len(run.job_names):
        return replace(run, stopped=end)
    keep = [run.job_names[i] for i in cols]
    return replace(run, jobs={n: run.jobs[n] for n in keep}, job_names=keep,
                   alloc=np.asarray(run.alloc)[:, cols], stopped=end)


def run_span(run: RunData) -> tuple[float, float]:
    """First arrival, and the last job end; for a run with unfinished jobs, when it stopped."""
    lo = min(j.arrival for j in run.jobs.values())
    if all(math.isfinite(j.end) for j in run.jobs.values()):
        return lo, max(j.end for j in run.jobs.values())
    last = max(job_end(j) for j in run.jobs.values())
    end = observed_end(run)
    return lo, last if math.isnan(end) else max(end, last)


def completion_times(run: RunData) -> np.ndarray:
    """Seconds from arrival to end of every job that finished (``status == "done"``).

    Jobs still waiting or running when the run ended, and failed jobs, are left out.
    """
    return np.array([j.end - j.arrival for j in run.jobs.values()
                     if j.status == "done" and math.isfinite(j.end)], dtype=np.float64)


def makespan(run: RunData) -> float:
    """Seconds from the first arrival to the last job end (to when the run stopped, if a job
    was unfinished)."""
    if not run.jobs:
        return 0.0
    first, last = run_span(run)
    return max(0.0, last - first)


def _grid_step(run: RunData, dt: float | None) -> float:
    return dt if dt is not None else max(run.epoch_seconds / 4.0, 1e-3)


def evaluation_grid(run: RunData, dt: float | None = None,
                    window: tuple[float, float] | None = None) -> np.ndarray:
    """Uniform time points over ``window`` (default: first arrival to last end)."""
    if window is None:
        if not run.jobs:
            return np.zeros(0)
        window = run_span(run)
    step = _grid_step(run, dt)
    lo, hi = window
    if hi <= lo:
        return np.array([lo])
    return np.arange(lo, hi, step)


def _active_sums(run: RunData, l_star: Mapping[str, float],
                 grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At each time of ``grid``: the sum of the active jobs' normalized losses, and their count."""
    total = np.zeros(len(grid))
    count = np.zeros(len(grid))
    for name, job in run.jobs.items():
        vals = normalized_loss_at(job, l_star.get(name, 0.0), grid)
        ok = ~np.isnan(vals)
        total[ok] += vals[ok]
        count[ok] += 1
    return total, count


def avg_normalized_loss_series(run: RunData, l_star: Mapping[str, float],
                               grid: np.ndarray) -> np.ndarray:
    """Mean normalized loss over the jobs active at each time of ``grid`` (NaN if none)."""
    total, count = _active_sums(run, l_star, grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _steps(run: RunData, l_star: Mapping[str, float],
           window: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The active jobs' normalized losses as exact step functions over ``window`` (default:
    first arrival to last end): the lengths of the pieces, and on each piece the sum of the
    active jobs' normalized losses and their count."""
    if not run.jobs:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    if window is None:
        window = run_span(run)
    times: list[np.ndarray] = []
    d_total: list[np.ndarray] = []
    d_count: list[np.ndarray] = []
    for name, job in run.jobs.items():
        end = job.end if math.isfinite(job.end) else math.inf
        norm = np.concatenate(([1.0], normalized_loss(job.loss, float(job.loss[0]), l_star.get(name, 0.0))
                               if len(job.loss) else []))
        bad = ~np.isfinite(norm)  # a NaN or inf loss (a failing job) holds the last good value
        if bad.any():
            good = np.where(bad, 0, np.arange(len(norm)))
            norm = norm[np.maximum.accumulate(good)]
        t = np.asarray(job.time, dtype=np.float64)[: len(norm) - 1]
        keep = t < end  # iterations reported from the end on change nothing
        t, steps = t[keep], np.diff(norm)[keep]
        last = norm[len(t)]
        times += [np.array([job.arrival]), t, np.array([end])]
        d_total += [np.array([1.0]), steps, np.array([-last])]
        d_count += [np.array([1.0]), np.zeros(len(t)), np.array([-1.0])]
    at = np.concatenate(times)
    cut = np.isfinite(at)
    at, dt_, dc = at[cut], np.concatenate(d_total)[cut], np.concatenate(d_count)[cut]
    lo, hi = window
    edges, where = np.unique(np.concatenate((at, [lo, hi])), return_inverse=True)
    n = len(at)
    total = np.cumsum(np.bincount(where[:n], weights=dt_, minlength=len(edges)))
    count = np.cumsum(np.bincount(where[:n], weights=dc, minlength=len(edges)))
    # piece i is [edges[i], edges[i + 1]); keep the pieces inside the window
    inside = (edges[:-1] >= lo) & (edges[1:] <= hi)
    length = np.diff(edges)[inside]
    return length, total[:-1][inside], np.rint(count[:-1][inside])


def average_normalized_loss(run: RunData, l_star: Mapping[str, float],
                            window: tuple[float, float] | None = None) -> float:
    """The mean normalized loss of the active jobs, averaged over the time of the window at
    which at least one job is active (exactly: the losses are step functions)."""
    length, total, count = _steps(run, l_star, window)
    busy = count > 0
    span = float(length[busy].sum())
    if span <= 0:
        return math.nan
    return float((total[busy] / count[busy] * length[busy]).sum() / span)


def normalized_loss_job_seconds(run: RunData, l_star: Mapping[str, float],
                                window: tuple[float, float] | None = None) -> float:
    """Sum over jobs of their normalized loss integrated over their active time in the window.

    In job-seconds (1.0 for one job waiting one second at its initial loss). Unlike the average
    over active jobs it does not fall when a nearly converged job stays active longer (the
    average then has one more near-zero term); it rises by that job's remaining loss.
    """
    length, total, count = _steps(run, l_star, window)
    return float((np.where(count > 0, total, 0.0) * length).sum())


def mean_active_jobs(run: RunData, l_star: Mapping[str, float],
                     window: tuple[float, float] | None = None) -> float:
    """Jobs active at a time of the window, averaged over the whole window."""
    length, _, count = _steps(run, l_star, window)
    span = float(length.sum())
    return float((count * length).sum() / span) if span > 0 else math.nan


def reduction_times(run: RunData, l_star: Mapping[str, float], percent: float) -> np.ndarray:
    """Time to ``percent`` loss reduction of every job, in job order (NaN if never reached)."""
    return np.array(
        [time_to_reduction(j, l_star.get(n, 0.0), percent) for n, j in run.jobs.items()],
        dtype=np.float64,
    )


def core_share_by_loss_group(run: RunData,
                             l_star: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Share of the allocated cores held by high / medium / low-loss jobs at every epoch.

    At each epoch the active jobs are ranked by normalized loss: the top 25% are "high", the
    next 25% "medium", the other 50% "low" (the paper's Figure 3). Returns the epoch times and
    an (E, 3) array of shares (rows of NaN for epochs with no cores allocated).
    """
    times = np.asarray(run.epoch_time, dtype=np.float64)
    shares = np.full((len(times), 3), np.nan)
    if len(times) == 0 or not run.job_names:
        return times, shares
    if np.any(np.diff(times) < 0):  # runs write them in order; a hand-made one may not
        order = np.argsort(times, kind="stable")
        shares[order] = core_share_by_loss_group(replace(run, epoch_time=times[order],
                                                         alloc=np.asarray(run.alloc)[order]), l_star)[1]
        return times, shares
    # (epoch, column, normalized loss) of every job active at an epoch's start: only those
    epochs, cols, vals = [], [], []
    for col, name in enumerate(run.job_names):
        job = run.jobs.get(name)
        if job is None:
            continue
        end = job.end if math.isfinite(job.end) else math.inf
        lo, hi = np.searchsorted(times, [job.arrival, end], side="left")
        if hi > lo:
            epochs.append(np.arange(lo, hi))
            cols.append(np.full(hi - lo, col))
            vals.append(normalized_loss_at(job, l_star.get(name, 0.0), times[lo:hi]))
    if not epochs:
        return times, shares
    e, j, v = np.concatenate(epochs), np.concatenate(cols), np.concatenate(vals)
    keep = ~np.isnan(v)  # a NaN loss counts as not active
    e, j, v = e[keep], j[keep], v[keep]
    order = np.lexsort((j, -v, e))  # per epoch, by falling loss; ties: column order
    e, j = e[order], j[order]
    n = np.bincount(e, minlength=len(times))
    first = np.cumsum(n) - n
    rank = (np.arange(len(e)) - first[e]) / n[e]  # position in its epoch / active jobs
    held = np.asarray(run.alloc, dtype=np.float64)[e, j]
    total = np.bincount(e, weights=held, minlength=len(times))
    ok = total > 0
    for g, (lo_r, hi_r) in enumerate(((0.0, 0.25), (0.25, 0.5), (0.5, 1.01))):
        pick = (rank >= lo_r) & (rank < hi_r)
        group = np.bincount(e[pick], weights=held[pick], minlength=len(times))
        shares[ok, g] = group[ok] / total[ok]
    return times, shares


def mean_core_shares(run: RunData, l_star: Mapping[str, float]) -> np.ndarray:
    """The high / medium / low-loss groups' core shares (:func:`core_share_by_loss_group`)
    averaged over time: each decision's allocation weighted by how long it held (until the
    next decision; the last until the run stopped observing). NaN if none allocated cores."""
    return average_core_shares(run, *core_share_by_loss_group(run, l_star))


def average_core_shares(run: RunData, times: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """:func:`mean_core_shares` from the run's ``(times, shares)`` of
    :func:`core_share_by_loss_group`, already computed."""
    if not len(shares):
        return np.full(3, np.nan)
    end = observed_end(run)
    last = end - times[-1] if math.isfinite(end) and end > times[-1] else run.epoch_seconds
    weight = np.append(np.diff(times), last)
    ok = ~np.isnan(shares[:, 0]) & (weight > 0)
    if not ok.any():
        return np.full(3, np.nan)
    return np.average(shares[ok], axis=0, weights=weight[ok])


def comparison_window(runs: Iterable[RunData]) -> tuple[float, float] | None:
    """The common experiment window of runs compared together (None if none has a job).

    From the first arrival in any run until the earliest of the runs' last job ends: the span
    over which every run still has active jobs.
    """
    spans = [run_span(o) for o in map(observed, runs) if o.jobs]
    if not spans:
        return None
    lo = min(s[0] for s in spans)
    return lo, max(lo, min(s[1] for s in spans))
