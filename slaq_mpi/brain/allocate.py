"""Cores by marginal gain: SLAQ's greedy, and the water-fill that spreads what it leaves.

A policy states its objective as a gain function ``gain(rows, cores)``: the value of giving
each job of ``rows`` each candidate core count. :func:`allocate_by_gain` starts every job on
one core and gives each further core to the largest marginal gain. Marginals are made
non-increasing (gains concave) before choosing, so the greedy's choice is the ``K`` largest
marginals overall, ties broken by job, then by core count. That selection is computed exactly
and lazily: a job's marginals are evaluated in chunks, and its next chunk only when every
marginal computed so far was chosen.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite

__all__ = ["GainFn", "allocate_by_gain", "allocate_by_rows", "greedy_allocate", "positive_marginals",
           "top_up", "water_fill"]

MIN_CHUNK_CELLS = 4096  # gains per call of the gain function below which its fixed cost dominates

GainFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``gain(rows, cores) -> gains``: rows ``(R,)`` job indices, cores ``(R, K)``, gains ``(R, K)``."""


def water_fill(alloc: np.ndarray, limits: np.ndarray, extra: int) -> np.ndarray:
    """Add up to ``extra`` cores, raising the smallest allocations first, never above ``limits``.

    Ties (equal allocations at the last level) go to lower indices. Returns a new array.
    """
    alloc = np.asarray(alloc, dtype=np.int64).copy()
    limits = np.maximum(np.asarray(limits, dtype=np.int64), alloc)
    room = int((limits - alloc).sum())
    if extra <= 0 or room <= 0:
        return alloc
    if extra >= room:
        return limits.copy()
    lo, hi = int(alloc.min()), int(limits.max())
    while lo < hi:  # the highest level whose fill fits in extra
        mid = (lo + hi + 1) // 2
        if int((np.clip(mid, alloc, limits) - alloc).sum()) <= extra:
            lo = mid
        else:
            hi = mid - 1
    filled = np.clip(lo, alloc, limits)
    left = extra - int((filled - alloc).sum())
    if left > 0:
        can = np.flatnonzero(filled < limits)  # all at level lo: one more each, by index
        filled[can[:left]] += 1
    return filled


def allocate_by_gain(
    gain: GainFn,
    caps: np.ndarray,
    capacity: int,
    spread_caps: np.ndarray | None = None,
    min_gain: float = 1e-12,
) -> np.ndarray:
    """SLAQ's greedy for jobs that all start with one core (needs ``capacity >= len(caps)``).

    Repeatedly gives one core to the job of largest marginal gain ``gain(j, a) - gain(j, a-1)``
    (marginals are made non-increasing, i.e. gains concave, before choosing; ties go to the
    lower index) while that gain exceeds ``min_gain`` and cores remain; then spreads leftover
    cores evenly up to ``spread_caps`` (default ``caps``): work-conserving.
    """
    return _one_each_then(lambda caps, extra: _chosen_marginals(gain, caps, extra, min_gain),
                          caps, capacity, spread_caps)


def _one_each_then(choose: Callable[[np.ndarray, int], np.ndarray], caps: np.ndarray,
                   capacity: int, spread_caps: np.ndarray | None) -> np.ndarray:
    """One core per job, then ``choose(caps, extra)`` more per job for the ``extra`` cores
    left, then the cores still left spread evenly up to ``spread_caps`` (default ``caps``)."""
    caps = np.maximum(np.asarray(caps, dtype=np.int64), 1)
    jobs = caps.shape[0]
    if capacity < jobs:
        raise ValueError(f"capacity {capacity} < jobs {jobs}: choose the admitted jobs first")
    alloc = np.ones(jobs, dtype=np.int64)
    extra = capacity - jobs
    if jobs == 0 or extra == 0:
        return alloc
    chosen = choose(caps, extra)
    alloc += chosen
    left = extra - int(chosen.sum())
    if left > 0:
        limits = caps if spread_caps is None else np.minimum(np.maximum(spread_caps, 1), caps)
        alloc = water_fill(alloc, limits, left)
    return alloc


def positive_marginals(gains: np.ndarray, min_gain: float = 1e-12) -> np.ndarray:
    """The marginal gains of cores ``2 .. len(gains)`` of one job whose gains on ``1 ..
    len(gains)`` cores are ``gains`` (non-finite counted as 0), made non-increasing (gains
    concave), up to the last one above ``min_gain``: the ones the greedy may choose."""
    g = zero_nonfinite(np.asarray(gains, dtype=np.float64))
    marg = np.minimum.accumulate(np.diff(g)) if g.size > 1 else np.zeros(0)
    return marg[: int(np.count_nonzero(marg > min_gain))]


