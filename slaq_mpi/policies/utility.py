"""``utility``: online primal-dual scheduling for utility of completion time (after Bao, Peng,
Wu and Li, INFOCOM 2018), plus the ``utility:`` job schema it reads.

The schema (a job's YAML ``utility:`` mapping; times in seconds after the job's arrival)::

    utility: {value: 10, deadline: 120, decay: 60}

* ``value`` (required, number >= 0): what finishing the job is worth;
* ``deadline`` (optional, number >= 0): the full value is earned if the job completes within
  this many seconds of its arrival; without it, any completion earns the full value;
* ``decay`` (optional, number >= 0, default 0; needs ``deadline``): after the deadline the
  value falls linearly to 0 over this many seconds (0: a hard deadline, nothing after it).

Utility of a job completing ``c`` seconds after arrival: ``value`` if ``c <= deadline``;
``value * (1 - (c - deadline) / decay)`` (at least 0) if ``decay > 0``; else 0.

Bao et al. price each resource by its load with an exponential dual price, and admit an
arriving job (choosing its workers per slot) only if its utility exceeds the cost of the
resources it would use at those prices. Our adaptation, re-planned every epoch from the
brain's predictions:

* a job's plan is "keep ``a`` cores until done": predicted completion ``elapsed + R t(a)``
  (``R`` remaining iterations to the stopping rule, ``t`` the fitted seconds per iteration),
  utility ``V(a)`` from the schema, resources ``a R t(a)`` core-seconds;
* the price of a core-second at cluster load ``u`` (the share of cores already given out this
  epoch) is ``p(u) = (L/2) (2U/L)^u`` where ``U`` and ``L`` are the largest and smallest value
  densities (best utility per core-second) of the jobs that still have value: at an empty
  cluster every such job can afford cores, a full one prices everybody out. Taking ``a`` cores
  at load ``u`` costs ``R t(a)`` times the integral of ``capacity * p`` from ``u`` to
  ``u + a / capacity``;
* jobs with value are visited in order of value density (highest first); each takes the
  ``a`` (among whole core counts up to its useful cores, including the fewest that meet its
  deadline) maximizing ``V(a) - cost(a)``, only if that payoff is positive: a job gets cores
  only when its marginal utility exceeds the price;
* jobs whose utility is 0 even on their useful cores get no cores while any job still has
  value (Bao et al. would never admit them); jobs without a ``utility:`` are best-effort;
* cores left over are spread evenly (up to useful cores) over the jobs with value and the
  best-effort jobs; when no job has value, over every job.

Pure function of the snapshot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from slaq_mpi.brain.allocate import water_fill
from slaq_mpi.brain.forecast import build_forecast
from slaq_mpi.brain.outlook import build_outlook, min_cores_within
from slaq_mpi.config.schema import LEFT_OUT, Key, Schema, numbers
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies._params import curve_memo
from slaq_mpi.policies._share import job_cap
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot

__all__ = ["UTILITY_KEYS", "UtilityPolicy", "utility_at", "validate_utility"]

UTILITY_KEYS = ("value", "deadline", "decay")
_SCHEMA = Schema({
    "value": Key(numbers(0.0), required="this key is required: what finishing the job is worth"),
    "deadline": Key(numbers(0.0), nullable=True, default=LEFT_OUT),
    "decay": Key(numbers(0.0), default=0.0),
}, shape="must be a mapping {value: >= 0, deadline: seconds >= 0 (optional), decay: seconds >= 0 "
   "(optional)}")
_GRID = 40  # candidate core counts per job (geometric), besides the deadline-meeting one


def validate_utility(raw: Any, where: str) -> dict[str, float]:
    """Check a job's ``utility:`` mapping; returns ``{value, decay[, deadline]}`` as floats.

    Raises:
        ConfigError: not a mapping, an unknown key, ``value`` missing, a value that is not a
            finite number >= 0, or a nonzero ``decay`` without ``deadline``.
    """
    out = _SCHEMA.parse(raw, where)
    if out["decay"] > 0 and "deadline" not in out:
        raise ConfigError(f"{where}.decay", raw["decay"], "needs a deadline to decay after")
    return out


def utility_at(spec: Mapping[str, float], completion: np.ndarray | float) -> np.ndarray:
    """Utility of completing ``completion`` seconds after arrival (vectorized over times)."""
    c = np.asarray(completion, dtype=np.float64)
    value = float(spec.get("value", 0.0))
    deadline = spec.get("deadline")
    if deadline is None or not math.isfinite(float(deadline)):
        return np.where(np.isfinite(c), value, 0.0)
    late = c - float(deadline)
    decay = float(spec.get("decay", 0.0))
    if decay > 0:
        frac = np.clip(1.0 - late / decay, 0.0, 1.0)
    else:
        frac = (late <= 0).astype(np.float64)
    return np.where(np.isfinite(c), value * np.where(late <= 0, 1.0, frac), 0.0)


def _specs(jobs: list[JobSnapshot]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per job: has a utility, value, deadline (inf if none), decay."""
    count = len(jobs)
    has = np.zeros(count, dtype=bool)
    value, deadline, decay = np.zeros(count), np.full(count, np.inf), np.zeros(count)
    for i, job in enumerate(jobs):
        if job.utility:
            spec = dict(job.utility)
            has[i] = True
            value[i] = max(float(spec.get("value", 0.0)), 0.0)
            deadline[i] = float(spec.get("deadline", math.inf))
            decay[i] = max(float(spec.get("decay", 0.0)), 0.0)
    return has, value, deadline, decay


