"""Helpers shared by policies: capping, admission and equal shares."""

from __future__ import annotations

from collections.abc import Sequence

from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def job_cap(job: JobSnapshot, capacity: int) -> int:
    """The most cores ``job`` may hold on a cluster of ``capacity`` cores (at least 1)."""
    return max(1, min(job.max_cores, capacity))


def admitted(snapshot: ClusterSnapshot, order: Sequence[JobSnapshot]) -> list[JobSnapshot]:
    """The first ``capacity`` jobs of ``order``: the ones that get a core this epoch."""
    return list(order[: snapshot.capacity])


def equal_shares(jobs: Sequence[JobSnapshot], capacity: int) -> dict[str, int]:
    """Equal shares of ``capacity`` for ``jobs``, capped by each job's max cores.

    Work-conserving: cores stay idle only when every job is at its cap. Cores that do not
    divide evenly go first to jobs that already hold more (so shares do not rotate between
    epochs and no ranks move needlessly), then by arrival.
    """
    alloc = {j.job_id: 0 for j in jobs}
    caps = {j.job_id: job_cap(j, capacity) for j in jobs}
    left = capacity
    ordered = sorted(jobs, key=lambda j: (-j.cores, j.arrival, j.job_id))
    open_jobs = [j.job_id for j in ordered]
    while left > 0 and open_jobs:
        share = left // len(open_jobs)
        if share == 0:
            for jid in open_jobs[:left]:
                alloc[jid] += 1
            break
        still_open = []
        for jid in open_jobs:
            give = min(share, caps[jid] - alloc[jid])
            alloc[jid] += give
            left -= give
            if alloc[jid] < caps[jid]:
                still_open.append(jid)
        open_jobs = still_open
    return alloc
