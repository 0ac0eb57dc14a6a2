"""What moves cost, as rank 0 sees it: the pause of each moved job, from its last iteration on
its old ranks to its first on its new ones. Kept in the record's allocation history (the
median pause of each decision's moves) and given to the policy as the cost of a move. No MPI."""

from __future__ import annotations

import statistics

from slaq_mpi.storage.metrics import RunRecord

RECENT = 32  # the moves whose median is the cost of the next one


class MovesSeen:
    """The pauses of the moves of a run whose record is ``record``."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.pauses: list[float] = []  # seconds, the most recent last
        self._row: dict[str, int] = {}  # moved job -> the decision that moved it
        self._left: dict[str, tuple[float, int]] = {}  # job -> (its last iteration's end, row)
        self._by_row: dict[int, list[float]] = {}

    def decided(self, row: int, moved: set[str]) -> None:
        """Decision ``row`` of the record moves the running jobs ``moved``."""
        for job in moved:
            self._row[job] = row

    def released(self, job: str, last_end: float | None, restarts: bool) -> None:
        """``job`` stopped on its old ranks, its last iteration ending at ``last_end``
        (experiment seconds); ``restarts``: it has new ranks to go to."""
        row = self._row.pop(job, None)
        if restarts and last_end is not None and row is not None:
            self._left[job] = (last_end, row)
        else:
            self._left.pop(job, None)

    def reported(self, job: str, first_start: float | None) -> None:
        """``job`` reported iterations, the first starting at ``first_start``."""
        if first_start is None or job not in self._left:
            return
        last_end, row = self._left.pop(job)
        pause = max(0.0, first_start - last_end)
        self.pauses[:] = [*self.pauses[-(RECENT - 1):], pause]
        here = self._by_row.setdefault(row, [])
        here.append(pause)
        if row < len(self.record.pause_ms):
            self.record.pause_ms[row] = statistics.median(here) * 1000.0

    def cost(self, default: float) -> float:
        """The median pause of the recent moves in seconds (``default`` before any)."""
        return statistics.median(self.pauses) if self.pauses else default
