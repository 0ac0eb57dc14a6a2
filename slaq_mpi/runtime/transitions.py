"""How the runtime gets from the ranks each job trains on now to the latest placement, moving
only the jobs whose ranks change. Plain bookkeeping, no MPI: the coordinator sends the
releases and assignments :meth:`Transitions.steps` returns.

A job whose rank set changes is released (its ranks stop at their next check and its leader
checkpoints), then started on its new ranks once every one of them is free. A job that needs
ranks another job still trains on keeps training on its old ranks until they are free, so
only the ranks that wait for a move idle. Jobs waiting on each other's ranks (a cycle) are
released together.
"""

from __future__ import annotations

from collections.abc import Mapping


class Transitions:
    """The ranks each job trains on (``running``), the latest placement (``target``) and the
    jobs asked to stop for a move (``releasing``)."""

    def __init__(self) -> None:
        self.running: dict[str, tuple[int, ...]] = {}
        self.target: dict[str, tuple[int, ...]] = {}
        self.releasing: set[str] = set()

    def retarget(self, target: Mapping[str, tuple[int, ...]]) -> None:
        """A new placement (jobs absent from it hold no ranks)."""
        self.target = dict(target)

    def ended(self, job: str, finished: bool) -> tuple[int, ...]:
        """``job`` stopped on its ranks: released, or ``finished`` (done or failed: it leaves
        the placement too). Returns the ranks now free."""
        self.releasing.discard(job)
        if finished:
            self.target.pop(job, None)
        return self.running.pop(job, ())

    def busy(self) -> set[int]:
        """The ranks some job trains on."""
        return {r for ranks in self.running.values() for r in ranks}

    def steps(self) -> tuple[list[str], list[str]]:
        """What to do now: the jobs to release and the jobs to start on their target ranks
        (their ranks are free). Marks them releasing and running."""
        busy = self.busy()
        moved = [j for j, ranks in self.running.items()
                 if j not in self.releasing and self.target.get(j) != ranks]
        release = [j for j in moved
                   if not (set(self.target.get(j, ())) - set(self.running[j])) & busy]
        if moved and not release and not self.releasing:  # each waits for another's ranks
            release = moved
        self.releasing.update(release)
        start = []
        for job, ranks in sorted(self.target.items()):
            if job not in self.running and not set(ranks) & busy:
                start.append(job)
                self.running[job] = ranks
                busy.update(ranks)
        return sorted(release), start

    @property
    def idle(self) -> bool:
        """Whether no job trains."""
        return not self.running
