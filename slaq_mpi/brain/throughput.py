"""Seconds per iteration as a function of cores, fitted per job (vectorized across jobs).

Model: ``t(a) = alpha / a + beta + gamma * log2(a)`` with ``alpha, beta, gamma >= 0``:
parallel work, serial work, and the cost of a tree allreduce over ``a`` ranks.

Every job's fit is a weighted least-squares problem (relative errors) regularized by
pseudo-observations of a *prior* model that scales near-linearly, with a small serial
fraction, through the job's own observations (``t(a) = t1 * ((1 - s) / a + s)``). So:

* no observation: the prior with ``t1 = prior_seconds`` (e.g. the cluster's typical job);
* one core count: the prior through that point (near-linear scaling from it);
* two core counts: the data fix ``t`` there; the prior decides the rest;
* three or more: the data dominate.

Negative coefficients are pinned to 0 and the system re-solved; nothing returns NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite

__all__ = ["SERIAL_FRACTION", "ThroughputModel", "fit_throughput", "fit_throughput_flat",
           "flat_observations", "population_serial_fraction"]

SERIAL_FRACTION = 0.05
PRIOR_WEIGHT = 0.02  # total weight of the prior's pseudo-observations vs. 1 per observation
_PRIOR_CORES = 2.0 ** np.arange(0, 15)
MAX_OBSERVATIONS = 64  # only the most recent observations of a job are fitted
DATA_DISTINCT = 3  # distinct core counts from which a job's own data decide its fit
MIN_POPULATION_JOBS = 3  # jobs needed to learn the prior's serial share from the cluster
MIN_SERIAL_FRACTION = 1e-4  # a learned serial share is never taken below this


def _features(cores: np.ndarray) -> np.ndarray:
    a = np.maximum(np.asarray(cores, dtype=np.float64), 1.0)
    return np.stack([1.0 / a, np.ones_like(a), np.log2(a)], axis=-1)


@dataclass(frozen=True)
class ThroughputModel:
    """Fitted ``t(a) = alpha / a + beta + gamma * log2(a)`` per job (arrays of shape (jobs,)).

    Attributes:
        alpha, beta, gamma: the coefficients (seconds), all >= 0, ``alpha + beta > 0``.
        observed: how many (cores, seconds) observations each fit used.
        distinct: how many distinct core counts those observations cover (``None``: unknown).
    """

    alpha: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray
    observed: np.ndarray
    distinct: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.alpha.shape[0])

    def take(self, rows: np.ndarray) -> ThroughputModel:
        """The models of the jobs ``rows`` (an index array), in that order."""
        return ThroughputModel(self.alpha[rows], self.beta[rows], self.gamma[rows], self.observed[rows],
                               None if self.distinct is None else self.distinct[rows])

    def seconds(self, cores: np.ndarray | float) -> np.ndarray:
        """Seconds per iteration on ``cores`` (shape ``(jobs,)`` or ``(jobs, K)``)."""
        a = np.maximum(np.asarray(cores, dtype=np.float64), 1.0)
        if a.ndim > 1:
            al, be, ga = self.alpha[:, None], self.beta[:, None], self.gamma[:, None]
        else:
            al, be, ga = self.alpha, self.beta, self.gamma
        return al / a + be + ga * np.log2(a)

    def iterations(self, seconds: float, cores: np.ndarray | float) -> np.ndarray:
        """Iterations run in ``seconds`` of wall time on ``cores`` (fractional)."""
        return seconds / self.seconds(cores)

    def best_cores(self) -> np.ndarray:
        """The core count (float, >= 1) of least seconds per iteration: ``alpha ln2 / gamma``."""
        with np.errstate(divide="ignore", invalid="ignore"):
            best = np.where(self.gamma > 0, self.alpha * np.log(2.0) / self.gamma, np.inf)
        return np.maximum(best, 1.0)


def _solve(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Batched ``gram x = rhs`` (3x3 systems); singular systems via the pseudo-inverse."""
    try:
        out = np.linalg.solve(gram, rhs[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        out = np.einsum("jab,jb->ja", np.linalg.pinv(gram), rhs)
    return zero_nonfinite(out)


def _prior_gram(serial: float = SERIAL_FRACTION) -> np.ndarray:
    """Sum over the prior's core counts of ``phi phi^T / t_prior^2`` (for ``t1 = 1``)."""
    phi = _features(_PRIOR_CORES)
    t = (1.0 - serial) / _PRIOR_CORES + serial
    wts = PRIOR_WEIGHT / len(_PRIOR_CORES) / t**2
    return np.einsum("k,ka,kb->ab", wts, phi, phi)


_PRIOR_GRAM = _prior_gram()
_EYE = np.eye(3)[None]
_RIDGE = 1e-12 * _EYE  # keeps every system regular


def fit_throughput_flat(
    job: np.ndarray, cores: np.ndarray, seconds: np.ndarray, jobs: int,
    prior_seconds: float | np.ndarray = 1.0, serial_fraction: float = SERIAL_FRACTION,
    learn_serial: bool = False,
) -> ThroughputModel:
    """Fit from flat observation arrays: observation ``i`` is ``(cores[i], seconds[i])`` of job
    ``job[i]`` (``0 <= job[i] < jobs``). Observations outside ``1e-12 < seconds < 1e9`` or with
    ``cores < 1`` are ignored.

    Args:
        prior_seconds: single-core seconds per iteration assumed for jobs without observations
            (scalar or per job).
        serial_fraction: the prior's serial share ``s`` (clipped to ``[1e-6, 1]``), e.g. one
            learned from other jobs (:func:`population_serial_fraction`).
        learn_serial: fit the jobs observed on ``DATA_DISTINCT`` or more core counts first
            (their data decide) and give the others a prior with those jobs' typical serial
            share (:func:`population_serial_fraction`; ``serial_fraction`` if too few jobs).
            Every observation is still accumulated once.
    """
    serial = float(np.clip(serial_fraction, 1e-6, 1.0)) if np.isfinite(serial_fraction) else SERIAL_FRACTION
    job, a, t = _sane(job, cores, seconds)
    count = np.bincount(job, minlength=jobs).astype(np.float64)
    distinct = _distinct_core_counts(job, a, jobs)
    rich = distinct >= DATA_DISTINCT
    # the prior settles what 0-2 distinct core counts leave open; with 3+ the data decide
    scale = np.maximum(count, 1.0) * np.where(rich, 1e-3, 1.0)
    eq = _equations(job, a, t, count, _prior_t1(prior_seconds, jobs), serial, scale)
    theta = _coefficients(eq, _Prior.of(serial), rich, distinct, job, a, learn_serial)
    theta = np.maximum(theta, 0.0)
    theta[:, 1] = np.maximum(theta[:, 1], 1e-6)  # t(a) > 0 for every a
    t1 = eq.t1
    return ThroughputModel(
        alpha=theta[:, 0] * t1, beta=theta[:, 1] * t1, gamma=theta[:, 2] * t1, observed=count,
        distinct=distinct,
    )


@dataclass(frozen=True)
class _Prior:
    """The near-linear prior ``t(a) = t1 ((1 - s) / a + s)`` with serial share ``s``."""

    serial: float
    gram: np.ndarray
    theta: np.ndarray
    pull: np.ndarray  # gram @ theta: the prior's right-hand side

    @staticmethod
    def of(serial: float) -> _Prior:
        """The prior of serial share ``serial`` (shared: its arrays are not changed)."""
        return _prior_of(float(serial))


@lru_cache(maxsize=64)
def _prior_of(serial: float) -> _Prior:
    gram = _PRIOR_GRAM if serial == SERIAL_FRACTION else _prior_gram(serial)
    theta = np.array([1.0 - serial, serial, 0.0])
    return _Prior(serial, gram, theta, gram @ theta)


@dataclass
class _Equations:
    """Every job's relative-error weighted normal equations, in units of its one-core time
    ``t1``, with the weight ``scale`` of the prior's pseudo-observations."""

    t1: np.ndarray
    gram: np.ndarray
    rhs: np.ndarray
    scale: np.ndarray
    count: np.ndarray
    phi_ref: np.ndarray  # the features at each job's typical (geometric mean) core count

    def solve(self, rows: np.ndarray, prior: _Prior) -> np.ndarray:
        """The coefficients of the jobs ``rows`` (units of ``t1``), kept non-negative."""
        return _solve_group(self.gram[rows], self.rhs[rows], self.scale[rows], self.count[rows],
                            prior.gram, prior.pull, self.phi_ref[rows])

    def rescale(self, rows: np.ndarray | slice, ratio: np.ndarray) -> None:
        """Re-express the jobs ``rows`` in units of ``t1 * ratio``."""
        self.t1[rows] = self.t1[rows] * ratio
        self.gram[rows] = self.gram[rows] * (ratio**2)[:, None, None]
        self.rhs[rows] = self.rhs[rows] * ratio[:, None]


def _sane(job: np.ndarray, cores: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, ...]:
    """The observations ``(job, cores, seconds)`` with sane values only."""
    job = np.asarray(job, dtype=np.int64)
    a = np.asarray(cores, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    keep = np.isfinite(a) & (a >= 1) & (a < 2**40) & (t > 1e-12) & (t < 1e9)
    return job[keep], a[keep], t[keep]


def _prior_t1(prior_seconds: float | np.ndarray, jobs: int) -> np.ndarray:
    """Per job, the one-core seconds assumed without observations (1 where not sane)."""
    prior_t1 = np.broadcast_to(np.asarray(prior_seconds, dtype=np.float64), (jobs,))
    return np.where((prior_t1 > 1e-12) & (prior_t1 < 1e9), prior_t1, 1.0)


def _distinct_core_counts(job: np.ndarray, a: np.ndarray, jobs: int) -> np.ndarray:
    """Per job, how many distinct core counts its observations cover."""
    key = np.sort(job * 2**32 + a.astype(np.int64))
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    return np.bincount(key[first] // 2**32, minlength=jobs)


def _equations(job: np.ndarray, a: np.ndarray, t: np.ndarray, count: np.ndarray, prior_t1: np.ndarray,
               serial: float, scale: np.ndarray) -> _Equations:
    """Accumulate every observation once into its job's normal equations."""
    jobs = count.shape[0]
    # per-job single-core scale from the near-linear prior through each observation
    shape = (1.0 - serial) / a + serial
    log_t1 = np.bincount(job, weights=np.log(t / shape), minlength=jobs)
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(count > 0, np.exp(log_t1 / np.maximum(count, 1.0)), prior_t1)
    phi = _features(a)
    log_a = np.bincount(job, weights=np.log2(a), minlength=jobs) / np.maximum(count, 1.0)
    ts = np.minimum(np.maximum(t / t1[job], 1e-9), 1e9)
    wts = 1.0 / np.maximum(ts, 1e-12) ** 2
    gram = np.zeros((jobs, 3, 3))
    rhs = np.zeros((jobs, 3))
    for i in range(3):
        rhs[:, i] = np.bincount(job, weights=wts * phi[:, i] * ts, minlength=jobs)
        for k in range(i, 3):
            gram[:, i, k] = gram[:, k, i] = np.bincount(job, weights=wts * phi[:, i] * phi[:, k],
                                                        minlength=jobs)
    return _Equations(t1, gram, rhs, scale, count, _features(2.0**log_a))


def _coefficients(eq: _Equations, prior: _Prior, rich: np.ndarray, distinct: np.ndarray,
                  job: np.ndarray, a: np.ndarray, learn_serial: bool) -> np.ndarray:
    """Every job's ``(alpha, beta, gamma)`` in units of its ``t1``.

    With ``learn_serial`` the ``rich`` jobs (their data decide) are solved first, and the
    others under a prior with the serial share typical of them.
    """
    jobs = rich.shape[0]
    theta = np.zeros((jobs, 3))
    first = np.flatnonzero(rich) if learn_serial else np.arange(jobs)
    if first.size:
        theta[first] = eq.solve(first, prior)
        _recentre(eq, theta, first[rich[first]], prior)
    if not learn_serial or first.size == jobs:
        return theta
    t1 = eq.t1[first]
    learned = ThroughputModel(theta[first, 0] * t1, np.maximum(theta[first, 1], 1e-6) * t1,
                              theta[first, 2] * t1, eq.count[first], distinct[first])
    new = population_serial_fraction(learned, default=prior.serial)
    if new != prior.serial:
        # re-express the other jobs' data in units of their t1 under the learned prior
        old_shape = (1.0 - prior.serial) / a + prior.serial
        new_shape = (1.0 - new) / a + new
        log_ratio = np.bincount(job, weights=np.log(old_shape / new_shape), minlength=jobs)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(eq.count > 0, np.exp(log_ratio / np.maximum(eq.count, 1.0)), 1.0)
        eq.rescale(slice(None), np.where(rich, 1.0, ratio))
        prior = _Prior.of(new)
    rest = np.flatnonzero(~rich)
    if rest.size:
        theta[rest] = eq.solve(rest, prior)
    return theta


def _recentre(eq: _Equations, theta: np.ndarray, rows: np.ndarray, prior: _Prior) -> None:
    """Solve once more, in units of the fitted ``t1``, the jobs of ``rows`` whose fitted
    one-core time is far from the ``t1`` the prior's serial share guessed: so the prior is
    centred on what the data say."""
    fit_t1 = theta[rows, 0] + theta[rows, 1]
    off = rows[(fit_t1 > 1.5) | (fit_t1 < 1.0 / 1.5)]
    if off.size:
        ratio = np.maximum(theta[off, 0] + theta[off, 1], 1e-9)
        eq.rescale(off, ratio)
        theta[off] = eq.solve(off, prior)


def _solve_group(gram: np.ndarray, rhs: np.ndarray, scale: np.ndarray, count: np.ndarray,
                 prior_gram: np.ndarray, prior_pull: np.ndarray, phi_ref: np.ndarray) -> np.ndarray:
    """Solve the jobs' normal equations plus ``scale`` times the prior's (``prior_gram``, and
    ``prior_pull``: its right-hand side, the prior's Gram matrix times its coefficients), with
    coefficients kept non-negative.

    While a job has negative coefficients, the one whose term is most negative at the job's
    typical core count (``phi_ref``: the features there) is pinned to 0 and the
    system re-solved (up to three times). One at a time: core counts in a narrow range leave
    ``alpha / a`` and ``gamma log2(a)`` nearly collinear, the unconstrained solution may make
    both negative, and pinning both would leave a constant (no speed-up at all) where pinning
    the communication term alone recovers the data's speed-up.
    """
    gram = gram + prior_gram[None] * scale[:, None, None]
    rhs = rhs + prior_pull[None] * scale[:, None]
    theta = _solve(gram + _RIDGE, rhs)
    pinned = np.zeros(theta.shape, dtype=bool)
    for _ in range(3):
        neg = (theta < -1e-12) & ~pinned
        todo = neg.any(axis=1).nonzero()[0]
        if not todo.size:
            break
        worst = np.argmin(np.where(neg[todo], theta[todo] * phi_ref[todo], np.inf), axis=1)
        pinned[todo, worst] = True
        stiff = 1e9 * np.maximum(count[todo], 1.0)[:, None, None]
        g = gram[todo] + _EYE * (stiff * pinned[todo, :, None] + 1e-12)
        theta[todo] = _solve(g, rhs[todo] * ~pinned[todo])
    return theta


def population_serial_fraction(model: ThroughputModel, min_jobs: int = MIN_POPULATION_JOBS,
                               default: float = SERIAL_FRACTION) -> float:
    """The serial share ``beta / (alpha + beta)`` typical of the jobs whose own data fix it.

    The median over jobs observed at ``DATA_DISTINCT`` or more distinct core counts (where the
    data, not the prior, decide the fit), clipped to ``[MIN_SERIAL_FRACTION, 1]``; ``default``
    when fewer than ``min_jobs`` such jobs exist. A prior learned from the other jobs of the
    cluster: a job seen on one core count is then assumed to scale like them.
    """
    if model.distinct is None:
        return float(default)
    # scalar arithmetic on the few jobs: the same values as the array operations, which cost
    # more than the arithmetic itself at this size
    need = max(1, min_jobs)
    known = 0
    share = []
    for distinct, alpha, beta in zip(model.distinct.tolist(), model.alpha.tolist(),
                                     model.beta.tolist(), strict=True):
        if distinct >= DATA_DISTINCT:
            known += 1
            total = alpha + beta
            if total > 0 and math.isfinite(beta / total):
                share.append(beta / total)
    if known < need or len(share) < need:
        return float(default)
    share.sort()
    mid = len(share) // 2
    median = share[mid] if len(share) % 2 else (share[mid - 1] + share[mid]) / 2.0
    return float(min(max(median, MIN_SERIAL_FRACTION), 1.0))


def flat_observations(
    observations: Sequence[Sequence[tuple[int, float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every job's last ``MAX_OBSERVATIONS`` ``(cores, seconds)`` pairs as the flat arrays
    ``(job, cores, seconds)`` that :func:`fit_throughput_flat` takes."""
    jobs = len(observations)
    counts = np.fromiter(map(len, observations), dtype=np.int64, count=jobs)
    if counts.max(initial=0) > MAX_OBSERVATIONS:
        observations = [o[-MAX_OBSERVATIONS:] for o in observations]
        counts = np.minimum(counts, MAX_OBSERVATIONS)
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(observations)), dtype=np.float64,
                       count=2 * int(counts.sum()))
    return np.repeat(np.arange(jobs), counts), flat[0::2], flat[1::2]


def fit_throughput(
    observations: Sequence[Sequence[tuple[int, float]]], prior_seconds: float | np.ndarray = 1.0
) -> ThroughputModel:
    """Fit every job's ``(cores, seconds_per_iteration)`` observations (its last
    ``MAX_OBSERVATIONS``); jobs without any get the prior with ``prior_seconds`` on 1 core."""
    job, cores, seconds = flat_observations(observations)
    return fit_throughput_flat(job, cores, seconds, len(observations), prior_seconds)


# the steps of :func:`fit_throughput_flat`, for :mod:`slaq_mpi.brain.speedmemo`, which runs them
# on the jobs whose observations changed only
Equations = _Equations
equations = _equations
prior_of = _Prior.of
recentre = _recentre
sane_observations = _sane
distinct_core_counts = _distinct_core_counts