def allocate_by_rows(marginals: list[np.ndarray], caps: np.ndarray, capacity: int,
                     spread_caps: np.ndarray | None = None, min_gain: float = 1e-12) -> np.ndarray:
    """:func:`allocate_by_gain` on each job's marginal gains computed beforehand
    (:func:`positive_marginals`: job ``j``'s marginal of core ``a`` is ``marginals[j][a - 2]``;
    every marginal it leaves out is at most ``min_gain``). Same allocation, ties alike."""
    def choose(caps: np.ndarray, extra: int) -> np.ndarray:
        jobs = caps.shape[0]
        rows = [m[: max(int(c) - 1, 0)] for m, c in zip(marginals, caps.tolist(), strict=True)]
        sizes = np.fromiter(map(len, rows), dtype=np.int64, count=jobs)
        if int(sizes.sum()) <= extra:
            return sizes
        return _count_largest(rows, extra, min_gain)

    return _one_each_then(choose, caps, capacity, spread_caps)


def _count_largest(rows: list[np.ndarray], k: int, min_gain: float) -> np.ndarray:
    """Per row, how many of the ``k`` largest values above ``min_gain`` of all the ``rows`` are
    its; ties by row, then by position in the row: what :func:`_largest` chooses among the
    rows laid end to end, counted without the index arrays it needs."""
    vals = np.concatenate(rows)
    v = vals[vals > min_gain]
    if v.size <= k:
        return np.array([np.count_nonzero(r > min_gain) for r in rows], dtype=np.int64)
    thr = np.partition(v, v.size - k)[v.size - k]
    counts = np.array([np.count_nonzero(r > thr) for r in rows], dtype=np.int64)
    left = k - int(counts.sum())  # the values equal to the k-th largest: the first rows' first
    for j, r in enumerate(rows):
        if left <= 0:
            break
        take = min(int(np.count_nonzero(r == thr)), left)
        counts[j] += take
        left -= take
    return counts


