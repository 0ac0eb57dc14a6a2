"""How the runtime gets from the ranks each job trains on now to the latest placement, moving
only the jobs whose ranks change. Plain bookkeeping, no MPI: the coordinator sends the
releases and assignments :meth:`Transitions.steps` returns.

A job whose rank set changes is released (its ranks stop at their next check and its leader
checkpoints), then started on its new ranks once every one of them is free. A job that needs
ranks another job still trains on keeps training on its old ranks until they are free, so
only the ranks that wait for a move idle. A job stops at an iteration boundary, so how long
it takes to stop grows with its iteration time (its ``pace``). A growing job whose ranks come
only from jobs that stop now stops with them, rather than after them, when they stop quickly
(iterations of at most :data:`QUICK_STOP_SECONDS`) or when that idles fewer rank-seconds
(:func:`_sooner`): their ranks then do not wait for it to stop after them. A slow job
growing into the ranks of quicker jobs that free them for it alone stops first instead, when
that idles fewer rank-seconds (:func:`_first`): they train on until it has stopped, and its
own ranks wait only for them to stop. Jobs waiting on each other's ranks (a cycle) are
released together.

A released job's state stays in the memory of the leader that released it (its holder) until
that rank is given work again: a restart on ranks that include the holder takes the state
from it; any other restart waits until the holder says the job's checkpoint is on disk
(:meth:`Transitions.saved`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

QUICK_STOP_SECONDS = 0.1  # a job whose latest iteration took at most this stops soon when asked


class Transitions:
    """The ranks each job trains on (``running``), the latest placement (``target``) and the
    jobs asked to stop for a move (``releasing``)."""

    def __init__(self) -> None:
        self.running: dict[str, tuple[int, ...]] = {}
        self.target: dict[str, tuple[int, ...]] = {}
        self.releasing: set[str] = set()
        self.holders: dict[str, int] = {}  # released job -> the rank holding its state
        self.unsaved: set[str] = set()  # released jobs whose checkpoint is not yet on disk

    def retarget(self, target: Mapping[str, tuple[int, ...]]) -> None:
        """A new placement (jobs absent from it hold no ranks)."""
        self.target = dict(target)

    def ended(self, job: str, finished: bool) -> tuple[int, ...]:
        """``job`` stopped on its ranks: released, or ``finished`` (done or failed: it leaves
        the placement too). Returns the ranks now free."""
        self.releasing.discard(job)
        ranks = self.running.pop(job, ())
        if finished:
            self.target.pop(job, None)
            self.holders.pop(job, None)
        elif ranks:
            self.holders[job] = min(ranks)
            self.unsaved.add(job)
        return ranks

    def saved(self, job: str) -> None:
        """The checkpoint of the released ``job`` is on disk: it may restart on any ranks."""
        self.unsaved.discard(job)

    def source(self, job: str) -> int:
        """The rank from whose memory ``job`` (started by :meth:`steps`) takes its state, or -1:
        from its checkpoint."""
        holder = self.holders.get(job, -1)
        return holder if holder in self.running.get(job, ()) else -1

    def busy(self) -> set[int]:
        """The ranks some job trains on."""
        return {r for ranks in self.running.values() for r in ranks}

    def steps(self, pace: Mapping[str, float] | None = None) -> tuple[list[str], list[str]]:
        """What to do now: the jobs to release and the jobs to start on their target ranks
        (their ranks are free). Marks them releasing and running. ``pace``: the seconds of the
        latest iteration of the running jobs (a job absent from it counts as slow); None: not
        known, so a growing job waits for its ranks to be free."""
        busy = self.busy()
        moved = [j for j, ranks in self.running.items()
                 if j not in self.releasing and self.target.get(j) != ranks]
        release = [j for j in moved
                   if not (set(self.target.get(j, ())) - set(self.running[j])) & busy]
        if moved and not release and not self.releasing:  # each waits for another's ranks
            release = moved
        owner = {r: j for j, ranks in self.running.items() for r in ranks}

        def seconds(job: str) -> float:
            return math.inf if pace is None else pace.get(job, math.inf)

        held_back = self._growers_first(busy, owner, seconds)
        release = [j for j in release if j not in held_back]
        release += [g for g in held_back.values() if g not in self.releasing and g not in release]
        stopping = set(release) | self.releasing

        grew = pace is not None
        while grew:  # a growing job whose donors all stop now may stop with them
            grew = False
            for job in moved:
                gained = (set(self.target.get(job, ())) - set(self.running[job])) & busy
                donors = {owner[r] for r in gained}
                if job in stopping or not donors or not donors <= stopping:
                    continue
                slowest = max(seconds(d) for d in donors)
                if slowest <= QUICK_STOP_SECONDS or _sooner(seconds(job), slowest, len(gained),
                                                             len(self.running[job])):
                    release.append(job)
                    stopping.add(job)
                    grew = True
        self.releasing.update(release)
        start = []
        for job, ranks in sorted(self.target.items()):
            if job in self.running or set(ranks) & busy:
                continue
            if job in self.unsaved and self.holders.get(job) not in ranks:
                continue  # its checkpoint is not on disk yet
            start.append(job)
            self.running[job] = ranks
            busy.update(ranks)
        for job in start:  # a holder given work drops the state it kept
            for other, holder in list(self.holders.items()):
                if holder in self.running[job] and (other != job or self.source(job) == -1):
                    del self.holders[other]
        return sorted(release), start

    def _growers_first(self, busy: set[int], owner: Mapping[int, str],
                       seconds: Callable[[str], float]) -> dict[str, str]:
        """Donors to keep training until the job growing into their ranks has stopped:
        ``donor -> grower``. A grower qualifies when its own ranks waiting for its donors to
        stop after it idles fewer rank-seconds than its gained ranks waiting for it
        (:func:`_first`), and its donors only shrink, freeing ranks for it alone."""
        held_back: dict[str, str] = {}
        for job, ranks in self.running.items():
            goal = set(self.target.get(job, ()))
            gained = (goal - set(ranks)) & busy
            donors = {owner[r] for r in gained}
            if not donors or donors & self.releasing:
                continue
            elsewhere = {r for other, rs in self.target.items() if other != job for r in rs}
            if any(not set(self.target.get(d, ())) <= set(self.running[d])
                   or (set(self.running[d]) - set(self.target.get(d, ()))) & elsewhere
                   for d in donors):
                continue
            if _first(seconds(job), max(seconds(d) for d in donors), len(gained), len(ranks)):
                held_back.update(dict.fromkeys(donors, job))
        return held_back

    @property
    def idle(self) -> bool:
        """Whether no job trains."""
        return not self.running


def _sooner(job_pace: float, donor_pace: float, gained: int, held: int) -> bool:
    """Whether a growing job should stop with its donors rather than once they are free,
    counting the rank-seconds idled with stop times proportional to the iteration times: with
    them, its ``held`` ranks wait for the donors if it stops first, or its ``gained`` ranks
    wait for it; after them, its ``gained`` ranks wait for it to stop."""
    if math.isinf(job_pace):
        return True  # no quicker than any donor
    if math.isinf(donor_pace):
        return False
    together = max(donor_pace - job_pace, 0.0) * held + max(job_pace - donor_pace, 0.0) * gained
    return together < job_pace * gained


def _first(job_pace: float, donor_pace: float, gained: int, held: int) -> bool:
    """Whether a growing job should stop before its donors are asked to (they go on training
    until it has stopped): its ``held`` ranks then wait about ``donor_pace`` for them, fewer
    rank-seconds than its ``gained`` ranks waiting for it, after or with them
    (:func:`_sooner`)."""
    if math.isinf(job_pace) or math.isinf(donor_pace):
        return False
    first = donor_pace * held
    together = max(donor_pace - job_pace, 0.0) * held + max(job_pace - donor_pace, 0.0) * gained
    return first < min(together, job_pace * gained)
