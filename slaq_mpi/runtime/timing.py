"""When rank 0 decides: the timing rules the live coordinator, the simulator and the
evaluation share. Pure functions of times in seconds; no MPI.

Rank 0 decides on its own clock while the jobs train:

* a regular decision ``epoch_seconds`` after the previous decision (of any kind);
* at once when a job arrives (its arrival time is reached);
* at once when a job ends (done or failed): its cores are free at that moment.

:func:`next_decision` gives the next decision from the first two rules; the third needs no
function (a job's end is the decision time).
"""

from __future__ import annotations


def next_decision(last: float, next_arrival: float | None, epoch_seconds: float) -> float:
    """When rank 0 decides next, unless a job ends first (that end is then the decision).

    ``last`` is the previous decision, ``next_arrival`` the earliest arrival not yet admitted
    (None: none is due). The decision is ``epoch_seconds`` after ``last``, or at the arrival
    if that comes sooner, never before ``last`` (an arrival already due is decided at once).
    """
    due = last + epoch_seconds
    if next_arrival is not None and next_arrival < due:
        return max(next_arrival, last)
    return due

