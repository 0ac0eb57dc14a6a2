"""SLAQ: give cores to the jobs whose normalized loss would drop the most next epoch.

Per decision (a pure function of the snapshot: a resumed run decides as an uninterrupted one
would):

1. normalize and fit every job's loss history (:mod:`slaq_mpi.brain.predict`; a history unchanged
   since the previous decision keeps its fit, which is the fit from scratch bit for bit);
2. fit every job's seconds per iteration vs. cores (:mod:`slaq_mpi.brain.throughput`);
3. predicted normalized reduction of job ``j`` on ``a`` cores over the epoch ``T``:
   ``f_j(k) - f_j(k + T / t_j(a))`` (iterations capped by the job's remaining budget);
4. greedy: one core per job, then one core at a time to the largest marginal reduction.

The greedy is computed as an exact top-K selection of marginal gains: with concave gains
(marginals made non-increasing) the greedy's choice is the K largest marginals, ties broken by
job id, so each job's gains are only evaluated to the depth it can possibly reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite
from slaq_mpi.brain.predict import (
    DEFAULT_DECAY,
    DEFAULT_WINDOW,
    FAMILY_LINEAR,
    FAMILY_PRIOR,
    FAMILY_SUBLINEAR,
    CurveFit,
    CurveMemo,
    class_codes,
)
from slaq_mpi.brain.throughput import (
    SERIAL_FRACTION,
    ThroughputModel,
    fit_throughput_flat,
    flat_observations,
    population_serial_fraction,
)
from slaq_mpi.policies._params import require
from slaq_mpi.policies.snapshot import ClusterSnapshot

__all__ = ["Forecast", "GainFn", "SlaqPolicy", "allocate_by_gain", "greedy_allocate", "water_fill"]

MAX_WINDOW = 1000  # losses fitted per job at most (the fits cost jobs x window each decision)
MIN_CHUNK_CELLS = 4096  # gains per call of the gain function below which its fixed cost dominates

GainFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``gain(rows, cores) -> gains``: rows ``(R,)`` job indices, cores ``(R, K)``, gains ``(R, K)``."""


