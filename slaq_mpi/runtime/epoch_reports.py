"""One epoch's reports as rank 0 receives them, and when to cut the epoch short for the
jobs that finished in it. Plain bookkeeping: the coordinator feeds it the reports its link
hands over. No MPI."""

from __future__ import annotations

import time
from collections.abc import Iterable

from slaq_mpi.runtime.messages import Report
from slaq_mpi.runtime.timing import cut_time


class EpochReports:
    """The reports of the jobs ``running`` in the epoch that began at ``started``
    (``time.monotonic()``) and lasts ``length`` seconds, on ``capacity`` worker ranks.

    When jobs report they finished (or failed) early enough, holding enough cores
    (:func:`~slaq_mpi.runtime.timing.cut_time`), :attr:`cut_at` says when to ask the other
    jobs to end the epoch, so that those cores are given out again at once.
    """

    def __init__(self, running: Iterable[str], started: float, length: float,
                 epoch_seconds: float, capacity: int) -> None:
        self.running = frozenset(running)
        self.reports: dict[str, Report] = {}
        self.cut_at: float | None = None  # when to ask for the cut (time.monotonic())
        self.cut_wall: float | None = None  # when it was asked (time.time()), once it was
        self._started = started
        self._length = length
        self._epoch_seconds = epoch_seconds
        self._capacity = capacity
        self._freed = 0

    @property
    def complete(self) -> bool:
        """Whether every running job has reported."""
        return len(self.reports) >= len(self.running)

    @property
    def missing(self) -> list[str]:
        """The running jobs that have not reported yet, by name."""
        return sorted(self.running - self.reports.keys())

    def add(self, report: Report) -> None:
        """Take ``report``; a job that ended may make a cut worth it."""
        self.reports[report.job] = report
        if report.status == "running" or self.cut_at is not None or self.cut_wall is not None:
            return
        self._freed += report.cores
        end = report.end_times[-1] if report.end_times else time.time()
        finished = time.monotonic() - (time.time() - end)
        self.cut_at = cut_time(self._started, self._length, finished, self._epoch_seconds,
                               self._freed, self._capacity)

    def cut_sent(self) -> None:
        """The cut was asked for now."""
        self.cut_at, self.cut_wall = None, time.time()
