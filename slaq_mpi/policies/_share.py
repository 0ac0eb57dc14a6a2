"""Helpers shared by policies: capping, admission and (weighted) fair shares."""

from __future__ import annotations

from collections.abc import Sequence

from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def job_cap(job: JobSnapshot, capacity: int) -> int:
    """The most cores ``job`` may hold on a cluster of ``capacity`` cores (at least 1)."""
    return max(1, min(job.max_cores, capacity))


def admitted(snapshot: ClusterSnapshot, order: Sequence[JobSnapshot]) -> list[JobSnapshot]:
    """The first ``capacity`` jobs of ``order``: the ones that get a core this epoch."""
    return list(order[: snapshot.capacity])


def fair_shares(jobs: Sequence[JobSnapshot], capacity: int) -> dict[str, int]:
    """Shares of ``capacity`` for ``jobs`` in proportion to their weights (equal for equal
    weights), capped by each job's max cores.

    Work-conserving: cores stay idle only when every job is at its cap. Cores that do not
    divide by the weights go first to heavier jobs, then to jobs that already hold more (so
    shares do not rotate between epochs and no ranks move needlessly), then by arrival.
    """
    alloc = {j.job_id: 0 for j in jobs}
    caps = {j.job_id: job_cap(j, capacity) for j in jobs}
    weight = {j.job_id: j.weight for j in jobs}
    left = capacity
    ordered = sorted(jobs, key=lambda j: (-j.weight, -j.cores, j.arrival, j.job_id))
    open_jobs = [j.job_id for j in ordered]
    while left > 0 and open_jobs:
        total = sum(weight[jid] for jid in open_jobs)
        shares = {jid: int(left * weight[jid] / total + 1e-9) for jid in open_jobs}
        if not any(shares.values()):
            for jid in open_jobs[:left]:
                alloc[jid] += 1
            break
        still_open = []
        for jid in open_jobs:
            give = min(shares[jid], caps[jid] - alloc[jid])
            alloc[jid] += give
            left -= give
            if alloc[jid] < caps[jid]:
                still_open.append(jid)
        open_jobs = still_open
    return alloc
