"""The paper's evaluation metrics as pure functions of a run's traces.

A run (real or simulated) is a :class:`RunData`: per job the loss of every iteration and the
time it ended, plus the allocation of every epoch. The metrics follow DESIGN.md "Evaluation":

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
  the window, summed over jobs (:func:`normalized_loss_job_seconds`). The average above is taken
  over the jobs still active, so it falls when a nearly converged job stays active longer;
  the job-seconds rise only by that job's small remaining loss. :func:`mean_active_jobs`
  shows how many were active;
* time to X% loss reduction: from arrival until the end of the first iteration whose normalized
  loss is <= 1 - X/100 (NaN if never reached: such jobs are left out of means and medians and
  counted in ``reached_X``);
* completion time (JCT): from a finished job's arrival to its end (:func:`completion_times`).
  The average normalized loss can fall when a converged job is kept waiting for its stop rule;
  the completion time shows what that costs the job's owner.

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
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from slaq_mpi.plan import epoch_length

__all__ = [
    "JobTrace",
    "RunData",
    "SUMMARY_METRICS",
    "average_normalized_loss",
    "avg_normalized_loss_series",
    "common_l_star",
    "comparison_window",
    "completion_times",
    "core_share_by_loss_group",
    "evaluation_grid",
    "job_utility",
    "makespan",
    "mean_active_jobs",
    "normalized_loss",
    "normalized_loss_job_seconds",
    "normalized_loss_at",
    "observed",
    "observed_end",
    "power_mean",
    "reduction_times",
    "rhos",
    "speedups",
    "summarize",
    "summarize_runs",
    "time_to_reduction",
    "total_utility",
]

LOSS_GROUPS = ("high", "medium", "low")


@dataclass
class JobTrace:
    """Everything recorded about one job of a run (the ``/jobs/<name>`` group of metrics.h5).

    ``utility`` is the job's validated ``utility:`` spec (None: it has none); ``scaling`` is
    its true ``(work, overhead, comm)`` seconds-per-iteration model (simulator only; real runs
    fit one from ``throughput``).
    """

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
    utility: dict[str, float] | None = None
    scaling: tuple[float, float, float] | None = None


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
    stopped: float = math.nan  # when it stopped observing, once :func:`observed` has found it


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


def observed_end(run: RunData) -> float:
    """When the run stopped observing its jobs: the end of its last epoch, or the last job end
    or iteration if later (NaN for a run with neither)."""
    if math.isfinite(run.stopped):
        return run.stopped
    ends = [_job_end(j) for j in run.jobs.values() if len(j.time) or math.isfinite(j.end)]
    if len(run.epoch_time):
        last = float(run.epoch_time[-1])  # its epoch was cut short if a job arrived during it
        due = [j.arrival for j in run.jobs.values() if j.arrival > last]
        ends.append(last + epoch_length(last, min(due, default=None), run.epoch_seconds))
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


def _span(run: RunData) -> tuple[float, float]:
    """First arrival, and the last job end; for a run with unfinished jobs, when it stopped."""
    lo = min(j.arrival for j in run.jobs.values())
    if all(math.isfinite(j.end) for j in run.jobs.values()):
        return lo, max(j.end for j in run.jobs.values())
    last = max(_job_end(j) for j in run.jobs.values())
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
    first, last = _span(run)
    return max(0.0, last - first)


def _grid_step(run: RunData, dt: float | None) -> float:
    return dt if dt is not None else max(run.epoch_seconds / 4.0, 1e-3)


def evaluation_grid(run: RunData, dt: float | None = None,
                    window: tuple[float, float] | None = None) -> np.ndarray:
    """Uniform time points over ``window`` (default: first arrival to last end)."""
    if window is None:
        if not run.jobs:
            return np.zeros(0)
        window = _span(run)
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
        window = _span(run)
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

# --- the policy-comparison metrics: utility, finish-time fairness, speedup --------------------

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


def _seconds_model(job: JobTrace) -> Callable[[float], float] | None:
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

    def seconds(a: float) -> float:
        one = work + overhead
        return one / a if a < 1 else work / a + overhead + comm * math.log2(a)

    return seconds


def _run_end(run: RunData) -> float:
    ends = [_job_end(j) for j in run.jobs.values()]
    last_epoch = float(run.epoch_time[-1]) + run.epoch_seconds if len(run.epoch_time) else 0.0
    return max([last_epoch, *ends]) if ends else last_epoch


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
        isolated = max(len(job.loss), 1) * seconds(share)
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
    time; a job's speedup is the time-weighted mean over the epochs where that equal share
    would make progress (NaN if none). Losses past the last recorded one count as flat.
    """
    times = np.asarray(run.epoch_time, dtype=np.float64)
    names = list(run.jobs)
    out = np.full(len(names), np.nan)
    if len(times) == 0:
        return out
    stops = np.append(times[1:], max(_run_end(run), times[-1] + run.epoch_seconds))
    arr = np.array([j.arrival for j in run.jobs.values()])
    end = np.array([j.end if math.isfinite(j.end) else np.inf for j in run.jobs.values()])
    active = (arr[None, :] <= times[:, None] + 1e-9) & (times[:, None] < end[None, :])
    count = np.maximum(active.sum(axis=1), 1)
    for i, (name, job) in enumerate(run.jobs.items()):
        seconds = _seconds_model(job)
        n = len(job.loss)
        if seconds is None or n == 0:
            continue
        q = np.concatenate(([1.0], normalized_loss(job.loss, float(job.loss[0]), l_star.get(name, 0.0))))
        rows = np.flatnonzero(active[:, i])
        t0, t1 = times[rows], np.minimum(stops[rows], end[i])
        k0, k1 = _progress_at(job, t0), _progress_at(job, t1)
        cap = job.max_cores if job.max_cores > 0 else run.capacity
        share = np.minimum(float(cap), run.capacity / count[rows])
        fair_k = np.minimum(k0 + (t1 - t0) / np.array([seconds(s) for s in share]), n)
        grid = np.arange(n + 1, dtype=np.float64)
        fair = np.interp(k0, grid, q) - np.interp(fair_k, grid, q)
        got = np.interp(k0, grid, q) - np.interp(k1, grid, q)
        ok = fair > 1e-12
        if ok.any():
            w = (t1 - t0)[ok]
            out[i] = float(np.sum(w * got[ok] / fair[ok]) / max(np.sum(w), 1e-12))
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


