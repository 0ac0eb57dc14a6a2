"""What ``slaq status`` shows of a run: :func:`load_status` reads a run directory into a
:class:`StatusReport` (from ``status.json``, or from ``metrics.h5`` for a run that has none)
and predicts each running job's time to a 90% loss reduction with the brain's curve fits
(:func:`predicted_seconds`); :mod:`slaq_mpi.report.status_table` prints it.

Reads files only: no MPI, so it works from a login node, while the run is live or after it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slaq_mpi.brain.fitting import FAMILY_LINEAR, FAMILY_SUBLINEAR
from slaq_mpi.brain.forecast import build_forecast
from slaq_mpi.brain.memo import CurveMemo
from slaq_mpi.brain.predict import CurveFit
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies.snapshot import cluster_snapshot, job_snapshot
from slaq_mpi.storage.metrics import RunData, read_metrics
from slaq_mpi.storage.rundir import RUN_FILES, holder_of
from slaq_mpi.storage.status_file import (
    ENDED,
    STATUS_FILE,
    JobHistory,
    JobStatus,
    RunStatus,
    read_job_histories,
    read_status,
)

__all__ = ["LIVE_STATES", "REDUCTION_PERCENT", "StatusReport", "StatusRow", "load_status",
           "predicted_seconds", "silent_seconds", "status_from_metrics"]

REDUCTION_PERCENT = 90.0  # the loss reduction whose predicted time is shown
LIVE_STATES = ("running", "waiting for jobs")  # states in which rank 0 keeps writing the file
SILENT_EPOCHS = 3.0  # rank 0 is silent when it has not written for this many epochs ...
SILENT_MIN_SECONDS = 10.0  # ... and at least this many seconds
MAX_PREDICTED_ITERATIONS = 1.0e7  # a curve that needs more than this never gets there
_NOT_A_RUN = "must be a run directory (the output_dir of `slaq run`, holding status.json or metrics.h5)"
_STATUS_ORDER = {"running": 0, "waiting": 1, "failed": 2, "cancelled": 3, "done": 4}


@dataclass(frozen=True)
class StatusRow:
    """One job as ``slaq status`` shows it.

    Attributes:
        job: the job's row of the status file.
        loss_ratio: its latest loss over its first (NaN before two are known or when the
            first is 0).
        running_seconds: seconds since it first got cores, up to its end if it ended (NaN if
            it never got cores).
        predicted_seconds: predicted seconds from now until its loss has fallen
            :data:`REDUCTION_PERCENT` % of the way from its first loss to the final loss the
            brain estimates; 0 if it is there; NaN where no prediction is made.
    """

    job: JobStatus
    loss_ratio: float
    running_seconds: float
    predicted_seconds: float


@dataclass(frozen=True)
class StatusReport:
    """A run directory as ``slaq status`` reads it.

    Attributes:
        run_dir: the directory.
        status: the run (from ``status.json``, or built from ``metrics.h5``).
        rows: every job, running ones first, then waiting, failed, cancelled and done.
        source: ``"status.json"`` or ``"metrics.h5"`` (the run wrote no status file).
        checked: ``time.time()`` when it was read.
        silent_seconds: seconds since rank 0 last wrote, when that is longer than it should
            be for a live run (:func:`silent_seconds`); NaN otherwise.
    """

    run_dir: Path
    status: RunStatus
    rows: list[StatusRow]
    source: str
    checked: float
    silent_seconds: float


def silent_seconds(status: RunStatus, wall_now: float) -> float:
    """Seconds since rank 0 last wrote ``status``, if its state says it is live and that is
    more than ``max(3 epochs, 10 s)`` ago; NaN otherwise."""
    if status.state not in LIVE_STATES:
        return math.nan
    age = wall_now - status.updated
    limit = max(SILENT_EPOCHS * status.epoch_seconds, SILENT_MIN_SECONDS)
    return age if age > limit else math.nan


def load_status(run_dir: str | Path, wall_now: float | None = None) -> StatusReport:
    """Read the run in ``run_dir``: ``status.json``, and the loss histories of its running
    jobs in ``metrics.h5``; a run without ``status.json`` is read from ``metrics.h5`` alone.

    Raises:
        ConfigError: ``run_dir`` is not a run directory, or one that holds neither file yet.
        DataError: a damaged or unreadable status or metrics file.
    """
    where = Path(run_dir)
    checked = time.time() if wall_now is None else wall_now
    if not where.is_dir():
        raise ConfigError("RUN_DIR", str(run_dir), _NOT_A_RUN)
    status = read_status(where)
    if status is None:
        _require_metrics(where, run_dir)
        run = read_metrics(where)
        status, source = status_from_metrics(run, where), "metrics.h5"
        traces = {j.name: JobHistory.of(run.jobs[j.name]) for j in status.jobs
                  if j.status == "running"}
    else:
        source = STATUS_FILE
        traces = read_job_histories(where, [j.name for j in status.jobs if j.status == "running"])
    predicted = predicted_seconds(status.jobs, traces, status.workers, status.epoch_seconds)
    rows = [_row(job, status.now, predicted.get(job.name, math.nan)) for job in status.jobs]
    rows.sort(key=lambda r: _STATUS_ORDER.get(r.job.status, len(_STATUS_ORDER)))
    return StatusReport(where, status, rows, source, checked, silent_seconds(status, checked))


def _require_metrics(where: Path, given: str | Path) -> None:
    """Refuse a directory without metrics.h5 (nor status.json): not a run, or a run that has
    saved nothing yet."""
    if (where / "metrics.h5").is_file():
        return
    if any((where / name).exists() for name in RUN_FILES):
        raise ConfigError("RUN_DIR", str(given), "holds no status.json or metrics.h5 yet: the run "
                          "has not started (or stopped before its first save)")
    raise ConfigError("RUN_DIR", str(given), _NOT_A_RUN)


def _row(job: JobStatus, now: float, predicted: float) -> StatusRow:
    ratio = math.nan
    if job.iterations >= 1 and math.isfinite(job.first_loss) and job.first_loss != 0:
        ratio = job.last_loss / job.first_loss
    until = job.end if math.isfinite(job.end) else now
    running = until - job.start if math.isfinite(job.start) else math.nan
    return StatusRow(job, ratio, max(running, 0.0) if math.isfinite(running) else math.nan, predicted)


# --- a run without status.json -----------------------------------------------------------------

def status_from_metrics(run: RunData, run_dir: Path) -> RunStatus:
    """The status of a run that wrote no ``status.json`` (from before the file existed, or a
    simulation), from its ``metrics.h5``: ``running`` while a slaq run holds the directory,
    else ``finished`` when every job ended and ``stopped`` when some had not."""
    from slaq_mpi.report.evaluation import observed_end

    ended = all(j.status in ENDED for j in run.jobs.values())
    live = run.mode == "run" and holder_of(run_dir) is not None
    state = "running" if live else "finished" if ended else "stopped"
    now = run.elapsed if run.elapsed is not None else observed_end(run)
    now = float(now) if math.isfinite(now) else 0.0
    last_alloc = run.alloc[-1] if len(run.epoch_time) else np.zeros(len(run.job_names), dtype=np.int32)
    cores = {name: int(c) for name, c in zip(run.job_names, last_alloc.tolist(), strict=True)}
    budgets = _budgets(run.config) if run.mode == "run" else {}
    jobs = [JobStatus(
        name=name, algorithm=j.algorithm, status=j.status,
        cores=cores.get(name, 0) if live and j.status == "running" else 0,
        iterations=len(j.loss), first_loss=float(j.loss[0]) if len(j.loss) else math.nan,
        last_loss=float(j.loss[-1]) if len(j.loss) else math.nan, arrival=j.arrival,
        start=j.start, end=j.end, reason=j.reason, max_iterations=budgets.get(name))
        for name, j in run.jobs.items()]
    used = sum(j.attained_core_seconds for j in run.jobs.values())
    first = min((j.arrival for j in run.jobs.values()), default=math.nan)
    span = now - first
    utilization = used / (run.capacity * span) if run.capacity > 0 and span > 0 else math.nan
    updated = (run_dir / "metrics.h5").stat().st_mtime
    return RunStatus(
        name=run.name, policy=run.policy, workers=run.capacity, epoch_seconds=run.epoch_seconds,
        open=False, draining=False, state=state, updated=updated, now=now,
        last_decision=float(run.epoch_time[-1]) if len(run.epoch_time) else math.nan,
        utilization=utilization, jobs=jobs)


def _budgets(config: str) -> dict[str, int | None]:
    """Each job's ``stop.max_iterations`` in a run's kept YAML (200 unless it gives a
    ``tolerance`` alone, as the config does); empty for text that is not a config."""
    import yaml

    try:
        raw = yaml.safe_load(config)
    except yaml.YAMLError:
        return {}
    jobs = raw.get("jobs") if isinstance(raw, dict) else None
    out: dict[str, int | None] = {}
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, dict):
            continue
        given = job.get("stop")
        stop = given if isinstance(given, dict) else {}
        budget = stop.get("max_iterations", None if "tolerance" in stop else 200)
        out[str(job.get("name"))] = budget if isinstance(budget, int) else None
    return out


# --- the predicted time to a reduction ---------------------------------------------------------

def predicted_seconds(jobs: Sequence[JobStatus], traces: Mapping[str, JobHistory], workers: int,
                      epoch_seconds: float, percent: float = REDUCTION_PERCENT) -> dict[str, float]:
    """Per running job with a history in ``traces``, the predicted seconds from now until its
    loss has fallen ``percent`` % of the way from its first loss to its final loss ``L*``; 0
    if it is there already.

    The prediction is the slaq policy's forecast (:func:`~slaq_mpi.brain.forecast.build_forecast`,
    span normalization): ``L*`` is its estimate of the final loss, the iterations needed are
    read off the fitted curve and the seconds per iteration off the fitted throughput on the
    cores the job holds now. A job gets none (absent from the result) when it holds no cores,
    when its history is too short to fit or shows no decrease, when the fitted curve does not
    reach the target, or when its iteration budget ends first.
    """
    by_name = {j.name: j for j in jobs if j.status == "running" and j.cores > 0
               and j.name in traces and len(traces[j.name].loss) > 0}
    if not by_name:
        return {}
    capacity = max(int(workers), max(j.cores for j in by_name.values()))
    snaps = [job_snapshot(
        name, losses=traces[name].loss.tolist(), throughput=_pairs(traces[name]), cores=job.cores,
        max_cores=job.cores, capacity=capacity, convergence=traces[name].convergence,
        arrival=job.arrival if math.isfinite(job.arrival) else 0.0, attained_core_seconds=0.0,
        max_iterations=job.max_iterations) for name, job in by_name.items()]
    fc = build_forecast(cluster_snapshot(capacity, 0.0, epoch_seconds, snaps), CurveMemo())
    rows = [by_name[i] for i in fc.job_ids]
    curves, share = fc.curves, percent / 100.0
    assert curves.span is not None  # the span normalization sets it
    first = np.array([traces[j.name].loss[0] for j in rows], dtype=np.float64)
    target = first - share * curves.span
    fitted = (curves.family == FAMILY_SUBLINEAR) | (curves.family == FAMILY_LINEAR)
    usable = fitted & (curves.span > 0) & np.isfinite(target)
    now_loss = np.array([j.last_loss for j in rows], dtype=np.float64)
    reached = usable & (now_loss <= target)
    iters = _iterations_to(curves, curves.last - target)  # from the last iteration metrics.h5 holds
    behind = np.array([j.iterations for j in rows], dtype=np.float64) - curves.n
    left = np.maximum(iters - np.maximum(behind, 0.0), 1.0)
    done = np.array([j.iterations for j in rows], dtype=np.float64)
    budget = np.array([np.inf if j.max_iterations is None else j.max_iterations for j in rows])
    cores = np.array([j.cores for j in rows], dtype=np.float64)
    seconds = left * fc.speed.seconds(cores)
    ok = usable & np.isfinite(iters) & (done + left <= budget) & np.isfinite(seconds)
    out = np.where(reached, 0.0, np.where(ok, seconds, np.nan))
    return {j.name: float(s) for j, s in zip(rows, out.tolist(), strict=True) if math.isfinite(s)}


def _pairs(history: JobHistory) -> list[tuple[int, float]]:
    return [(int(c), float(s)) for c, s in history.throughput.tolist()]


def _iterations_to(curves: CurveFit, need: np.ndarray) -> np.ndarray:
    """Per job, the fewest further iterations whose predicted drop reaches ``need`` (loss
    units); NaN where the curve does not get there within :data:`MAX_PREDICTED_ITERATIONS`."""
    grid = np.geomspace(1.0, MAX_PREDICTED_ITERATIONS, 141)
    drops = curves.drop(np.broadcast_to(grid, (len(need), grid.size)))
    hit = drops >= need[:, None]
    found = hit.any(axis=1) & np.isfinite(need)
    idx = np.where(found, hit.argmax(axis=1), 0)
    hi = grid[idx]
    lo = np.where(idx > 0, grid[np.maximum(idx - 1, 0)], 0.0)
    for _ in range(40):  # the drop grows with the iterations: bisect between two grid points
        if not np.any(hi - lo > 0.5):
            break
        mid = (lo + hi) / 2.0
        ok = curves.drop(mid) >= need
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    return np.where(found, np.ceil(hi), np.nan)
