"""``metrics.h5``: a run's history, in the one schema of real runs and simulations.

:class:`RunData` (one :class:`JobTrace` per job) is the file in memory: the simulator returns
one, ``slaq report`` and ``slaq sim-check`` read one. :func:`write_metrics` writes it
atomically and :func:`read_metrics` reads it back. Rank 0 of a live run grows a
:class:`RunRecord` (one :class:`JobRecord` per job), rewrites the file from it after every
epoch, and ``--resume`` reads it back (:meth:`RunRecord.read`). docs/metrics.md describes
every attribute and dataset.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from slaq_mpi.errors import DAMAGED_FILE_ERRORS, DataError
from slaq_mpi.storage.durable import replacing
from slaq_mpi.storage.metrics_schema import (
    EPOCH_SERIES,
    JOB_SERIES,
    ROOT_DEFAULTS,
    RUN_ONLY_ATTRS,
    JobTrace,
    RunData,
)

__all__ = ["JobRecord", "JobTrace", "RunData", "RunRecord", "read_metrics", "text_attribute",
           "write_metrics"]


PLACEMENTS = "placements"
"""The dataset of a run on several nodes: one JSON text per placement of a job on ranks
(time, job, ranks, hosts, free worker ranks per host; :func:`slaq_mpi.runtime.placement.assignments`)."""


# --- the writer -------------------------------------------------------------------------------

def write_metrics(path: str | Path, run: RunData) -> None:
    """Write ``run`` to ``path`` atomically (:func:`slaq_mpi.storage.durable.replacing`): a
    failed or interrupted write leaves the old file, and no temp file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")
    with replacing(p, tmp) as path_tmp, h5py.File(path_tmp, "w") as f:
        _write_root(f, run)
        jobs = f.create_group("jobs")
        for name, job in run.jobs.items():
            _write_job(jobs.create_group(name), job)
        _write_epochs(f.create_group("epochs"), run)
        if run.placements:
            f.create_dataset(PLACEMENTS, data=[json.dumps(p, sort_keys=True)
                                               for p in run.placements],
                             dtype=h5py.string_dtype())


def _write_root(f: h5py.File, run: RunData) -> None:
    for key in ("name", "policy", "mode", "config"):
        f.attrs[key] = str(getattr(run, key))
    f.attrs["seed"] = int(run.seed)
    f.attrs["capacity"] = int(run.capacity)
    f.attrs["epoch_seconds"] = float(run.epoch_seconds)
    if math.isfinite(run.stopped):
        f.attrs["stopped"] = float(run.stopped)
    for key in RUN_ONLY_ATTRS:
        if getattr(run, key) is not None:
            f.attrs[key] = getattr(run, key)


def _write_job(g: h5py.Group, job: JobTrace) -> None:
    for key, dtype in JOB_SERIES.items():
        g.create_dataset(key, data=np.asarray(getattr(job, key), dtype=dtype))
    thr = job.throughput if job.throughput is not None else np.zeros((0, 2))
    g.create_dataset("throughput", data=np.asarray(thr, dtype="f8").reshape(-1, 2))
    for key in ("algorithm", "status", "reason", "convergence"):
        g.attrs[key] = str(getattr(job, key))
    for key in ("arrival", "start", "end", "attained_core_seconds"):
        g.attrs[key] = float(getattr(job, key))
    g.attrs["max_cores"] = int(job.max_cores)
    if job.l_star is not None:
        g.attrs["l_star"] = float(job.l_star)
    if job.utility:
        g.attrs["utility"] = json.dumps(job.utility, sort_keys=True)
    if job.scaling is not None:
        g.attrs["scaling"] = np.asarray(job.scaling, dtype="f8")


def _write_epochs(ep: h5py.Group, run: RunData) -> None:
    n = len(run.epoch_time)
    ep.create_dataset("job_names", data=np.array(run.job_names, dtype=object),
                      dtype=h5py.string_dtype(encoding="utf-8"))
    ep.create_dataset("time", data=np.asarray(run.epoch_time, dtype="f8"))
    alloc = np.asarray(run.alloc, dtype="i4").reshape(n, len(run.job_names))
    ep.create_dataset("alloc", data=alloc, compression="gzip" if alloc.size > 4096 else None)
    for key, dtype in EPOCH_SERIES.items():
        values = getattr(run, key)
        ep.create_dataset(key, data=np.full(n, np.nan) if values is None
                          else np.asarray(values, dtype=dtype))
    ep.create_dataset("moved", data=np.asarray(np.zeros(n) if run.moved is None else run.moved,
                                               dtype="i1"))


# --- the reader -------------------------------------------------------------------------------

