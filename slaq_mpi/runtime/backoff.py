"""Waiting without spinning: test a condition, sleeping a little longer between tests.

Every wait of the runtime for another process (an MPI request, a message, the experiment's
clock, the launcher's child) goes through :meth:`Backoff.wait`. No MPI here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """How to wait: ``spins`` tests in a row, then a sleep between tests that starts at
    ``first`` seconds and grows by ``growth`` up to ``longest``."""

    first: float
    longest: float
    growth: float = 1.5
    spins: int = 0

    def wait(self, test: Callable[[], bool], deadline: float | None = None,
             between: Callable[[], object] | None = None) -> bool:
        """Call ``test`` until it returns True (then True), or until ``deadline``
        (``time.monotonic()``) passes (then False; no sleep lasts past it). ``between`` is
        called before each sleep; it may raise to give up waiting."""
        for _ in range(self.spins):
            if test():
                return True
        delay = self.first
        while not test():
            left = math.inf if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            if between is not None:
                between()
            time.sleep(min(delay, left))
            delay = min(delay * self.growth, self.longest)
        return True
