"""First in, first out: earlier jobs take all the cores they can use."""

from __future__ import annotations

from slaq_mpi.policies._share import job_cap
from slaq_mpi.policies.snapshot import ClusterSnapshot


class FifoPolicy:
    """Jobs in arrival order each take up to their max cores until the cores run out."""

    name = "fifo"

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id."""
        left = snapshot.capacity
        alloc: dict[str, int] = {}
        for job in sorted(snapshot.jobs, key=lambda j: (j.arrival, j.job_id)):
            give = min(job_cap(job, snapshot.capacity), left)
            alloc[job.job_id] = give
            left -= give
        return alloc
