"""``oracle``: a simulation-only policy that knows every job's true loss curve and speed.

It runs SLAQ's greedy (every job starts with one core, then each further core goes to the job
whose true normalized loss drops the most with it over the next epoch) on the TRUE normalized
loss ``(L - L*) / (L0 - L*)`` and the TRUE seconds per iteration, instead of predictions. It is
the upper bound that shows how much of the possible gain ``slaq``'s predictions capture.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import numpy as np

from slaq_mpi.sim.workload import SimJob
from slaq_mpi.snapshot import ClusterSnapshot

__all__ = ["OraclePolicy"]


class OraclePolicy:
    """Greedy allocation on true future curves (simulator only: needs :meth:`bind_truth`)."""

    name = "oracle"

    def __init__(self) -> None:
        self._truth: dict[str, tuple[np.ndarray, SimJob]] = {}

    def bind_truth(self, jobs: Mapping[str, SimJob]) -> None:
        """Give the policy the simulated jobs (their true curves and scaling models)."""
        self._truth = {name: (job.normalized_curve(), job) for name, job in jobs.items()}

    def _gains(self, job_id: str, done: int, max_cores: int, epoch: float) -> np.ndarray:
        """True normalized loss reduction over the next epoch with 0..max_cores cores."""
        if job_id not in self._truth:
            raise KeyError(f"oracle: no truth for job {job_id!r}; it runs only in the simulator")
        curve, job = self._truth[job_id]
        cores = np.arange(1, max_cores + 1)
        iters = epoch / job.scaling.seconds_array(cores)
        last = len(curve) - 1
        pos = np.minimum(done + iters, last)
        grid = np.arange(len(curve))
        now = float(np.interp(min(done, last), grid, curve))
        return np.concatenate(([0.0], now - np.interp(pos, grid, curve)))

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id."""
        cap = snapshot.capacity
        jobs = list(snapshot.jobs)
        if not jobs or cap <= 0:
            return {}
        gains = {
            j.job_id: self._gains(j.job_id, len(j.losses), max(1, min(j.max_cores, cap)),
                                  snapshot.epoch_seconds)
            for j in jobs
        }
        if len(jobs) > cap:
            jobs.sort(key=lambda j: (-gains[j.job_id][1], j.arrival, j.job_id))
            jobs = jobs[:cap]
        alloc = {j.job_id: 1 for j in jobs}
        left = cap - len(jobs)
        heap = []
        for order, j in enumerate(jobs):
            g = gains[j.job_id]
            if len(g) > 2:
                heap.append((-(g[2] - g[1]), order, j.job_id))
        heapq.heapify(heap)
        while left > 0 and heap:
            neg, order, jid = heapq.heappop(heap)
            if -neg <= 0:
                break
            alloc[jid] += 1
            left -= 1
            g, a = gains[jid], alloc[jid]
            if a + 1 < len(g):
                heapq.heappush(heap, (-(g[a + 1] - g[a]), order, jid))
        return alloc
