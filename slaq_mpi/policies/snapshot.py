"""Frozen views of the cluster that scheduling policies read.

A policy is a pure function of a :class:`ClusterSnapshot`: the live coordinator and the
simulator build snapshots with the same :func:`job_snapshot` and :func:`cluster_snapshot`,
call the same policy code and check its answer with the same :func:`checked_allocation`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slaq_mpi.errors import ContractError

CONVERGENCE_CLASSES = ("sublinear", "linear", "unknown")

#: Seconds a moved job's ranks are assumed to lose when nothing has been measured yet: the
#: order of the median pause of a move (checkpoint, new communicators, restore) of the runtime.
DEFAULT_MOVE_SECONDS = 0.05


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
        weight: the job's weight (> 0, default 1): ``fair`` gives shares in proportion to it,
            ``slaq`` maximizes the weighted predicted reduction.
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
    weight: float = 1.0


@dataclass(frozen=True)
class ClusterSnapshot:
    """The whole cluster as seen at one scheduling decision.

    Attributes:
        capacity: cores (worker ranks) available to jobs.
        now: seconds since the experiment started.
        epoch_seconds: the time between regular decisions: the horizon an allocation is
            judged over.
        jobs: the active jobs, in arrival order.
        move_seconds: the time a moved job loses (its ranks pause to checkpoint, build new
            communicators and restore): live, the median pause of the moves measured so far;
            in simulation, the simulator's move cost.
    """

    capacity: int
    now: float
    epoch_seconds: float
    jobs: tuple[JobSnapshot, ...] = field(default_factory=tuple)
    move_seconds: float = DEFAULT_MOVE_SECONDS


def utility_pairs(utility: Mapping[str, Any] | None) -> tuple[tuple[str, float], ...]:
    """A job's validated ``utility:`` mapping as the sorted ``(key, value)`` pairs a
    :class:`JobSnapshot` holds (``()`` for a job without one)."""
    if not utility:
        return ()
    return tuple(sorted((str(key), float(value)) for key, value in utility.items()))


def job_snapshot(job_id: str, *, losses: Sequence[float], throughput: Sequence[tuple[int, float]],
                 cores: int, max_cores: int, capacity: int, convergence: str, arrival: float,
                 attained_core_seconds: float, utility: Mapping[str, Any] | None = None,
                 max_iterations: int | None = None, weight: float = 1.0) -> JobSnapshot:
    """What a policy may know about one active job, from its record so far.

    ``max_cores`` is the job's own limit; the snapshot's is at most ``capacity`` (a job can use
    no more cores than there are). The live coordinator and the simulator both build every
    job's snapshot here.
    """
    # every field at once: the same snapshot as ``JobSnapshot(...)``, whose frozen __init__
    # sets the fields one by one through object.__setattr__ (one snapshot per job and decision)
    snap = _new_object(JobSnapshot)
    snap.__dict__.update(
        job_id=job_id,
        losses=tuple(losses),
        throughput=tuple(throughput),
        cores=cores,
        max_cores=min(max_cores, capacity),
        convergence=convergence,
        arrival=arrival,
        attained_core_seconds=attained_core_seconds,
        utility=utility_pairs(utility),
        max_iterations=max_iterations,
        weight=float(weight),
    )
    return snap


_new_object = object.__new__


def cluster_snapshot(capacity: int, now: float, epoch_seconds: float,
                     jobs: Iterable[JobSnapshot],
                     move_seconds: float = DEFAULT_MOVE_SECONDS) -> ClusterSnapshot:
    """The cluster at one decision: ``jobs`` (the active ones) in arrival order, jobs arriving
    together by ``job_id``; ``move_seconds`` the time a moved job loses (a NaN or negative
    value, as a median of no measurement, is taken as :data:`DEFAULT_MOVE_SECONDS`)."""
    ordered = tuple(sorted(jobs, key=lambda j: (j.arrival, j.job_id)))
    move = float(move_seconds)
    if not move >= 0 or move == float("inf"):
        move = DEFAULT_MOVE_SECONDS
    return ClusterSnapshot(capacity=capacity, now=now, epoch_seconds=epoch_seconds, jobs=ordered,
                           move_seconds=move)


def checked_allocation(alloc: Mapping[str, Any], snapshot: ClusterSnapshot,
                       policy: str) -> dict[str, int]:
    """``alloc`` (a policy's answer to ``snapshot``) as ``{job_id: cores}`` with the jobs given
    0 left out, once it is checked against the policy contract. The live coordinator and the
    simulator both use it, so a policy breaks the contract in both or in neither.

    Raises:
        ContractError: a job not in the snapshot, cores that are not an integer >= 0, more
            cores than ``capacity`` in all, or cores above a job's ``max_cores`` (checked in
            this order).
    """
    jobs = {j.job_id: j for j in snapshot.jobs}
    out: dict[str, int] = {}
    for jid, cores in alloc.items():
        if jid not in jobs:
            raise ContractError(f"policy {policy!r} allocated cores to unknown job {jid!r}")
        try:
            c = int(cores)
            whole = c == cores and not isinstance(cores, bool | np.bool_)  # True is not 1 core
        except (TypeError, ValueError, OverflowError):
            whole = False
        if not whole or c < 0:
            raise _over(policy, jid, cores, jobs[jid])
        if c:
            out[jid] = c
    if sum(out.values()) > snapshot.capacity:
        raise ContractError(f"policy {policy!r} allocated {sum(out.values())} cores; capacity is "
                            f"{snapshot.capacity}")
    for jid, c in out.items():
        if c > jobs[jid].max_cores:
            raise _over(policy, jid, alloc[jid], jobs[jid])
    return out


def _over(policy: str, jid: str, cores: Any, job: JobSnapshot) -> ContractError:
    return ContractError(f"policy {policy!r} gave job {jid!r} {cores!r} cores; allowed: an "
                         f"integer from 0 to its max_cores, {job.max_cores}")