def _nanmax(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.max()) if len(a) else math.nan


def _nanmin(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.min()) if len(a) else math.nan


#: Scalar metrics of a run, in report order: name -> f(run, l_star). Extend by adding entries.
SUMMARY_METRICS: dict[str, MetricFn] = {
    "avg_normalized_loss": average_normalized_loss,
    "normalized_loss_job_s": normalized_loss_job_seconds,
    "mean_active_jobs": mean_active_jobs,
    "mean_time_to_90": lambda r, ls: _nanmean(reduction_times(r, ls, 90)),
    "median_time_to_90": lambda r, ls: _nanmedian(reduction_times(r, ls, 90)),
    "mean_time_to_95": lambda r, ls: _nanmean(reduction_times(r, ls, 95)),
    "median_time_to_95": lambda r, ls: _nanmedian(reduction_times(r, ls, 95)),
    "reached_90": lambda r, ls: float(np.sum(~np.isnan(reduction_times(r, ls, 90)))),
    "reached_95": lambda r, ls: float(np.sum(~np.isnan(reduction_times(r, ls, 95)))),
    "median_completion": lambda r, ls: _nanmedian(completion_times(r)),
    "mean_completion": lambda r, ls: _nanmean(completion_times(r)),
    "makespan": lambda r, ls: makespan(r),
    "decision_ms": lambda r, ls: _nanmean(np.asarray(r.decision_ms, dtype=np.float64)),
    "jobs": lambda r, ls: float(len(r.jobs)),
    "core_share_high": _mean_share(0),
    "core_share_medium": _mean_share(1),
    "core_share_low": _mean_share(2),
    "total_utility": lambda r, ls: total_utility(r),
    "max_rho": lambda r, ls: _nanmax(rhos(r)),
    "mean_rho": lambda r, ls: _nanmean(rhos(r)),
    "min_speedup": lambda r, ls: _nanmin(speedups(r, ls)),
    "mean_speedup": lambda r, ls: _nanmean(speedups(r, ls)),
    "p_mean_speedup": lambda r, ls: power_mean(speedups(r, ls)),
}


def summarize(run: RunData, l_star: Mapping[str, float],
              metrics: Mapping[str, MetricFn] | None = None) -> dict[str, float]:
    """Every metric of ``metrics`` (default :data:`SUMMARY_METRICS`) for one run."""
    table = SUMMARY_METRICS if metrics is None else metrics
    run = observed(run)
    out = {name: float(fn(run, l_star)) for name, fn in table.items()}
    out.update(run.extra)
    return out


def comparison_window(runs: Iterable[RunData]) -> tuple[float, float] | None:
    """The common experiment window of runs compared together (None if none has a job).

    From the first arrival in any run until the earliest of the runs' last job ends: the span
    over which every run still has active jobs.
    """
    spans = [_span(o) for o in map(observed, runs) if o.jobs]
    if not spans:
        return None
    lo = min(s[0] for s in spans)
    return lo, max(lo, min(s[1] for s in spans))


def summarize_runs(runs: Mapping[str, RunData], l_star: Mapping[str, float] | None = None,
                   window: tuple[float, float] | None = None,
                   metrics: Mapping[str, MetricFn] | None = None,
                   ) -> tuple[dict[str, dict[str, float]], tuple[float, float] | None]:
    """:func:`summarize` every run of a comparison, on the same L* and the same window.

    ``l_star`` defaults to :func:`common_l_star` of the runs; ``window`` (of the average
    normalized loss) to :func:`comparison_window` when there are two runs or more, else each
    run's own. Returns the rows by label and the window used (None: each run's own).
    """
    ls = common_l_star(runs.values()) if l_star is None else l_star
    if window is None and len(runs) > 1:
        window = comparison_window(runs.values())
    table = dict(SUMMARY_METRICS if metrics is None else metrics)
    if window is not None and window[1] > window[0]:
        for key, fn in (("avg_normalized_loss", average_normalized_loss),
                        ("normalized_loss_job_s", normalized_loss_job_seconds),
                        ("mean_active_jobs", mean_active_jobs)):
            table[key] = partial(fn, window=window)
    else:
        window = None
    return {label: summarize(run, ls, table) for label, run in runs.items()}, window
