"""Frozen views of the cluster that scheduling policies read.

A policy is a pure function of a :class:`ClusterSnapshot`: the live coordinator and the
simulator build snapshots the same way, call the same policy code and check its answer with
the same :func:`checked_allocation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slaq_mpi.errors import ContractError

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


def checked_allocation(alloc: Mapping[str, Any], snapshot: ClusterSnapshot,
                       policy: str) -> dict[str, int]:
    """``alloc`` (a policy's answer to ``snapshot``) as ``{job_id: cores}`` with the jobs given
    0 left out, once it is checked against the policy contract. The live coordinator and the
    simulator both use it, so a policy breaks the contract in both or in neither.

    Raises:
        ContractError: a job not in the snapshot, cores that are not an integer >= 0 or above
            the job's ``max_cores``, or more cores than ``capacity`` in all.
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
        if not whole or c < 0 or c > jobs[jid].max_cores:
            raise ContractError(f"policy {policy!r} gave job {jid!r} {cores!r} cores; allowed: an "
                                f"integer from 0 to its max_cores, {jobs[jid].max_cores}")
        if c:
            out[jid] = c
    if sum(out.values()) > snapshot.capacity:
        raise ContractError(f"policy {policy!r} allocated {sum(out.values())} cores; capacity is "
                            f"{snapshot.capacity}")
    return out