def _value(value: np.ndarray, deadline: np.ndarray, decay: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Vectorized :func:`utility_at` for per-job specs (columns of ``c`` are candidates)."""
    v, d, k = value[:, None], deadline[:, None], decay[:, None]
    late = c - d
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(k > 0, np.clip(1.0 - late / np.where(k > 0, k, 1.0), 0.0, 1.0), 0.0)
    return v * np.where(late <= 0, 1.0, frac)


class UtilityPolicy:
    """Price cores by load; jobs buy them only when their utility exceeds the price.

    Args:
        window, decay: loss-curve fitting parameters (as the ``slaq`` policy).
    """

    name = "utility"

    def __init__(self, window: int = 16, decay: float = 6.0) -> None:
        self._curves = curve_memo(window, decay)

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id for the next epoch."""
        if not snapshot.jobs or snapshot.capacity <= 0:
            return {j.job_id: 0 for j in snapshot.jobs}
        capacity = int(snapshot.capacity)
        if not any(j.utility for j in snapshot.jobs):  # all best-effort: even shares
            return _even_shares(snapshot, capacity)
        out = build_outlook(snapshot, build_forecast(snapshot, self._curves))
        count = len(out.ids)
        by_id = {j.job_id: j for j in snapshot.jobs}
        has, value, deadline, decay = _specs([by_id[i] for i in out.ids])
        useful = out.useful.astype(np.int64)
        grid = np.unique(np.round(np.geomspace(1, max(int(useful.max()), 1), _GRID)))
        meet = min_cores_within(out, np.where(np.isfinite(deadline),
                                              (deadline - out.elapsed) / out.remaining, np.inf))
        cand = np.minimum(np.concatenate([np.broadcast_to(grid, (count, grid.size)),
                                          meet[:, None]], axis=1), useful[:, None])
        t = out.seconds(cand)
        work = out.remaining[:, None] * t  # seconds to finish on each candidate
        val = _value(value, deadline, decay, out.elapsed[:, None] + work)
        val = np.where(has[:, None], val, 0.0)
        core_seconds = cand * work
        density = (val / core_seconds).max(axis=1)
        worthy = has & (val.max(axis=1) > 0)
        alloc = _buy(cand, val, work, density, worthy, out.arrival, capacity)
        eligible = (worthy | ~has) if worthy.any() else np.ones(count, dtype=bool)
        left = capacity - int(alloc.sum())
        if left > 0:
            limits = np.where(eligible, np.maximum(useful, alloc), alloc)
            alloc = water_fill(alloc, limits, left)
        return dict(zip(out.ids, alloc.tolist(), strict=True))


def _even_shares(snapshot: ClusterSnapshot, capacity: int) -> dict[str, int]:
    """Equal shares (capped, water-filled) for the ``capacity`` least-served jobs."""
    served = sorted(snapshot.jobs, key=lambda j: (j.attained_core_seconds, j.arrival, j.job_id))
    admitted = served[:capacity]
    caps = np.array([job_cap(j, capacity) for j in admitted], dtype=np.int64)
    shares = water_fill(np.zeros(len(admitted), dtype=np.int64), caps, capacity)
    result = {j.job_id: 0 for j in snapshot.jobs}
    result.update({j.job_id: int(a) for j, a in zip(admitted, shares.tolist(), strict=True)})
    return result


def _buy(cand: np.ndarray, val: np.ndarray, work: np.ndarray, density: np.ndarray, worthy: np.ndarray,
         arrival: np.ndarray, capacity: int) -> np.ndarray:
    """Cores per job bought at load-dependent prices: the ``worthy`` jobs, by value density
    (highest first), each take the candidate core count ``cand`` of largest positive payoff
    ``val - cost`` (``work``: seconds to finish on each candidate)."""
    count = cand.shape[0]
    alloc = np.zeros(count, dtype=np.int64)
    if not worthy.any():
        return alloc
    hi, lo = float(density[worthy].max()), float(density[worthy].min())
    ratio = max(2.0 * hi / lo, 1.0 + 1e-9)
    log_ratio = math.log(ratio)
    order = np.lexsort((np.arange(count), arrival, -density))
    used = 0
    for i in order[worthy[order]].tolist():
        left = capacity - used
        if left <= 0:
            break
        a = cand[i]
        ok = a <= left
        u0 = used / capacity
        u1 = (used + a) / capacity
        cost = work[i] * capacity * (lo / 2.0) * (ratio**u1 - ratio**u0) / log_ratio
        payoff = np.where(ok, val[i] - cost, -np.inf)
        k = int(np.argmax(payoff))
        if payoff[k] > 0:
            alloc[i] = int(a[k])
            used += int(a[k])
    return alloc
