"""How the runtime gets from the ranks each job trains on now to the latest placement, moving
only the jobs whose ranks change. Plain bookkeeping, no MPI: the coordinator sends the
releases and assignments :meth:`Transitions.steps` returns.

A job whose rank set changes is released (its ranks stop at their next check and its leader
checkpoints), then started on its new ranks once every one of them is free. A job that needs
ranks another job still trains on keeps training on its old ranks until they are free, so
only the ranks that wait for a move idle; but if every job it takes ranks from is stopping
and quick to stop (``quick``: its iterations are short), it stops with them, so their ranks
do not wait for it to stop after them. Jobs waiting on each other's ranks (a cycle) are
released together.

A released job's state stays in the memory of the leader that released it (its holder) until
that rank is given work again: a restart on ranks that include the holder takes the state
from it; any other restart waits until the holder says the job's checkpoint is on disk
(:meth:`Transitions.saved`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


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

    def steps(self, quick: Collection[str] = ()) -> tuple[list[str], list[str]]:
        """What to do now: the jobs to release and the jobs to start on their target ranks
        (their ranks are free). Marks them releasing and running. ``quick``: jobs that stop
        within a short time of being asked (their iterations are short)."""
        busy = self.busy()
        moved = [j for j, ranks in self.running.items()
                 if j not in self.releasing and self.target.get(j) != ranks]
        release = [j for j in moved
                   if not (set(self.target.get(j, ())) - set(self.running[j])) & busy]
        if moved and not release and not self.releasing:  # each waits for another's ranks
            release = moved
        owner = {r: j for j, ranks in self.running.items() for r in ranks}
        stopping, quick = set(release) | self.releasing, set(quick)
        grew = True
        while grew:  # a job growing into the ranks of quick jobs that stop now stops with them
            grew = False
            for job in moved:
                gained = (set(self.target.get(job, ())) - set(self.running[job])) & busy
                donors = {owner[r] for r in gained}
                if job not in stopping and donors and donors <= stopping & quick:
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

    @property
    def idle(self) -> bool:
        """Whether no job trains."""
        return not self.running
