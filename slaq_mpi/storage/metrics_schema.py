"""The schema of ``metrics.h5`` and its form in memory: :class:`RunData`, one :class:`JobTrace`
per job. Real runs and simulations write the same file; docs/metrics.md describes every
attribute and dataset, :mod:`slaq_mpi.storage.metrics` writes and reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EPOCH_SERIES", "JOB_SERIES", "ROOT_DEFAULTS", "RUN_ONLY_ATTRS", "JobTrace", "RunData"]

ROOT_DEFAULTS: dict[str, Any] = {"policy": "?", "seed": 0, "capacity": 0, "epoch_seconds": 1.0,
                                 "mode": "run", "config": ""}
"""What an absent root attribute reads as (``name`` reads as the run directory's name)."""

RUN_ONLY_ATTRS = ("workdir", "data_files", "epoch", "elapsed", "world_collectives", "journal")
"""Root attributes only ``slaq run`` writes (None in a :class:`RunData` that has none)."""

JOB_SERIES = {"loss": "f8", "time": "f8", "cores": "i4", "iter_seconds": "f8"}
"""Each job's series: one value per iteration, and its HDF5 type."""
EPOCH_SERIES = {"decision_ms": "f8", "pause_ms": "f8", "gap_ms": "f8"}
"""The timings of each epoch (NaN where not measured)."""


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
    """One run of an experiment under one policy (the whole metrics.h5).

    ``gap_ms`` None: not measured (a simulation), written as NaN. ``workdir``, ``data_files``,
    ``epoch``, ``elapsed``, ``world_collectives`` (the most collectives over every rank any
    rank entered between start-up and shutdown) and ``journal`` (the index of the first report
    journal file newer than this record, :mod:`slaq_mpi.storage.journal`) are kept by real runs
    only (:data:`RUN_ONLY_ATTRS`).
    """

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
    stopped: float = math.nan  # when it stopped observing its jobs
    gap_ms: np.ndarray | None = None
    workdir: str | None = None
    data_files: str | None = None
    epoch: int | None = None
    elapsed: float | None = None
    world_collectives: int | None = None
    journal: int | None = None  # the first report journal file newer than this record
    placements: list[dict[str, Any]] | None = None  # one per job placed on ranks of several hosts
