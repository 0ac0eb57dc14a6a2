"""What a run records, and ``metrics.h5``, its file (schema in ``docs/metrics.md``).

Rank 0 owns a :class:`RunRecord`; it rewrites ``metrics.h5`` atomically after every epoch
so that a crashed or stopped run keeps its history, and ``--resume`` reads it back.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from slaq_mpi.storage.durable import replacing


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


@dataclass
class RunRecord:
    """The run's metrics: attributes, jobs, and one row per epoch."""

    attrs: dict[str, Any]
    jobs: dict[str, JobRecord]
    epoch_time: list[float] = field(default_factory=list)
    epoch_alloc: list[list[int]] = field(default_factory=list)
    decision_ms: list[float] = field(default_factory=list)
    pause_ms: list[float] = field(default_factory=list)
    gap_ms: list[float] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)

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

    def write(self, path: Path) -> None:
        """Write ``metrics.h5`` atomically (temp file, fsync, rename); a failed write (a full
        disk) leaves no temp file behind."""
        with replacing(path, path.with_name(f".{path.name}.tmp{os.getpid()}")) as tmp:
            self._write(tmp)

    def _write(self, tmp: Path) -> None:
        with h5py.File(tmp, "w") as f:
            for key, val in self.attrs.items():
                f.attrs[key] = val
            jobs = f.create_group("jobs")
            for job in self.jobs.values():
                g = jobs.create_group(job.name)
                g.create_dataset("loss", data=np.asarray(job.loss, dtype="f8"))
                g.create_dataset("time", data=np.asarray(job.time, dtype="f8"))
                g.create_dataset("cores", data=np.asarray(job.cores, dtype="i4"))
                g.create_dataset("iter_seconds", data=np.asarray(job.iter_seconds, dtype="f8"))
                g.create_dataset("throughput", data=np.asarray(job.throughput, dtype="f8").reshape(-1, 2))
                for key in ("algorithm", "convergence", "arrival", "max_cores", "start", "end",
                            "status", "reason", "attained_core_seconds"):
                    g.attrs[key] = getattr(job, key)
            ep = f.create_group("epochs")
            names = list(self.jobs)
            ep.create_dataset("job_names", data=np.array(names, dtype=object),
                              dtype=h5py.string_dtype())
            ep.create_dataset("time", data=np.asarray(self.epoch_time, dtype="f8"))
            ep.create_dataset("alloc", data=np.asarray(self.epoch_alloc, dtype="i4").reshape(-1, len(names)))
            ep.create_dataset("decision_ms", data=np.asarray(self.decision_ms, dtype="f8"))
            ep.create_dataset("pause_ms", data=np.asarray(self.pause_ms, dtype="f8"))
            ep.create_dataset("gap_ms", data=np.asarray(self.gap_ms, dtype="f8"))
            ep.create_dataset("moved", data=np.asarray(self.moved, dtype="i1"))

    @classmethod
    def read(cls, path: Path) -> RunRecord:
        """Read a ``metrics.h5`` written by :meth:`write`."""
        with h5py.File(path, "r") as f:
            attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
            jobs: dict[str, JobRecord] = {}
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["epochs/job_names"][()]]
            for name in names:
                g = f["jobs"][name]
                a = {k: (v.item() if hasattr(v, "item") else v) for k, v in g.attrs.items()}
                jobs[name] = JobRecord(
                    name=name,
                    algorithm=str(a["algorithm"]),
                    convergence=str(a["convergence"]),
                    arrival=float(a["arrival"]),
                    max_cores=int(a["max_cores"]),
                    loss=[float(x) for x in g["loss"][()]],
                    time=[float(x) for x in g["time"][()]],
                    cores=[int(x) for x in g["cores"][()]],
                    iter_seconds=[float(x) for x in g["iter_seconds"][()]],
                    throughput=[(int(c), float(s)) for c, s in g["throughput"][()]],
                    attained_core_seconds=float(a["attained_core_seconds"]),
                    start=float(a["start"]),
                    end=float(a["end"]),
                    status=str(a["status"]),
                    reason=str(a["reason"]),
                )
            ep = f["epochs"]
            rec = cls(attrs=attrs, jobs=jobs)
            rec.epoch_time = [float(x) for x in ep["time"][()]]
            rec.epoch_alloc = [[int(c) for c in row] for row in ep["alloc"][()]]
            rec.decision_ms = [float(x) for x in ep["decision_ms"][()]]
            rec.pause_ms = [float(x) for x in ep["pause_ms"][()]]
            rec.gap_ms = ([float(x) for x in ep["gap_ms"][()]] if "gap_ms" in ep
                          else [math.nan] * len(rec.pause_ms))
            rec.moved = [int(x) for x in ep["moved"][()]]
        return rec
