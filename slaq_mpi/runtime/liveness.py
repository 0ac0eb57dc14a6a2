"""Whether the ranks of each training job still answer, as rank 0 can tell from their reports.

A job's leader reports about once per ``epoch_seconds`` on its own clock, and no sooner than
its iterations end: a job whose iteration takes longer than the epoch reports once per
iteration. A job that trains on ranks rank 0 has assigned (and not heard of as ended or
released) is *silent* when its leader has sent nothing for

    SILENT_EPOCHS * max(epoch_seconds, pace) + SILENT_MARGIN seconds

(plus :data:`START_SECONDS` until its first report after an assignment, which also restores
its state), where ``pace`` is the slowest of its recent iterations, scaled up when it now has
fewer cores than then (:func:`pace`). A silent job has lost a rank (its node died, or a rank
was killed): its leader is gone, or waits for a peer that is. A job with no iteration measured
yet is never silent: nothing tells how long its first iteration may take.

Plain bookkeeping, no MPI: the coordinator tells :class:`Liveness` what it hears and asks it
which jobs are silent (:meth:`Liveness.silent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slaq_mpi.errors import RanksLost
from slaq_mpi.storage.metrics import JobRecord

__all__ = ["CHECK_SECONDS", "PACE_WINDOW", "SILENT_EPOCHS", "SILENT_MARGIN", "START_SECONDS",
           "Liveness", "pace"]

SILENT_EPOCHS = 3  # report periods a job may miss before it is silent
SILENT_MARGIN = 8.0  # seconds on top (a loaded machine delays a report now and then)
START_SECONDS = 10.0  # seconds more for the first report after an assignment (state restored)
PACE_WINDOW = 20  # the recent iterations a job's pace is taken from
CHECK_SECONDS = 0.5  # the least time between two checks (rank 0's loop turns every few ms)


def pace(job: JobRecord, cores_now: int) -> float | None:
    """The slowest of ``job``'s last :data:`PACE_WINDOW` iterations, times how many more
    cores it had then than ``cores_now`` (an iteration on fewer cores takes longer); None if
    it has not iterated."""
    recent = list(zip(job.iter_seconds[-PACE_WINDOW:], job.cores[-PACE_WINDOW:], strict=False))
    if not recent:
        return None
    return max(seconds * max(1.0, cores / max(1, cores_now)) for seconds, cores in recent)


class Liveness:
    """When each training job was last heard of, and which have been silent too long."""

    def __init__(self, epoch_seconds: float, epochs: int = SILENT_EPOCHS,
                 margin: float = SILENT_MARGIN, start: float = START_SECONDS) -> None:
        self.epoch_seconds = epoch_seconds
        self.epochs = epochs
        self.margin = margin
        self.start = start
        self._since: dict[str, float] = {}  # job -> when it was assigned or last reported
        self._heard: set[str] = set()  # jobs that reported since their assignment
        self._ranks: dict[str, tuple[int, ...]] = {}  # the ranks each job was seen assigned
        self._next_check = -float("inf")

    def heard(self, job: str, now: float) -> None:
        """``job``'s leader sent a report (or any message) at ``now``."""
        if job in self._since:
            self._since[job] = now
            self._heard.add(job)

    def bound(self, job: str, job_pace: float | None) -> float | None:
        """Seconds ``job`` may stay silent (None: no bound, its pace is unknown)."""
        if job_pace is None:
            return None
        extra = 0.0 if job in self._heard else self.start
        return self.epochs * max(self.epoch_seconds, job_pace) + self.margin + extra

    def silent(self, now: float, running: Mapping[str, Sequence[int]],
               paces: Mapping[str, float | None]) -> list[str]:
        """The jobs of ``running`` (job -> the ranks it was assigned) silent at ``now``, by
        name. A job newly in ``running``, or on other ranks than before, starts its clock
        now; a job no longer in it is forgotten. ``paces``: each job's :func:`pace` (a job
        missing there has none)."""
        for job in list(self._since):
            if job not in running:
                del self._since[job], self._ranks[job]
                self._heard.discard(job)
        out = []
        for job, ranks in running.items():
            if self._ranks.get(job) != tuple(ranks):
                self._since[job], self._ranks[job] = now, tuple(ranks)
                self._heard.discard(job)
                continue
            limit = self.bound(job, paces.get(job))
            if limit is not None and now - self._since[job] > limit:
                out.append(job)
        return sorted(out)

    def check(self, now: float, running: Mapping[str, Sequence[int]],
              jobs: Mapping[str, JobRecord], hosts: Mapping[int, str] | None = None) -> None:
        """:meth:`silent` with each job's pace from its record in ``jobs``, at most once every
        :data:`CHECK_SECONDS` (a call sooner does nothing).

        Raises:
            RanksLost: naming each silent job, how long it has been silent, its ranks and
                (``hosts``: rank -> node) their nodes.
        """
        if now < self._next_check:
            return
        self._next_check = now + CHECK_SECONDS
        paces = {job: pace(jobs[job], len(ranks)) for job, ranks in running.items() if job in jobs}
        silent = self.silent(now, running, paces)
        if not silent:
            return
        said = []
        for job in silent:
            ranks = running[job]
            where = f" on {', '.join(sorted({hosts[r] for r in ranks if r in hosts}))}" if hosts else ""
            said.append(f"{job} (ranks {', '.join(map(str, ranks))}{where}: nothing for "
                        f"{now - self._since[job]:.1f} s, bound {self.bound(job, paces.get(job)):.1f} s)")
        raise RanksLost(f"{len(silent)} job(s) stopped reporting: {'; '.join(said)}")
