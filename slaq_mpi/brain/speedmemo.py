"""Throughput fits across a sequence of decisions, refitting only what changed (no MPI).

:func:`~slaq_mpi.brain.throughput.fit_throughput_flat` with ``learn_serial`` fits each job on
its own observations: the jobs seen on enough core counts first (each from its own data and
the fixed prior), then the others under a prior whose serial share is the median of those
jobs' (:func:`~slaq_mpi.brain.throughput.population_serial_fraction`). Every step is computed
row by row (per-job sums in the order of the job's observations, element-wise operations,
one small linear system per job), so a job's fit is a function of its own observations and,
for the others, of that serial share. :class:`ThroughputMemo` keeps, per job, its normal
equations and fits and recomputes only the jobs whose observations changed, and the others'
fits only when the serial share changed: the result equals the fit from scratch bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from slaq_mpi.brain.memo import same_history
from slaq_mpi.brain.throughput import (
    DATA_DISTINCT,
    SERIAL_FRACTION,
    Equations,
    ThroughputModel,
    distinct_core_counts,
    equations,
    flat_observations,
    population_serial_fraction,
    prior_of,
    recentre,
    sane_observations,
)

__all__ = ["ThroughputMemo"]


@dataclass
class _Job:
    """What is kept of one job: its observations, their normal equations (``eq``: ``t1``,
    ``gram``, ``rhs``, ``scale``, ``count``, ``phi_ref``; before any change of prior), its
    fitted cores of the observations, and its fits (``fits``: by the prior's serial share;
    a job whose data decide has one, under the fixed prior)."""

    observations: Sequence[tuple[int, float]]
    prior_t1: float
    rich: bool
    distinct: int
    count: float
    eq: tuple[np.ndarray, ...]
    cores: np.ndarray
    fits: dict[float, np.ndarray] = field(default_factory=dict)
    learned: np.ndarray | None = None  # (alpha, beta, gamma) the serial share is learned from


class ThroughputMemo:
    """``fit_throughput_flat(*flat_observations(observations), len(observations),
    prior_seconds, learn_serial=True)`` for a sequence of decisions, keeping per job id what
    did not change (jobs not in a decision are forgotten)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}

    def fit(self, job_ids: Sequence[str], observations: Sequence[Sequence[tuple[int, float]]],
            prior_seconds: float = 1.0) -> ThroughputModel:
        """The throughput fit of every job (``job_ids`` distinct), in the order given."""
        prior_t1 = float(prior_seconds) if 1e-12 < prior_seconds < 1e9 else 1.0
        old, new = self._jobs, {}
        rows: list[_Job | None] = []
        fresh: list[int] = []
        for i, (jid, obs) in enumerate(zip(job_ids, observations, strict=True)):
            hit = old.get(jid)
            if hit is not None and hit.prior_t1 == prior_t1 and same_history(hit.observations, obs):
                rows.append(hit)
            else:
                rows.append(None)
                fresh.append(i)
        if fresh:
            for i, job in zip(fresh, self._build([observations[i] for i in fresh], prior_t1),
                              strict=True):
                rows[i] = job
        done: list[_Job] = [r for r in rows if r is not None]
        for jid, job in zip(job_ids, done, strict=True):
            new[jid] = job
        self._jobs = new
        serial = self._serial(done)
        self._fit_rest([j for j in done if not j.rich and serial not in j.fits], serial)
        fits = np.array([j.fits[SERIAL_FRACTION if j.rich else serial] for j in done]).reshape(-1, 3)
        return ThroughputModel(
            alpha=fits[:, 0], beta=fits[:, 1], gamma=fits[:, 2],
            observed=np.array([j.count for j in done], dtype=np.float64),
            distinct=np.array([j.distinct for j in done], dtype=np.int64),
        )

    @staticmethod
    def _build(observations: list[Sequence[tuple[int, float]]], prior_t1: float) -> list[_Job]:
        """New rows: the normal equations of ``observations``; the jobs whose data decide are
        fitted (under the fixed prior) at once."""
        count_jobs = len(observations)
        job, a, t = sane_observations(*flat_observations(observations))
        count = np.bincount(job, minlength=count_jobs).astype(np.float64)
        distinct = distinct_core_counts(job, a, count_jobs)
        rich = distinct >= DATA_DISTINCT
        scale = np.maximum(count, 1.0) * np.where(rich, 1e-3, 1.0)
        eq = equations(job, a, t, count, np.full(count_jobs, prior_t1), SERIAL_FRACTION, scale)
        prior = prior_of(SERIAL_FRACTION)
        theta = np.zeros((count_jobs, 3))
        first = rich.nonzero()[0]
        if first.size:
            theta[first] = eq.solve(first, prior)
            recentre(eq, theta, first, prior)
        bounds = np.searchsorted(job, np.arange(count_jobs + 1)).tolist()
        # per job, views of its rows of the batch (nothing changes them after this)
        cols = (eq.t1, eq.gram, eq.rhs, eq.scale, eq.count, eq.phi_ref)
        rows = [tuple(col[k : k + 1] for col in cols) for k in range(count_jobs)]
        final = _final(theta[first], eq.t1[first]) if first.size else theta
        learned = np.stack([theta[:, 0] * eq.t1, np.maximum(theta[:, 1], 1e-6) * eq.t1,
                            theta[:, 2] * eq.t1], axis=1)
        out = []
        for k, (obs, is_rich, dist, cnt) in enumerate(zip(observations, rich.tolist(),
                                                          distinct.tolist(), count.tolist(),
                                                          strict=True)):
            row = _Job(obs, prior_t1, is_rich, int(dist), float(cnt), rows[k],
                       a[bounds[k] : bounds[k + 1]])
            out.append(row)
        for i, k in enumerate(first.tolist()):
            out[k].learned = learned[k]
            out[k].fits[SERIAL_FRACTION] = final[i]
        return out

    @staticmethod
    def _serial(jobs: list[_Job]) -> float:
        """The prior's serial share for the jobs whose data do not decide (as learned from the
        others by :func:`~slaq_mpi.brain.throughput.population_serial_fraction`)."""
        rich = [j for j in jobs if j.rich]
        if not rich or len(rich) == len(jobs):
            return SERIAL_FRACTION
        learned = np.array([j.learned for j in rich])
        model = ThroughputModel(learned[:, 0], learned[:, 1], learned[:, 2],
                                np.array([j.count for j in rich]),
                                np.array([j.distinct for j in rich], dtype=np.int64))
        return population_serial_fraction(model, default=SERIAL_FRACTION)

    @staticmethod
    def _fit_rest(jobs: list[_Job], serial: float) -> None:
        """Fit ``jobs`` (whose data do not decide) under the prior of serial share ``serial``."""
        if not jobs:
            return
        eq = _stack([j.eq for j in jobs])
        prior = prior_of(SERIAL_FRACTION)
        if serial != SERIAL_FRACTION:
            a = np.concatenate([j.cores for j in jobs])
            owner = np.repeat(np.arange(len(jobs)), [j.cores.size for j in jobs])
            old_shape = (1.0 - SERIAL_FRACTION) / a + SERIAL_FRACTION
            new_shape = (1.0 - serial) / a + serial
            log_ratio = np.bincount(owner, weights=np.log(old_shape / new_shape), minlength=len(jobs))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(eq.count > 0, np.exp(log_ratio / np.maximum(eq.count, 1.0)), 1.0)
            eq.rescale(slice(None), ratio)
            prior = prior_of(serial)
        theta = eq.solve(np.arange(len(jobs)), prior)
        for job, fit in zip(jobs, _final(theta, eq.t1), strict=True):
            job.fits = {serial: fit}  # the share changes: only the latest is kept


def _stack(rows: list[tuple[np.ndarray, ...]]) -> Equations:
    """The normal equations of several jobs as one batch."""
    parts = [np.concatenate(col) for col in zip(*rows, strict=True)]
    return Equations(*parts)


def _final(theta: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """``(alpha, beta, gamma)`` per job from its coefficients in units of ``t1`` (as the fit
    returns them: non-negative, the serial one at least 1e-6)."""
    theta = np.maximum(theta, 0.0)
    theta[:, 1] = np.maximum(theta[:, 1], 1e-6)
    return theta * t1[:, None]
