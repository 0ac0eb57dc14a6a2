"""Whether a new allocation is worth the moves it makes.

A job whose core count changes is *moved*: it stops at an iteration boundary, checkpoints and
restarts on its new ranks after a pause of ``move_seconds`` (live, the measured median; in
simulation, the simulator's move cost). A job that has never run (no cores, no losses) starts
without a pause, and a job given no cores makes no progress either way.

:func:`settle_moves` compares a policy's proposal with the allocation the cluster holds now,
made valid (:func:`hold_current`), by the predicted value of each over the next epoch ``T``:
the sum over jobs of ``value(cores, seconds)``, a moved job counting ``T - move_seconds`` of
running. It keeps the proposal only if that is worth more, else the held allocation. Cores
left idle and a newly arrived job with no cores are gains the proposal makes: the held
allocation gives free cores out only toward the proposal, so its value has none of them.

The gain is judged over one epoch; the move is paid once. A proposal that stays better for
several decisions is taken once its one-epoch gain exceeds the pause, so the comparison leans
toward staying, which is the point: no churn of ranks for forecasts that shift a little.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite

__all__ = ["ValueFn", "allocation_value", "hold_current", "moved_jobs", "settle_moves"]

ValueFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``value(cores, seconds) -> gains``: per job, shapes ``(J,)``, the predicted gain (a policy's
own units, e.g. normalized loss reduction) of running ``seconds`` on ``cores`` (0 for 0 cores)."""

RELATIVE_TIE = 1e-12  # a proposal must beat the held allocation by more than this share


def moved_jobs(current: np.ndarray, alloc: np.ndarray, started: np.ndarray) -> np.ndarray:
    """Jobs that pay a move going from ``current`` to ``alloc`` cores: a changed, nonzero count
    of a job that holds cores or has run before (``started``); a new job starts, a job sent to
    0 cores stops, and neither pauses."""
    current = np.asarray(current)
    alloc = np.asarray(alloc)
    return (alloc != current) & (alloc > 0) & ((current > 0) | np.asarray(started, dtype=bool))


def allocation_value(alloc: np.ndarray, current: np.ndarray, started: np.ndarray,
                     epoch_seconds: float, move_seconds: float, value: ValueFn) -> float:
    """The predicted gain of ``alloc`` over the next epoch: each job's ``value`` over
    ``epoch_seconds``, less ``move_seconds`` for the jobs it moves (:func:`moved_jobs`)."""
    alloc = np.asarray(alloc, dtype=np.int64)
    moved = moved_jobs(current, alloc, started)
    seconds = np.where(moved, max(epoch_seconds - move_seconds, 0.0), epoch_seconds)
    gains = np.asarray(value(alloc, seconds), dtype=np.float64)
    return float(np.where(alloc > 0, zero_nonfinite(gains), 0.0).sum())


def hold_current(current: np.ndarray, proposed: np.ndarray, caps: np.ndarray,
                 capacity: int) -> np.ndarray | None:
    """The allocation held now, made valid for this decision, moving as few jobs as it can.

    ``current`` is what each active job holds (a job that ended is no longer a row; a new one
    holds 0), capped by ``caps``. Every job the proposal runs and that holds no core gets one,
    from the free cores, else from the job the proposal shrinks most (of those holding two or
    more). Free cores then go toward the proposal: first to jobs that held none, then to the
    jobs it grows most (ties by row). None if the held cores exceed ``capacity``.
    """
    held = np.minimum(np.maximum(np.asarray(current, dtype=np.int64), 0),
                      np.maximum(np.asarray(caps, dtype=np.int64), 0))
    proposed = np.asarray(proposed, dtype=np.int64)
    free = int(capacity) - int(held.sum())
    if free < 0:
        return None
    waiting = ((held == 0) & (proposed > 0)).nonzero()[0]
    for row in waiting.tolist():
        if free == 0:
            donors = (held >= 2).nonzero()[0]
            if donors.size == 0:
                break
            shrink = held[donors] - proposed[donors]
            donor = int(donors[np.lexsort((donors, -held[donors], -shrink))[0]])
            held[donor] -= 1
            free += 1
        held[row] = 1
        free -= 1
    want = np.maximum(proposed - held, 0)
    new = np.zeros(len(held), dtype=bool)
    new[waiting] = True
    for row in np.lexsort((np.arange(len(held)), -want, ~new)).tolist():
        if free <= 0 or want[row] <= 0:
            break
        give = min(int(want[row]), free)
        held[row] += give
        free -= give
    return held


def settle_moves(current: np.ndarray, proposed: np.ndarray, caps: np.ndarray, capacity: int,
                 started: np.ndarray, epoch_seconds: float, move_seconds: float,
                 value: ValueFn) -> np.ndarray:
    """The proposal if its predicted gain over the next epoch, net of the moves it makes, beats
    the held allocation's (:func:`hold_current`, net of its own moves); else the held one.

    Args:
        current: cores each active job holds now (0: waiting or new).
        proposed: the policy's allocation, same rows.
        caps: the most cores each job may hold.
        capacity: cores of the cluster.
        started: jobs that have run (a moved one pauses; a new one starts without pause).
        epoch_seconds: the horizon ``T`` both are judged over.
        move_seconds: what a moved job loses of ``T``.
        value: the policy's predicted gain of ``cores`` over ``seconds``, per job.
    """
    proposed = np.asarray(proposed, dtype=np.int64)
    current = np.asarray(current, dtype=np.int64)
    held = hold_current(current, proposed, caps, capacity)
    if held is None or np.array_equal(held, proposed):
        return proposed
    gain_proposed = allocation_value(proposed, current, started, epoch_seconds, move_seconds, value)
    gain_held = allocation_value(held, current, started, epoch_seconds, move_seconds, value)
    if gain_proposed > gain_held + RELATIVE_TIE * max(abs(gain_held), abs(gain_proposed)):
        return proposed
    return held
