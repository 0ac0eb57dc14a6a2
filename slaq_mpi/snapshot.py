"""Frozen views of the cluster that scheduling policies read.

A policy is a pure function of a :class:`ClusterSnapshot`: the live coordinator and the
simulator build snapshots the same way and call the same policy code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONVERGENCE_CLASSES = ("sublinear", "linear", "unknown")


@dataclass(frozen=True)
class JobSnapshot:
    """What a policy may know about one active (arrived, not finished) job.

    Attributes:
        job_id: unique job name.
        losses: global loss of every iteration run so far, in order (may be empty).
        throughput: observed ``(cores, seconds_per_iteration)`` pairs, one per epoch run (after a
            resume, one per core count for the epochs before it).
        cores: cores the job holds now (0 if waiting).
        max_cores: the most cores the job can use.
        convergence: declared convergence class, one of ``CONVERGENCE_CLASSES``.
        arrival: arrival time in seconds since the experiment started.
        attained_core_seconds: core-seconds the job has received so far.
        utility: optional utility-of-completion-time spec (policy-specific mapping).
        max_iterations: the job's iteration budget (stopping rule), or None.
    """

    job_id: str
    losses: tuple[float, ...]
    throughput: tuple[tuple[int, float], ...]
    cores: int
    max_cores: int
    convergence: str = "unknown"
    arrival: float = 0.0
    attained_core_seconds: float = 0.0
    utility: tuple[tuple[str, float], ...] = ()
    max_iterations: int | None = None


@dataclass(frozen=True)
class ClusterSnapshot:
    """The whole cluster as seen at one scheduling decision.

    Attributes:
        capacity: cores (worker ranks) available to jobs.
        now: seconds since the experiment started.
        epoch_seconds: length of the scheduling epoch the allocation is for.
        jobs: the active jobs, in arrival order.
    """

    capacity: int
    now: float
    epoch_seconds: float
    jobs: tuple[JobSnapshot, ...] = field(default_factory=tuple)
