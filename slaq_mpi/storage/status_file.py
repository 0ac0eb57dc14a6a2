"""``RUN_DIR/status.json``: what a live run is doing now, for ``slaq status``.

Rank 0 rewrites the file at every scheduling decision (:func:`write_status`, atomic through
:func:`slaq_mpi.storage.durable.replacing`); ``slaq status`` reads it (:func:`read_status`)
from any machine that sees the run directory, while the run is live or after it ended. It is
one JSON object, one job per line, with ``null`` for a time or loss that is not known (NaN in
memory); docs/status.md describes every key.

:func:`job_status` and :func:`run_utilization` build the file's rows from rank 0's record
(:class:`~slaq_mpi.storage.metrics.JobRecord`); :func:`read_job_histories` reads what a
prediction needs of a few jobs from ``metrics.h5`` without loading the others.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from slaq_mpi.errors import DAMAGED_FILE_ERRORS, DataError
from slaq_mpi.storage.durable import replacing
from slaq_mpi.storage.metrics import JobRecord, JobTrace

__all__ = ["FORMAT", "JOB_STATUSES", "RUN_STATES", "STATUS_FILE", "JobStatus", "RunStatus",
           "JobHistory", "job_status", "read_job_histories", "read_status", "run_utilization", "write_status"]

STATUS_FILE = "status.json"
FORMAT = 1  # the ``format`` key: a reader refuses a file of a newer format
RUN_STATES = ("running", "waiting for jobs", "stopped", "finished", "failed", "ranks lost")
"""``state``: jobs are running or waiting; an open run idle, waiting for added jobs; stopped
for a later ``--resume``; every job ended; the run aborted on an error; ranks were lost (a
node failed: the record is saved, a resume continues on the ranks left)."""
JOB_STATUSES = ("waiting", "running", "done", "failed", "cancelled")
ENDED = ("done", "failed", "cancelled")


@dataclass
class JobStatus:
    """One job of a run as ``status.json`` holds it (times in experiment seconds, NaN: none).

    Attributes:
        name: the job's name.
        algorithm: its solver.
        status: one of :data:`JOB_STATUSES`.
        weight: its share weight (1 unless the config gives another).
        cores: the cores (ranks) it holds now (0 while waiting or after it ended).
        iterations: iterations run so far.
        first_loss, last_loss: the loss of its first and latest iteration (NaN before any).
        arrival: when it arrived; start: when it first got cores; end: when it ended.
        reason: why it failed or was cancelled (empty otherwise).
        max_iterations: its iteration budget (None: it stops on its tolerance only).
    """

    name: str
    algorithm: str
    status: str
    weight: float = 1.0
    cores: int = 0
    iterations: int = 0
    first_loss: float = math.nan
    last_loss: float = math.nan
    arrival: float = math.nan
    start: float = math.nan
    end: float = math.nan
    reason: str = ""
    max_iterations: int | None = None


@dataclass
class RunStatus:
    """A run as rank 0 saw it at its latest write of ``status.json``.

    Attributes:
        name: the experiment's name; policy: the policy allocating the cores.
        workers: worker ranks (the cores jobs share).
        epoch_seconds: the time between regular decisions.
        open: the run waits for added jobs when every job has ended.
        draining: the run accepts no more jobs (``slaq drain``).
        state: one of :data:`RUN_STATES`.
        updated: ``time.time()`` of the write (wall clock of rank 0's node).
        now: experiment seconds at the write.
        last_decision: experiment seconds of the latest decision (NaN before the first).
        utilization: core-seconds spent inside iterations over ``workers`` times the seconds
            since the first arrival (NaN before it).
        jobs: every job of the run, in the record's order.
    """

    name: str
    policy: str
    workers: int
    epoch_seconds: float
    open: bool
    draining: bool
    state: str
    updated: float
    now: float
    last_decision: float
    utilization: float
    jobs: list[JobStatus] = field(default_factory=list)


# --- rows from rank 0's record -----------------------------------------------------------------

def job_status(job: JobRecord, cores: int = 0, weight: float = 1.0,
               max_iterations: int | None = None) -> JobStatus:
    """The row of ``job`` holding ``cores`` now (cheap: no copy of its history)."""
    return JobStatus(
        name=job.name, algorithm=job.algorithm, status=job.status, weight=float(weight),
        cores=int(cores), iterations=len(job.loss),
        first_loss=float(job.loss[0]) if job.loss else math.nan,
        last_loss=float(job.loss[-1]) if job.loss else math.nan,
        arrival=float(job.arrival), start=float(job.start), end=float(job.end),
        reason=job.reason, max_iterations=max_iterations)


def run_utilization(jobs: Iterable[JobRecord], workers: int, now: float) -> float:
    """Core-seconds inside the iterations of ``jobs`` over ``workers`` x the seconds from the
    first arrival to ``now``; NaN before any job arrived (or with no workers)."""
    used, first = 0.0, math.inf
    for job in jobs:
        used += job.attained_core_seconds
        if job.arrival <= now:
            first = min(first, job.arrival)
    span = now - first
    if workers <= 0 or not span > 0 or not math.isfinite(span):
        return math.nan
    return used / (workers * span)


# --- the file ---------------------------------------------------------------------------------

def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None


_ENCODE = json.JSONEncoder(allow_nan=False).encode  # strict JSON: NaN is written as null first


def _job_json(job: JobStatus) -> str:
    return _ENCODE({
        "name": job.name, "algorithm": job.algorithm, "status": job.status, "weight": job.weight,
        "cores": job.cores, "iterations": job.iterations, "first_loss": _number(job.first_loss),
        "last_loss": _number(job.last_loss), "arrival": _number(job.arrival),
        "start": _number(job.start), "end": _number(job.end), "reason": job.reason,
        "max_iterations": job.max_iterations})


def status_text(status: RunStatus) -> str:
    """``status`` as the text of ``status.json``: one JSON object, one job per line."""
    head = _ENCODE({
        "format": FORMAT, "name": status.name, "policy": status.policy, "workers": status.workers,
        "epoch_seconds": status.epoch_seconds, "open": status.open, "draining": status.draining,
        "state": status.state, "updated": status.updated, "now": _number(status.now),
        "last_decision": _number(status.last_decision),
        "utilization": _number(status.utilization)})
    rows = ",\n".join(_job_json(job) for job in status.jobs)
    return f'{head[:-1]}, "jobs": [\n{rows}\n]}}\n' if rows else f'{head[:-1]}, "jobs": []}}\n'


def write_status(run_dir: str | Path, status: RunStatus) -> None:
    """Write ``status`` to ``run_dir/status.json`` atomically: a reader sees the previous
    file or this one, whole (a failed write leaves the previous file and no temp file)."""
    final = Path(run_dir) / STATUS_FILE
    tmp = final.with_name(f"{STATUS_FILE}.tmp{os.getpid()}")
    with replacing(final, tmp) as path:
        path.write_text(status_text(status))


def read_status(run_dir: str | Path) -> RunStatus | None:
    """The status in ``run_dir/status.json``; None when there is no such file (a run that
    has not started, or one from before the file existed).

    Raises:
        DataError: the file cannot be read, is not JSON, or lacks a key or holds a value no
            run writes; the message names the file.
    """
    path = Path(run_dir) / STATUS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not a status file (line {exc.lineno}: {exc.msg})") from None
    try:
        return _parse(raw)
    except _Bad as exc:
        raise DataError(f"{path}: damaged status file ({exc})") from None


class _Bad(Exception):
    """A key of the status file that is missing or holds a wrong value."""


_REQUIRED: Any = object()


def _get(raw: Mapping[str, Any], key: str, kind: type, default: Any = _REQUIRED) -> Any:
    """``raw[key]`` as ``kind`` (a float key may be null: NaN); ``default`` when absent, if
    one is given."""
    if key not in raw:
        if default is _REQUIRED:
            raise _Bad(f"no {key!r}")
        return default
    val = raw[key]
    if kind is float and val is None:
        return math.nan
    ok = (isinstance(val, (int, float)) and not isinstance(val, bool) if kind is float
          else isinstance(val, int) and not isinstance(val, bool) if kind is int
          else isinstance(val, kind))
    if not ok:
        raise _Bad(f"{key!r} is {val!r}; a {kind.__name__}")
    return kind(val)


_JOB_DEFAULTS = {f.name: f.default for f in fields(JobStatus)}


def _parse_job(raw: Any) -> JobStatus:
    if not isinstance(raw, dict):
        raise _Bad(f"a job is {raw!r}; an object")
    budget = raw.get("max_iterations")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)):
        raise _Bad(f"'max_iterations' is {budget!r}; an int or null")
    job = JobStatus(name=_get(raw, "name", str), algorithm=_get(raw, "algorithm", str, ""),
                    status=_get(raw, "status", str), max_iterations=budget)
    for key, kind in (("weight", float), ("cores", int), ("iterations", int), ("first_loss", float),
                      ("last_loss", float), ("arrival", float), ("start", float), ("end", float),
                      ("reason", str)):
        setattr(job, key, _get(raw, key, kind, _JOB_DEFAULTS[key]))
    return job


def _parse(raw: Any) -> RunStatus:
    if not isinstance(raw, dict):
        raise _Bad("not a JSON object")
    fmt = _get(raw, "format", int)
    if fmt > FORMAT:
        raise _Bad(f"format {fmt}, newer than this slaq-mpi reads ({FORMAT}): update slaq-mpi")
    if "jobs" not in raw:
        raise _Bad("no 'jobs'")
    jobs = raw["jobs"]
    if not isinstance(jobs, list):
        raise _Bad(f"'jobs' is {jobs!r}; a list")
    return RunStatus(
        name=_get(raw, "name", str), policy=_get(raw, "policy", str, "?"),
        workers=_get(raw, "workers", int), epoch_seconds=_get(raw, "epoch_seconds", float),
        open=_get(raw, "open", bool, False), draining=_get(raw, "draining", bool, False),
        state=_get(raw, "state", str), updated=_get(raw, "updated", float),
        now=_get(raw, "now", float), last_decision=_get(raw, "last_decision", float, math.nan),
        utilization=_get(raw, "utilization", float, math.nan),
        jobs=[_parse_job(j) for j in jobs])


# --- a few jobs' histories from metrics.h5 -----------------------------------------------------

@dataclass(frozen=True)
class JobHistory:
    """What a prediction needs of one job's ``/jobs/<name>`` group of ``metrics.h5``: its
    ``loss`` series, ``throughput`` rows ``(cores, seconds per iteration)`` and declared
    ``convergence`` class (docs/metrics.md)."""

    name: str
    loss: np.ndarray
    throughput: np.ndarray
    convergence: str = "unknown"

    @classmethod
    def of(cls, trace: JobTrace) -> JobHistory:
        """The history of a job read whole (:func:`~slaq_mpi.storage.metrics.read_metrics`)."""
        thr = trace.throughput if trace.throughput is not None else np.zeros((0, 2))
        return cls(trace.name, trace.loss, thr, trace.convergence)


def read_job_histories(run_dir: str | Path, names: Iterable[str]) -> dict[str, JobHistory]:
    """The histories of the jobs ``names`` that ``run_dir/metrics.h5`` holds, reading those
    jobs' loss, throughput and convergence only (a run of a thousand jobs reads a few running
    ones in milliseconds, where reading the whole file takes seconds); empty when there is no
    metrics.h5 yet.

    Raises:
        DataError: a damaged or truncated metrics.h5; the message names the file.
    """
    import h5py

    path = Path(run_dir) / "metrics.h5"
    wanted = list(names)
    if not wanted or not path.is_file():
        return {}
    try:
        with h5py.File(path, "r") as f:
            jobs = f.get("jobs")
            if not isinstance(jobs, h5py.Group):
                raise DataError(f"{path}: not a slaq metrics file (it has no /jobs group)")
            found = {}
            for name in wanted:
                group = jobs.get(name)
                if group is not None:
                    found[name] = _history(name, group)
            return found
    except DataError:
        raise
    except (OSError, *DAMAGED_FILE_ERRORS) as exc:
        raise DataError(f"{path}: truncated or damaged metrics file ({exc})") from None


def _history(name: str, g: Any) -> JobHistory:
    loss = np.asarray(g["loss"][()], dtype=np.float64).reshape(-1)
    got = g.get("throughput")
    thr = np.zeros((0, 2)) if got is None else np.asarray(got[()], dtype=np.float64).reshape(-1, 2)
    conv = g.attrs.get("convergence", "unknown")
    return JobHistory(name, loss, thr, conv.decode() if isinstance(conv, bytes) else str(conv))
