"""The paper's evaluation metrics as pure functions of a run's traces.

A run (real or simulated) is a :class:`RunData`: per job the loss of every iteration and the
time it ended, plus the allocation of every epoch. The metrics follow DESIGN.md "Evaluation":

* normalized loss of a job at time t: ``(L(t) - L*) / (L_0 - L*)``; it is 1.0 from the job's
  arrival until its first iteration has been reported, then the normalized loss of the latest
  iteration that ended by t (a step function);
* a job is *active* on ``[arrival, end)``; a job that never finished stays active to the end of
  the evaluation window;
* average normalized loss: the mean over active jobs at t, averaged over the time points of
  the window at which at least one job is active (a uniform grid, step ``dt``);
* time to X% loss reduction: from arrival until the end of the first iteration whose normalized
  loss is <= 1 - X/100 (NaN if never reached: such jobs are left out of means and medians and
  counted in ``reached_X``).

**The choice of L\\***: runs of the same jobs compared together must use the same L\\* per job.
:func:`common_l_star` takes, per job name, the lowest loss known in ANY of the runs given: the
minimum over every run's observed losses and every recorded converged loss (the simulator's
``l_star``). In simulation that is the curve's converged loss; for real runs it is the best loss
that job reached under any policy compared.

``SUMMARY_METRICS`` is the table of scalar metrics a report shows; other modules add entries to
it (name -> function of (run, l_star)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "JobTrace",
    "RunData",
    "SUMMARY_METRICS",
    "average_normalized_loss",
    "avg_normalized_loss_series",
    "common_l_star",
    "core_share_by_loss_group",
    "evaluation_grid",
    "makespan",
    "normalized_loss",
    "normalized_loss_at",
    "reduction_times",
    "summarize",
    "time_to_reduction",
]

LOSS_GROUPS = ("high", "medium", "low")


@dataclass
class JobTrace:
    """Everything recorded about one job of a run (the ``/jobs/<name>`` group of metrics.h5)."""

    name: str
    algorithm: str
    arrival: float
    loss: np.ndarray
    time: np.ndarray
    cores: np.ndarray
    iter_seconds: np.ndarray
    start: float = math.nan
    end: float = math.nan
    status: str = "waiting"
    reason: str = ""
    convergence: str = "unknown"
    l_star: float | None = None
    max_cores: int = 0
    attained_core_seconds: float = 0.0
    throughput: np.ndarray | None = None


@dataclass
class RunData:
    """One run of an experiment under one policy (the whole metrics.h5)."""

    name: str
    policy: str
    seed: int
    capacity: int
    epoch_seconds: float
    mode: str
    config: str
    jobs: dict[str, JobTrace]
    job_names: list[str]
    epoch_time: np.ndarray
    alloc: np.ndarray
    decision_ms: np.ndarray
    pause_ms: np.ndarray
    moved: np.ndarray | None = None
    extra: dict[str, float] = field(default_factory=dict)


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


def _job_end(job: JobTrace) -> float:
    if math.isfinite(job.end):
        return job.end
    return float(job.time[-1]) if len(job.time) else job.arrival


def makespan(run: RunData) -> float:
    """Seconds from the first arrival to the last job end (or last iteration if unfinished)."""
    if not run.jobs:
        return 0.0
    first = min(j.arrival for j in run.jobs.values())
    last = max(_job_end(j) for j in run.jobs.values())
    return max(0.0, last - first)


def evaluation_grid(run: RunData, dt: float | None = None,
                    window: tuple[float, float] | None = None) -> np.ndarray:
    """Uniform time points over ``window`` (default: first arrival to last end)."""
    if window is None:
        if not run.jobs:
            return np.zeros(0)
        lo = min(j.arrival for j in run.jobs.values())
        hi = max(_job_end(j) for j in run.jobs.values())
        window = (lo, hi)
    step = dt if dt is not None else max(run.epoch_seconds / 4.0, 1e-3)
    lo, hi = window
    if hi <= lo:
        return np.array([lo])
    return np.arange(lo, hi, step)


def avg_normalized_loss_series(run: RunData, l_star: Mapping[str, float],
                               grid: np.ndarray) -> np.ndarray:
    """Mean normalized loss over the jobs active at each time of ``grid`` (NaN if none)."""
    total = np.zeros(len(grid))
    count = np.zeros(len(grid))
    for name, job in run.jobs.items():
        vals = normalized_loss_at(job, l_star.get(name, 0.0), grid)
        ok = ~np.isnan(vals)
        total[ok] += vals[ok]
        count[ok] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def average_normalized_loss(run: RunData, l_star: Mapping[str, float], dt: float | None = None,
                            window: tuple[float, float] | None = None) -> float:
    """The series of :func:`avg_normalized_loss_series` averaged over the window."""
    series = avg_normalized_loss_series(run, l_star, evaluation_grid(run, dt, window))
    series = series[~np.isnan(series)]
    return float(series.mean()) if len(series) else math.nan


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
    norm = np.full((len(times), len(run.job_names)), np.nan)
    for col, name in enumerate(run.job_names):
        job = run.jobs.get(name)
        if job is not None:
            norm[:, col] = normalized_loss_at(job, l_star.get(name, 0.0), times)
    alloc = np.asarray(run.alloc, dtype=np.float64)
    for e in range(len(times)):
        cols = np.flatnonzero(~np.isnan(norm[e]))
        held = alloc[e, cols].sum() if len(cols) else 0.0
        if held <= 0:
            continue
        order = cols[np.argsort(-norm[e, cols], kind="stable")]
        rank = np.arange(len(order)) / len(order)
        for g, (lo, hi) in enumerate(((0.0, 0.25), (0.25, 0.5), (0.5, 1.01))):
            pick = order[(rank >= lo) & (rank < hi)]
            shares[e, g] = alloc[e, pick].sum() / held
    return times, shares


def _nanmean(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.mean()) if len(a) else math.nan


def _nanmedian(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(np.median(a)) if len(a) else math.nan


MetricFn = Callable[[RunData, Mapping[str, float]], float]


def _mean_share(group: int) -> MetricFn:
    def share(run: RunData, l_star: Mapping[str, float]) -> float:
        _, shares = core_share_by_loss_group(run, l_star)
        col = shares[:, group] if len(shares) else np.zeros(0)
        return _nanmean(col)

    return share

#: Scalar metrics of a run, in report order: name -> f(run, l_star). Extend by adding entries.
SUMMARY_METRICS: dict[str, MetricFn] = {
    "avg_normalized_loss": average_normalized_loss,
    "mean_time_to_90": lambda r, ls: _nanmean(reduction_times(r, ls, 90)),
    "median_time_to_90": lambda r, ls: _nanmedian(reduction_times(r, ls, 90)),
    "mean_time_to_95": lambda r, ls: _nanmean(reduction_times(r, ls, 95)),
    "median_time_to_95": lambda r, ls: _nanmedian(reduction_times(r, ls, 95)),
    "reached_90": lambda r, ls: float(np.sum(~np.isnan(reduction_times(r, ls, 90)))),
    "reached_95": lambda r, ls: float(np.sum(~np.isnan(reduction_times(r, ls, 95)))),
    "makespan": lambda r, ls: makespan(r),
    "decision_ms": lambda r, ls: _nanmean(np.asarray(r.decision_ms, dtype=np.float64)),
    "jobs": lambda r, ls: float(len(r.jobs)),
    "core_share_high": _mean_share(0),
    "core_share_medium": _mean_share(1),
    "core_share_low": _mean_share(2),
}


def summarize(run: RunData, l_star: Mapping[str, float],
              metrics: Mapping[str, MetricFn] | None = None) -> dict[str, float]:
    """Every metric of ``metrics`` (default :data:`SUMMARY_METRICS`) for one run."""
    table = SUMMARY_METRICS if metrics is None else metrics
    out = {name: float(fn(run, l_star)) for name, fn in table.items()}
    out.update(run.extra)
    return out