def read_metrics(path: str | Path) -> RunData:
    """Read a metrics.h5 written by ``slaq run`` or ``slaq simulate``.

    ``path`` may be the file or a run directory holding ``metrics.h5``. An absent attribute
    or epoch series reads as its default (:data:`ROOT_DEFAULTS`, NaN, the :class:`JobTrace`
    defaults).

    Raises:
        DataError: no such file, not a metrics file (no ``/jobs`` and ``/epochs``), or a
            truncated or damaged one; the message names the file.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "metrics.h5"
    if not p.is_file():
        raise DataError(f"{p}: no such file; a run directory holds the metrics.h5 of `slaq run` "
                        "or `slaq simulate --out`")
    try:
        return _load(p)
    except DataError:
        raise
    except (OSError, *DAMAGED_FILE_ERRORS) as exc:
        raise DataError(f"{p}: truncated or damaged metrics file ({exc})") from None


def text_attribute(path: Path, key: str) -> str | None:
    """The text root attribute ``key`` of the metrics.h5 at ``path`` (None: no such
    attribute, or no readable file)."""
    try:
        with h5py.File(path, "r") as f:
            value = f.attrs.get(key)
    except OSError:
        return None
    if isinstance(value, bytes):
        value = value.decode()
    return value if isinstance(value, str) and value else None


def _load(p: Path) -> RunData:
    """The run in the file ``p``; errors as h5py raises them, and :class:`DataError` for a
    file that is not a metrics file or holds what no run writes."""
    with h5py.File(p, "r") as f:
        if not isinstance(f.get("jobs"), h5py.Group) or not isinstance(f.get("epochs"), h5py.Group):
            raise DataError(f"{p}: not a slaq metrics file (it has no /jobs and /epochs groups)")
        jobs = {name: _read_job(name, g) for name, g in f["jobs"].items()}
        run = _read_epochs(f["epochs"], jobs, _read_root(f.attrs, p))
        if isinstance(f.get(PLACEMENTS), h5py.Dataset):
            run.placements = [json.loads(_text(x)) for x in f[PLACEMENTS][()]]
    _check(run, p)
    return run


def _text(val: object) -> str:
    return val.decode() if isinstance(val, bytes) else str(val)


def _read_root(a: h5py.AttributeManager, p: Path) -> dict[str, Any]:
    """The root attributes as :class:`RunData` fields, an absent one as its default."""
    get = {**ROOT_DEFAULTS, "name": p.parent.name, "stopped": math.nan, **dict(a.items())}

    def kept(key: str, kind: Callable[[Any], Any]) -> Any:
        return kind(get[key]) if key in get else None

    return {"name": _text(get["name"]), "policy": _text(get["policy"]), "mode": _text(get["mode"]),
            "config": _text(get["config"]), "seed": int(get["seed"]), "capacity": int(get["capacity"]),
            "epoch_seconds": float(get["epoch_seconds"]), "stopped": float(get["stopped"]),
            "workdir": kept("workdir", _text), "data_files": kept("data_files", _text),
            "epoch": kept("epoch", int), "elapsed": kept("elapsed", float),
            "world_collectives": kept("world_collectives", int), "journal": kept("journal", int)}


def _read_job(name: str, g: h5py.Group) -> JobTrace:
    a = g.attrs
    l_star = float(a["l_star"]) if "l_star" in a else None
    scaling = None
    if "scaling" in a:
        work, overhead, comm = (float(x) for x in a["scaling"])
        scaling = (work, overhead, comm)
    return JobTrace(
        name=name, algorithm=_text(a.get("algorithm", "")),
        arrival=float(a.get("arrival", 0.0)),
        loss=np.asarray(g["loss"][()], dtype=np.float64),
        time=np.asarray(g["time"][()], dtype=np.float64),
        cores=np.asarray(g["cores"][()], dtype=np.int32),
        iter_seconds=np.asarray(g["iter_seconds"][()], dtype=np.float64),
        start=float(a.get("start", math.nan)), end=float(a.get("end", math.nan)),
        status=_text(a.get("status", "")), reason=_text(a.get("reason", "")),
        convergence=_text(a.get("convergence", "unknown")),
        l_star=l_star if l_star is None or math.isfinite(l_star) else None,
        max_cores=int(a.get("max_cores", 0)),
        attained_core_seconds=float(a.get("attained_core_seconds", 0.0)),
        throughput=np.asarray(g["throughput"][()], dtype=np.float64).reshape(-1, 2)
        if "throughput" in g else None,
        utility=json.loads(_text(a["utility"])) if "utility" in a else None,
        scaling=scaling,
    )


def _read_epochs(ep: h5py.Group, jobs: dict[str, JobTrace], root: dict[str, Any]) -> RunData:
    etime = np.asarray(ep["time"][()], dtype=np.float64) if "time" in ep else np.zeros(0)
    names = [_text(n) for n in ep["job_names"][()]] if "job_names" in ep else list(jobs)
    if "alloc" in ep:
        alloc = np.asarray(ep["alloc"][()], dtype=np.int32).reshape(len(etime), len(names))
    else:
        alloc = np.zeros((len(etime), len(names)), dtype=np.int32)

    def timing(key: str) -> np.ndarray:
        return np.asarray(ep[key][()], dtype=np.float64) if key in ep else np.full(len(etime), np.nan)

    moved = np.asarray(ep["moved"][()]) if "moved" in ep else None
    return RunData(jobs=jobs, job_names=names, epoch_time=etime, alloc=alloc, moved=moved,
                   decision_ms=timing("decision_ms"), pause_ms=timing("pause_ms"),
                   gap_ms=timing("gap_ms"), **root)


def _check(run: RunData, p: Path) -> None:
    """Refuse what no run writes (a damaged or hand-edited file), which would otherwise fail
    deep in a report, or never end (a simulation from a NaN arrival)."""
    def bad(what: str) -> DataError:
        return DataError(f"{p}: damaged metrics file ({what})")

    if not (math.isfinite(run.epoch_seconds) and run.epoch_seconds > 0):
        raise bad(f"epoch_seconds is {run.epoch_seconds}; a run's is a number > 0")
    for name, job in run.jobs.items():
        if not (math.isfinite(job.arrival) and job.arrival >= 0):
            raise bad(f"job {name}'s arrival is {job.arrival}; a finite time >= 0")
        series = {key: getattr(job, key) for key in JOB_SERIES}
        if any(v.ndim != 1 for v in series.values()) or len({v.size for v in series.values()}) > 1:
            shapes = ", ".join(f"{k} {v.shape}" for k, v in series.items())
            raise bad(f"job {name}'s series are {shapes}; one value per iteration each")
    unknown = [n for n in run.job_names if n not in run.jobs]
    if unknown:
        raise bad(f"/epochs names job {unknown[0]}, which /jobs does not hold")
    if not np.all(np.isfinite(run.epoch_time)):
        raise bad("/epochs/time holds a value that is not finite")


# --- rank 0's record of a live run ------------------------------------------------------------

@dataclass
class JobRecord:
    """Everything rank 0 knows about one job."""

    name: str
    algorithm: str
    convergence: str
    arrival: float
    max_cores: int
    loss: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)
    iter_seconds: list[float] = field(default_factory=list)
    throughput: list[tuple[int, float]] = field(default_factory=list)
    attained_core_seconds: float = 0.0
    start: float = math.nan
    end: float = math.nan
    status: str = "waiting"
    reason: str = ""

    @property
    def iterations(self) -> int:
        """Iterations run so far."""
        return len(self.loss)

    def truncate(self, iterations: int) -> None:
        """Forget iterations past ``iterations`` (they will be run again after a resume);
        the throughput observations and attained core-seconds are rebuilt from what is kept."""
        for seq in (self.loss, self.time, self.cores, self.iter_seconds):
            del seq[iterations:]
        pairs = list(zip(self.cores, self.iter_seconds, strict=True))
        self.attained_core_seconds = float(sum(c * s for c, s in pairs))
        by_cores: dict[int, list[float]] = {}
        for c, s in pairs:
            by_cores.setdefault(c, []).append(s)
        self.throughput = [(c, sorted(v)[len(v) // 2]) for c, v in by_cores.items()]

    def trace(self) -> JobTrace:
        """This job as the metrics file holds it."""
        return JobTrace(
            name=self.name, algorithm=self.algorithm, arrival=self.arrival,
            loss=np.asarray(self.loss, dtype=np.float64), time=np.asarray(self.time, dtype=np.float64),
            cores=np.asarray(self.cores, dtype=np.int32),
            iter_seconds=np.asarray(self.iter_seconds, dtype=np.float64),
            start=self.start, end=self.end, status=self.status, reason=self.reason,
            convergence=self.convergence, max_cores=self.max_cores,
            attained_core_seconds=self.attained_core_seconds,
            throughput=np.asarray(self.throughput, dtype=np.float64).reshape(-1, 2),
        )

    @classmethod
    def from_trace(cls, job: JobTrace) -> JobRecord:
        """The record of a job read back from the metrics file."""
        thr = job.throughput if job.throughput is not None else np.zeros((0, 2))
        return cls(
            name=job.name, algorithm=job.algorithm, convergence=job.convergence,
            arrival=job.arrival, max_cores=job.max_cores, loss=job.loss.tolist(),
            time=job.time.tolist(), cores=job.cores.tolist(), iter_seconds=job.iter_seconds.tolist(),
            throughput=[(int(c), float(s)) for c, s in thr],
            attained_core_seconds=job.attained_core_seconds, start=job.start, end=job.end,
            status=job.status, reason=job.reason,
        )


@dataclass
class RunRecord:
    """The run's metrics: root attributes (the names of :class:`RunData`'s), jobs (in the
    column order of ``epoch_alloc``), and one row per epoch."""

    attrs: dict[str, Any]
    jobs: dict[str, JobRecord]
    epoch_time: list[float] = field(default_factory=list)
    epoch_alloc: list[list[int]] = field(default_factory=list)
    decision_ms: list[float] = field(default_factory=list)
    pause_ms: list[float] = field(default_factory=list)
    gap_ms: list[float] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)
    placements: list[dict[str, Any]] = field(default_factory=list)

    def add_epoch(self, t: float, alloc: dict[str, int], decision_ms: float, moved: bool) -> None:
        """Record an epoch's start, its allocation and decision time (pause comes later)."""
        self.epoch_time.append(t)
        self.epoch_alloc.append([alloc.get(name, 0) for name in self.jobs])
        self.decision_ms.append(decision_ms)
        self.pause_ms.append(math.nan)
        self.gap_ms.append(math.nan)
        self.moved.append(int(moved))

    def truncate_epochs(self, epochs: int) -> None:
        """Keep only the first ``epochs`` epoch rows."""
        for seq in (self.epoch_time, self.epoch_alloc, self.decision_ms, self.pause_ms,
                    self.gap_ms, self.moved):
            del seq[epochs:]

    def run_data(self) -> RunData:
        """The record as the metrics file holds it."""
        get = {**ROOT_DEFAULTS, "name": "", "stopped": math.nan,
               **{k: None for k in RUN_ONLY_ATTRS}, **self.attrs}
        names = list(self.jobs)
        return RunData(
            name=get["name"], policy=get["policy"], seed=get["seed"], capacity=get["capacity"],
            epoch_seconds=get["epoch_seconds"], mode=get["mode"], config=get["config"],
            jobs={name: job.trace() for name, job in self.jobs.items()}, job_names=names,
            epoch_time=np.asarray(self.epoch_time, dtype=np.float64),
            alloc=_alloc_table(self.epoch_alloc, len(self.epoch_time), len(names)),
            decision_ms=np.asarray(self.decision_ms, dtype=np.float64),
            pause_ms=np.asarray(self.pause_ms, dtype=np.float64),
            gap_ms=np.asarray(self.gap_ms, dtype=np.float64),
            moved=np.asarray(self.moved, dtype=np.int8), stopped=get["stopped"],
            **{key: get[key] for key in RUN_ONLY_ATTRS},
            placements=list(self.placements) or None,
        )

    def write(self, path: Path) -> None:
        """Write ``metrics.h5`` atomically (:func:`write_metrics`)."""
        write_metrics(path, self.run_data())

    @classmethod
    def read(cls, path: Path) -> RunRecord:
        """Read back the ``metrics.h5`` at ``path``, with its jobs in the order of its
        columns; errors as h5py raises them (FileNotFoundError: no such file)."""
        run = _load(Path(path))
        attrs: dict[str, Any] = {key: getattr(run, key) for key in (
            "name", "policy", "seed", "capacity", "epoch_seconds", "mode", "config")}
        if math.isfinite(run.stopped):
            attrs["stopped"] = run.stopped
        attrs.update({key: getattr(run, key) for key in RUN_ONLY_ATTRS
                      if getattr(run, key) is not None})
        rec = cls(attrs=attrs, jobs={name: JobRecord.from_trace(run.jobs[name])
                                     for name in run.job_names})
        rec.epoch_time = run.epoch_time.tolist()
        rec.epoch_alloc = run.alloc.tolist()
        rec.decision_ms = run.decision_ms.tolist()
        rec.pause_ms = run.pause_ms.tolist()
        rec.gap_ms = [math.nan] * len(rec.epoch_time) if run.gap_ms is None else run.gap_ms.tolist()
        rec.moved = [] if run.moved is None else [int(x) for x in run.moved]
        rec.placements = list(run.placements or [])
        return rec


def _alloc_table(rows: list[list[int]], epochs: int, jobs: int) -> np.ndarray:
    """The allocation history as an (epochs, jobs) array; a row written before jobs were added
    to the run is shorter: those jobs held 0 cores then."""
    table = np.zeros((epochs, jobs), dtype=np.int32)
    for i, row in enumerate(rows[:epochs]):
        table[i, :len(row)] = row
    return table