def _chosen_marginals(gain: GainFn, caps: np.ndarray, extra: int, min_gain: float) -> np.ndarray:
    """Per job, how many of the ``extra`` largest marginal gains above ``min_gain`` are its."""
    jobs = caps.shape[0]
    marginals = _Marginals(gain, caps)
    # a call costs about as much as MIN_CHUNK_CELLS evaluations: at least that many per call
    chunk = np.minimum(caps - 1, max(4, -(-2 * extra // jobs), -(-MIN_CHUNK_CELLS // jobs)))
    todo = np.flatnonzero(chunk > 0)
    chosen = np.zeros(jobs, dtype=np.int64)
    while todo.size:
        marginals.extend(todo, chunk)
        chosen = marginals.count_largest(extra, min_gain)
        todo = marginals.exhausted(chosen, min_gain)
        least = max(4, -(-MIN_CHUNK_CELLS // max(todo.size, 1)))
        chunk = np.minimum(caps - 1 - marginals.depth, np.maximum(marginals.depth, least))
    return chosen


class _Marginals:
    """The marginal gains evaluated so far: job ``j``'s for cores ``2 .. depth[j] + 1``."""

    def __init__(self, gain: GainFn, caps: np.ndarray) -> None:
        jobs = caps.shape[0]
        self.gain = gain
        self.caps = caps
        self.last_gain = np.zeros(jobs)  # gain at the deepest core count evaluated
        self.last_marg = np.full(jobs, np.inf)
        self.depth = np.zeros(jobs, dtype=np.int64)
        self.vals: list[np.ndarray] = []
        self.owners: list[np.ndarray] = []
        self.cores: list[np.ndarray] = []

    def extend(self, todo: np.ndarray, chunk: np.ndarray) -> None:
        """Evaluate the next ``chunk[j]`` marginals of every job ``j`` of ``todo``."""
        depth, caps = self.depth, self.caps
        width = int(chunk[todo].max())
        a = depth[todo, None] + 2 + np.arange(width)[None, :]
        valid = a <= np.minimum(caps[todo], depth[todo] + 1 + chunk[todo])[:, None]
        ask = np.minimum(a, caps[todo, None]).astype(np.float64)
        first = not self.vals
        if first:  # the one-core gains come with the first chunk (one call fewer)
            ask = np.concatenate([np.ones((todo.size, 1)), ask], axis=1)
        g = zero_nonfinite(np.asarray(self.gain(todo, ask), dtype=np.float64))
        if first:
            self.last_gain[todo], g = g[:, 0], g[:, 1:]
        marg = np.diff(np.concatenate([self.last_gain[todo, None], g], axis=1), axis=1)
        marg = np.minimum.accumulate(np.concatenate([self.last_marg[todo, None], marg], axis=1),
                                     axis=1)[:, 1:]
        marg = np.where(valid, marg, -np.inf)
        n_new = valid.sum(axis=1)
        self.last_gain[todo] = g[np.arange(todo.size), n_new - 1]
        self.last_marg[todo] = marg[np.arange(todo.size), n_new - 1]
        depth[todo] += n_new
        self.vals.append(marg[valid])
        self.owners.append(np.broadcast_to(todo[:, None], a.shape)[valid])
        self.cores.append(a[valid])

    def count_largest(self, k: int, min_gain: float) -> np.ndarray:
        """Per job, how many of the ``k`` largest marginals above ``min_gain`` are its."""
        v, o, c = (np.concatenate(x) for x in (self.vals, self.owners, self.cores))
        pick = _largest(v, o, c, k, min_gain)
        return np.bincount(o[pick], minlength=self.caps.shape[0])

    def exhausted(self, chosen: np.ndarray, min_gain: float) -> np.ndarray:
        """Jobs all of whose evaluated marginals were chosen and that may still gain more."""
        depth = self.depth
        return np.flatnonzero((chosen == depth) & (depth < self.caps - 1) & (self.last_marg > min_gain))


def _largest(vals: np.ndarray, owners: np.ndarray, cores: np.ndarray, k: int, min_gain: float) -> np.ndarray:
    """Indices of the ``k`` largest ``vals`` above ``min_gain``; ties by (owner, cores)."""
    positive = (vals > min_gain).nonzero()[0]
    if positive.size <= k:
        return positive
    v = vals[positive]
    thr = np.partition(v, v.size - k)[v.size - k]
    above = positive[v > thr]
    at = positive[v == thr]
    at = at[np.lexsort((cores[at], owners[at]))][: k - above.size]
    return np.concatenate([above, at])


def greedy_allocate(gains_table: np.ndarray, caps: np.ndarray | None, capacity: int) -> np.ndarray:
    """SLAQ's greedy on an explicit gain table (for tests and small problems).

    Args:
        gains_table: ``(jobs, A)``; ``gains_table[j, a - 1]`` is job ``j``'s gain on ``a`` cores.
        caps: per-job max cores (default ``A``), clipped to ``[1, A]``.
        capacity: cores available.

    With ``capacity >= jobs`` every job gets one core and the rest go greedily by marginal gain
    (see :func:`allocate_by_gain`); otherwise the ``capacity`` jobs of largest one-core gain
    (ties: lower index) get one core each. Returns cores per job.
    """
    table = np.nan_to_num(np.asarray(gains_table, dtype=np.float64), nan=0.0)
    jobs, width = table.shape
    caps_arr = np.full(jobs, width) if caps is None else np.clip(np.asarray(caps), 1, width)
    if capacity < jobs:
        alloc = np.zeros(jobs, dtype=np.int64)
        order = np.lexsort((np.arange(jobs), -table[:, 0]))
        alloc[order[: max(capacity, 0)]] = 1
        return alloc
    marg = np.diff(table, axis=1)
    harmful = np.minimum.accumulate(marg, axis=1) < -1e-12 if width > 1 else np.zeros((jobs, 1), bool)
    first_bad = np.where(harmful.any(axis=1), harmful.argmax(axis=1) + 1, width)

    def gain(rows: np.ndarray, a: np.ndarray) -> np.ndarray:
        return table[rows[:, None], np.clip(a.astype(np.int64), 1, width) - 1]

    return allocate_by_gain(gain, caps_arr, capacity, spread_caps=np.minimum(first_bad, caps_arr))


def top_up(gain: GainFn, base: np.ndarray, limits: np.ndarray, extra: int,
           spread: np.ndarray | None = None, min_gain: float = 1e-12) -> np.ndarray:
    """Add up to ``extra`` cores to ``base`` by largest marginal ``gain`` (SLAQ's greedy).

    ``gain(rows, cores)`` is evaluated at absolute core counts. Cores no marginal gain wants
    are spread evenly up to ``spread`` (default ``limits``): work-conserving up to the limits.
    """
    base = np.maximum(np.asarray(base, dtype=np.int64), 1)
    limits = np.maximum(np.asarray(limits, dtype=np.int64), base)
    if extra <= 0 or base.size == 0:
        return base.copy()
    shift = base - 1

    def shifted(rows: np.ndarray, cores: np.ndarray) -> np.ndarray:
        return gain(rows, cores + shift[rows, None])

    spread_caps = limits if spread is None else np.clip(spread, base, limits)
    alloc = allocate_by_gain(shifted, limits - shift, base.size + int(extra),
                             spread_caps - shift, min_gain)
    return alloc + shift
