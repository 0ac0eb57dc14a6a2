"""When rank 0 decides: the timing rules the live coordinator, the simulator and the
evaluation share. Pure functions of times in seconds; no MPI.

Rank 0 decides on its own clock while the jobs train:

* a regular decision ``epoch_seconds`` after the previous decision (of any kind);
* at once when a job arrives (its arrival time is reached);
* at once when a job ends (done or failed): its cores are free at that moment.

:func:`next_decision` gives the next decision from the first two rules; the third needs no
function (a job's end is the decision time). The names below :func:`next_decision`
(``epoch_length``, ``arrival_wait``, ``cut_time``) belong to the lock-step epochs of the old
runtime and go with it.
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


MIN_EPOCH_SHARE = 0.25  # an epoch shortened for an arrival or a completion lasts at least this share of one
# A re-decision pauses every core for a small share of an epoch (benchmarks/realloc.py measures
# it): cutting an epoch must save more idle core-seconds than this share of the epoch's.
CUT_COST_SHARE = 1 / 32


def epoch_length(now: float, next_arrival: float | None, epoch_seconds: float) -> float:
    """How long the epoch starting at ``now`` lasts.

    The configured ``epoch_seconds``, shortened to end when the next job arrives (arrival
    times are known from the experiment), but never below ``MIN_EPOCH_SHARE`` of it: a new job
    then waits for its first decision at most a quarter epoch, not up to a whole one.
    """
    if next_arrival is None:
        return epoch_seconds
    gap = next_arrival - now
    if gap >= epoch_seconds:
        return epoch_seconds
    return max(gap, MIN_EPOCH_SHARE * epoch_seconds)


def arrival_wait(now: float, due: float | None, epoch_seconds: float) -> float:
    """Seconds the live coordinator waits at ``now`` for ``due``, the arrival the epoch that
    just ended was cut short for (:func:`epoch_length`): up to ``CUT_COST_SHARE`` of an epoch
    (what a decision costs anyway), else 0 (the epoch ended early for another reason).

    Workers end an epoch just before its deadline (an overrun would keep every other job
    waiting), so that epoch ends a few ms before the arrival; deciding then would leave the
    new job out for another quarter epoch. The simulator's epoch ends at the arrival itself.
    """
    if due is None or due <= now:
        return 0.0
    gap = due - now
    return gap if gap <= CUT_COST_SHARE * epoch_seconds else 0.0


def cut_time(start: float, length: float, finished: float, epoch_seconds: float,
             freed: int, capacity: int) -> float | None:
    """When to end early the epoch ``[start, start + length)`` in which jobs holding ``freed``
    of the ``capacity`` cores finished (or failed), the last at ``finished``, so that their
    cores go to other jobs at once; None: do not cut.

    The epoch is cut at ``finished``, but not before it has lasted ``MIN_EPOCH_SHARE`` of
    ``epoch_seconds`` (a decision needs some new losses), and only if at least that much of it
    is left and the freed cores would idle for at least ``CUT_COST_SHARE`` of the epoch's
    core-seconds: a cut costs a decision and a checkpoint of every job, a pause of every core.
    """
    floor = MIN_EPOCH_SHARE * epoch_seconds
    at = max(finished, start + floor)
    left = start + length - at
    if left < floor or freed * left < CUT_COST_SHARE * capacity * epoch_seconds:
        return None
    return at
