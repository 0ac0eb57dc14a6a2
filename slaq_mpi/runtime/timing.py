"""When rank 0 decides: the timing rules the live coordinator, the simulator and the
evaluation share. Pure functions of times in seconds; no MPI.

Rank 0 decides on its own clock while the jobs train:

* a regular decision ``epoch_seconds`` after the previous decision (of any kind);
* at once when a job arrives (its arrival time is reached);
* at once when a job ends (done or failed): its cores are free at that moment.

:func:`next_decision` gives the next decision from the first two rules; the third needs no
function (a job's end is the decision time).

A decision takes rank 0 some time (tens of ms at thousands of jobs), and the arrivals and ends
of that time wait for the next one. A simulator, whose decisions take no simulated time, spaces
them by ``min_gap`` instead (:data:`SIMULATED_GAP_SHARE` of an epoch), so that a burst of
arrivals or ends is decided together as it would be live.
"""

from __future__ import annotations

#: The least time between two simulated decisions, as a share of ``epoch_seconds``: a stand-in
#: for the time a decision takes rank 0.
SIMULATED_GAP_SHARE = 1 / 32


def next_decision(last: float, next_arrival: float | None, epoch_seconds: float,
                  min_gap: float = 0.0) -> float:
    """When rank 0 decides next, unless a job ends first (that end is then the decision).

    ``last`` is the previous decision, ``next_arrival`` the earliest arrival not yet admitted
    (None: none is due). The decision is ``epoch_seconds`` after ``last``, or at the arrival
    if that comes sooner, never before ``last + min_gap`` (an arrival already due is decided
    at once, or ``min_gap`` after ``last``).
    """
    due = last + epoch_seconds
    if next_arrival is not None and next_arrival < due:
        return max(next_arrival, last + min(min_gap, epoch_seconds))
    return due

