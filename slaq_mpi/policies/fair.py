"""The paper's baseline: a work-conserving fair scheduler."""

from __future__ import annotations

from slaq_mpi.policies._share import admitted, fair_shares
from slaq_mpi.policies.snapshot import ClusterSnapshot


class FairPolicy:
    """A share of the cores for every active job in proportion to its ``weight`` (equal
    shares for equal weights), capped by its max cores.

    Cores a capped job cannot use go to the others (work-conserving). When jobs outnumber
    cores, the jobs with the least attained core-seconds per unit of weight run (then earliest
    arrival), so a waiting job's turn always comes.
    """

    name = "fair"

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id."""
        order = sorted(
            snapshot.jobs, key=lambda j: (j.attained_core_seconds / j.weight, j.arrival, j.job_id)
        )
        return fair_shares(admitted(snapshot, order), snapshot.capacity)