# --- the greedy core ----------------------------------------------------------------------


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

    Exact top-K selection with lazy evaluation: each job's marginals are computed in chunks,
    a job's next chunk only when all of its computed marginals were chosen.
    """
    caps = np.maximum(np.asarray(caps, dtype=np.int64), 1)
    jobs = caps.shape[0]
    if capacity < jobs:
        raise ValueError(f"capacity {capacity} < jobs {jobs}: choose the admitted jobs first")
    alloc = np.ones(jobs, dtype=np.int64)
    extra = capacity - jobs
    if jobs == 0 or extra == 0:
        return alloc
    last_gain = np.zeros(jobs)  # gain at the deepest core count evaluated (one core: first call)
    last_marg = np.full(jobs, np.inf)
    depth = np.zeros(jobs, dtype=np.int64)  # marginals computed: cores 2 .. depth + 1
    vals: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    cores: list[np.ndarray] = []
    # a call costs about as much as MIN_CHUNK_CELLS evaluations: at least that many per call
    chunk = np.minimum(caps - 1, max(4, -(-2 * extra // jobs), -(-MIN_CHUNK_CELLS // jobs)))
    todo = np.flatnonzero(chunk > 0)
    chosen = np.zeros(jobs, dtype=np.int64)
    while todo.size:
        width = int(chunk[todo].max())
        a = depth[todo, None] + 2 + np.arange(width)[None, :]
        valid = a <= np.minimum(caps[todo], depth[todo] + 1 + chunk[todo])[:, None]
        ask = np.minimum(a, caps[todo, None]).astype(np.float64)
        first = not vals
        if first:  # the one-core gains come with the first chunk (one call fewer)
            ask = np.concatenate([np.ones((todo.size, 1)), ask], axis=1)
        g = zero_nonfinite(np.asarray(gain(todo, ask), dtype=np.float64))
        if first:
            last_gain[todo], g = g[:, 0], g[:, 1:]
        marg = np.diff(np.concatenate([last_gain[todo, None], g], axis=1), axis=1)
        marg = np.minimum.accumulate(np.concatenate([last_marg[todo, None], marg], axis=1), axis=1)[:, 1:]
        marg = np.where(valid, marg, -np.inf)
        n_new = valid.sum(axis=1)
        last_gain[todo] = g[np.arange(todo.size), n_new - 1]
        last_marg[todo] = marg[np.arange(todo.size), n_new - 1]
        depth[todo] += n_new
        vals.append(marg[valid])
        owners.append(np.broadcast_to(todo[:, None], a.shape)[valid])
        cores.append(a[valid])
        v, o, c = (np.concatenate(x) for x in (vals, owners, cores))
        pick = _top(v, o, c, extra, min_gain)
        chosen = np.bincount(o[pick], minlength=jobs)
        saturated = (chosen == depth) & (depth < caps - 1) & (last_marg > min_gain)
        todo = np.flatnonzero(saturated)
        least = max(4, -(-MIN_CHUNK_CELLS // max(todo.size, 1)))
        chunk = np.minimum(caps - 1 - depth, np.maximum(depth, least))
    alloc += chosen
    left = extra - int(chosen.sum())
    if left > 0:
        limits = caps if spread_caps is None else np.clip(spread_caps, 1, caps)
        alloc = water_fill(alloc, limits, left)
    return alloc


def _top(vals: np.ndarray, owners: np.ndarray, cores: np.ndarray, k: int, min_gain: float) -> np.ndarray:
    """Indices of the ``k`` largest ``vals`` above ``min_gain``; ties by (owner, cores)."""
    positive = np.flatnonzero(vals > min_gain)
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


# --- the forecast ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Forecast:
    """Every active job's predicted normalized loss reduction as a function of cores.

    Row ``i`` is job ``job_ids[i]`` (sorted by job id).

    Attributes:
        job_ids: the jobs, sorted.
        curves: fitted loss curves (:class:`~slaq_mpi.brain.predict.CurveFit`).
        speed: fitted seconds per iteration (:class:`~slaq_mpi.brain.throughput.ThroughputModel`).
        remaining: iterations each job may still run (``inf`` without a budget).
        caps: most cores each job may hold (``min(max_cores, capacity)``, at least 1).
        epoch_seconds: the horizon ``T``.
    """

    job_ids: tuple[str, ...]
    curves: CurveFit
    speed: ThroughputModel
    remaining: np.ndarray
    caps: np.ndarray
    epoch_seconds: float

    def iterations(self, cores: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Iterations each job runs in one epoch on ``cores`` (``(J,)`` or ``(J, K)``)."""
        speed = self.speed if rows is None else self.speed.take(rows)
        rem = self.remaining if rows is None else self.remaining[rows]
        it = speed.iterations(self.epoch_seconds, cores)
        return np.minimum(it, rem[:, None] if it.ndim > 1 else rem)

    def reduction(self, cores: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Predicted normalized loss reduction over the next epoch on ``cores`` per job.

        ``cores`` has shape ``(J,)`` or ``(J, K)`` (K candidate core counts per job), or
        ``(R,)``/``(R, K)`` with ``rows`` selecting R jobs. 0 cores give 0.
        """
        cores = np.asarray(cores, dtype=np.float64)
        curves = self.curves if rows is None else self.curves.take(rows)
        red = curves.reduction(self.iterations(np.maximum(cores, 1.0), rows))
        return np.where(cores >= 1, red, 0.0)

    def useful_cores(self) -> np.ndarray:
        """Per job, the most cores that still speed it up (capped by ``caps``)."""
        return np.minimum(np.floor(self.speed.best_cores() + 1e-9), self.caps).astype(np.int64)


TAIL_HORIZON = 10.0  # iterations: the shortest look-ahead of the estimate of the loss left
TAIL_FACTOR = 2.0  # loss left <= this x the drop over the next max(n, TAIL_HORIZON) iterations


def _spans(histories: list, curves: CurveFit) -> np.ndarray:
    """Per job ``L_0 - L*``: first loss minus the estimated final loss ``L*``.

    ``L*`` is the fit's asymptote, but the loss left (``last - L*``) is at most
    ``TAIL_FACTOR`` times the fit's drop over the next ``max(n, TAIL_HORIZON)`` iterations:
    what a ``1/k`` tail leaves after ``n`` iterations. A 1/k-like fit of a short window puts
    its asymptote far below the true final loss (up to 17x the true ``L_0 - L*`` for boosted
    trees after 50-200 rounds), which made every later reduction of such a job look small.
    """
    first = np.array([h[0] if len(h) else np.nan for h in histories], dtype=np.float64)
    fitted = (curves.family == FAMILY_SUBLINEAR) | (curves.family == FAMILY_LINEAR)
    left = TAIL_FACTOR * curves.drop(np.maximum(curves.n, TAIL_HORIZON))
    low = np.where(fitted, np.maximum(np.minimum(curves.floor, curves.last), curves.last - left),
                   curves.last)
    with np.errstate(invalid="ignore"):
        span = first - low
    span = np.where(np.isfinite(span) & (span > 0), span, 0.0)
    return np.where(curves.family == FAMILY_PRIOR, 1.0, span)


# --- the policy -----------------------------------------------------------------------------


class SlaqPolicy:
    """Quality-driven allocation (SLAQ, SoCC 2017): maximize the predicted total normalized
    loss reduction of the next epoch.

    Args:
        window: most recent losses fitted per job.
        decay: e-folding length (iterations) of the fit's exponentially decaying weights.
        prior_seconds: single-core seconds per iteration assumed for a job with no throughput
            observation when no other job has one either (else the median of the others).
        reserve_fraction: when jobs outnumber cores, this share of the cores (at least one)
            goes to the jobs with the least attained core-seconds, so no job waits forever;
            the rest go to the largest predicted one-core reductions.
        min_gain: marginal normalized reductions at or below this count as none.
        normalize: ``"span"`` (default): reductions in units of each job's own ``L_0 - L*``
            (first loss minus the fitted asymptote), the scale of the normalized loss the
            paper evaluates, with short histories blended with an optimistic prior;
            ``"max_drop"``: SLAQ's units, the largest one-iteration reduction seen so far.
        learn_scaling: the throughput prior (how a job seen on fewer than three core counts
            scales) takes its serial share from the other jobs' fits (their median, once three
            jobs have data at three or more core counts) instead of the fixed
            :data:`~slaq_mpi.brain.throughput.SERIAL_FRACTION`.

    The same snapshot gives the same allocation, whatever the policy decided before: only the
    fits of unchanged histories are kept, and they equal fits from scratch bit for bit.
    """

    name = "slaq"

    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        decay: float = DEFAULT_DECAY,
        prior_seconds: float = 1.0,
        reserve_fraction: float = 0.25,
        min_gain: float = 1e-9,
        normalize: str = "span",
        learn_scaling: bool = True,
    ) -> None:
        require("window", window, 3 <= window <= MAX_WINDOW, f"an integer in [3, {MAX_WINDOW}]")
        require("min_gain", min_gain, min_gain >= 0, "a number >= 0")
        require("decay", decay, decay > 0, "> 0")  # `not nan > 0`: NaN is refused too
        require("prior_seconds", prior_seconds, prior_seconds > 0, "> 0")
        require("reserve_fraction", reserve_fraction, 0 <= reserve_fraction <= 1, "a fraction in [0, 1]")
        require("normalize", normalize, normalize in ("span", "max_drop"), "'span' or 'max_drop'")
        self.window = int(window)
        self.decay = float(decay)
        self.prior_seconds = float(prior_seconds)
        self.reserve_fraction = float(reserve_fraction)
        self.min_gain = float(min_gain)
        self.normalize = normalize
        self.learn_scaling = bool(learn_scaling)
        self._curves = CurveMemo(self.window, self.decay)

    def _fit_speed(self, owner: np.ndarray, cores: np.ndarray, seconds: np.ndarray,
                   count: int) -> tuple[ThroughputModel, float]:
        """Every job's throughput fit, and the serial share of the prior that shaped the jobs
        seen on fewer than ``DATA_DISTINCT`` core counts.

        With ``learn_scaling`` that share is the median of the jobs whose own data decide their
        fit (:func:`~slaq_mpi.brain.throughput.population_serial_fraction`), else the fixed default.
        """
        speed = fit_throughput_flat(owner, cores, seconds, count, self.prior_seconds,
                                    learn_serial=self.learn_scaling)
        serial = population_serial_fraction(speed) if self.learn_scaling else SERIAL_FRACTION
        return speed, serial

    def forecast(self, snapshot: ClusterSnapshot) -> Forecast:
        """Fit every active job of ``snapshot``: the predicted reductions the greedy uses."""
        jobs = sorted(snapshot.jobs, key=lambda j: j.job_id)
        count = len(jobs)
        histories = [j.losses for j in jobs]
        ids = [j.job_id for j in jobs]
        if (self._curves.window, self._curves.decay) != (self.window, self.decay):
            self._curves = CurveMemo(self.window, self.decay)  # changed after the last decision
        curves = self._curves.fit(ids, histories, class_codes([j.convergence for j in jobs]))
        n = curves.n
        if self.normalize == "span":
            curves = replace(curves, span=_spans(histories, curves))

        owner, cores, seconds = flat_observations([j.throughput for j in jobs])
        speed, serial = self._fit_speed(owner, cores, seconds, count)
        seen = speed.observed > 0
        if seen.any() and not seen.all():
            t1 = float(np.median(speed.seconds(np.ones(count))[seen]))
            speed = ThroughputModel(
                alpha=np.where(seen, speed.alpha, (1.0 - serial) * t1),
                beta=np.where(seen, speed.beta, serial * t1),
                gamma=np.where(seen, speed.gamma, 0.0),
                observed=speed.observed,
                distinct=speed.distinct,
            )
        budget = np.array([j.max_iterations for j in jobs], dtype=np.float64)  # None: nan
        budget[np.isnan(budget)] = np.inf
        remaining = np.maximum(budget - n, 0.0)
        max_cores = np.array([j.max_cores for j in jobs], dtype=np.int64)
        caps = np.clip(max_cores, 1, max(1, int(snapshot.capacity)))
        return Forecast(tuple(ids), curves, speed, remaining, caps,
                        float(snapshot.epoch_seconds))

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id for the next epoch (sum <= capacity; each <= its max cores)."""
        if not snapshot.jobs or snapshot.capacity <= 0:
            return {j.job_id: 0 for j in snapshot.jobs}
        fc = self.forecast(snapshot)
        count = len(fc.job_ids)
        capacity = int(snapshot.capacity)
        if capacity < count:
            return self._admit(snapshot, fc, capacity)

        def gain(rows: np.ndarray, cores: np.ndarray) -> np.ndarray:
            # rows are sorted and distinct: all of them is every job in order
            return fc.reduction(cores, None if rows.size == count else rows)

        alloc = allocate_by_gain(gain, fc.caps, capacity, fc.useful_cores(), self.min_gain)
        return dict(zip(fc.job_ids, alloc.tolist(), strict=True))

    def _admit(self, snapshot: ClusterSnapshot, fc: Forecast, capacity: int) -> dict[str, int]:
        """Fewer cores than jobs: one core each for a reserved least-served share, then the
        largest predicted one-core reductions (ties by job id)."""
        by_id = {j.job_id: j for j in snapshot.jobs}
        jobs = [by_id[i] for i in fc.job_ids]
        reserve = min(capacity, max(1, int(capacity * self.reserve_fraction)))
        served = sorted(range(len(jobs)),
                        key=lambda i: (jobs[i].attained_core_seconds, jobs[i].arrival, jobs[i].job_id))
        chosen = set(served[:reserve])
        one = fc.reduction(np.ones(len(jobs)))
        for i in np.lexsort((np.arange(len(jobs)), -one)).tolist():
            if len(chosen) >= capacity:
                break
            chosen.add(i)
        return {jid: int(i in chosen) for i, jid in enumerate(fc.job_ids)}
