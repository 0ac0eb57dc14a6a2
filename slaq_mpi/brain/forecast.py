"""The per-decision forecast: every active job's predicted normalized loss reduction on any
number of cores over the next epoch.

Built from the job histories alone (a resumed run forecasts as an uninterrupted one would):

1. normalize and fit every job's loss history (:mod:`slaq_mpi.brain.predict`, through a
   :class:`~slaq_mpi.brain.memo.CurveMemo` that keeps the fits of unchanged histories);
2. fit every job's seconds per iteration vs. cores (:mod:`slaq_mpi.brain.throughput`);
3. predicted normalized reduction of job ``j`` on ``a`` cores over the epoch ``T``:
   ``f_j(k) - f_j(k + T / t_j(a))`` (iterations capped by the job's remaining budget).

The brain reads jobs and clusters through the :class:`JobView` and :class:`ClusterView`
protocols, which the policies' snapshots satisfy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from slaq_mpi.brain.fitting import FAMILY_LINEAR, FAMILY_PRIOR, FAMILY_SUBLINEAR
from slaq_mpi.brain.memo import CurveMemo
from slaq_mpi.brain.predict import CurveFit, class_codes
from slaq_mpi.brain.speedmemo import ThroughputMemo
from slaq_mpi.brain.throughput import (
    SERIAL_FRACTION,
    ThroughputModel,
    fit_throughput_flat,
    flat_observations,
    population_serial_fraction,
)

__all__ = ["ClusterView", "Forecast", "JobView", "NORMALIZATIONS", "build_forecast"]

NORMALIZATIONS = ("span", "max_drop")
TAIL_HORIZON = 10.0  # iterations: the shortest look-ahead of the estimate of the loss left
TAIL_FACTOR = 2.0  # loss left <= this x the drop over the next max(n, TAIL_HORIZON) iterations


class JobView(Protocol):
    """What the brain reads of one active job (:class:`~slaq_mpi.policies.snapshot.JobSnapshot`)."""

    @property
    def job_id(self) -> str: ...
    @property
    def losses(self) -> Sequence[float]: ...
    @property
    def throughput(self) -> Sequence[tuple[int, float]]: ...
    @property
    def max_cores(self) -> int: ...
    @property
    def convergence(self) -> str: ...
    @property
    def arrival(self) -> float: ...
    @property
    def max_iterations(self) -> int | None: ...


class ClusterView(Protocol):
    """What the brain reads of the cluster (:class:`~slaq_mpi.policies.snapshot.ClusterSnapshot`)."""

    @property
    def capacity(self) -> int: ...
    @property
    def now(self) -> float: ...
    @property
    def epoch_seconds(self) -> float: ...
    @property
    def jobs(self) -> Sequence[JobView]: ...


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

    def iterations(self, cores: np.ndarray, rows: np.ndarray | None = None,
                   seconds: np.ndarray | float | None = None) -> np.ndarray:
        """Iterations each job runs in one epoch (or in ``seconds``, per job: ``(J,)``) on
        ``cores`` (``(J,)`` or ``(J, K)``)."""
        speed = self.speed if rows is None else self.speed.take(rows)
        rem = self.remaining if rows is None else self.remaining[rows]
        span = np.asarray(self.epoch_seconds if seconds is None else seconds, dtype=np.float64)
        cores = np.asarray(cores, dtype=np.float64)
        it = (span[:, None] if span.ndim and cores.ndim > 1 else span) / speed.seconds(cores)
        return np.minimum(it, rem[:, None] if it.ndim > 1 else rem)

    def reduction(self, cores: np.ndarray, rows: np.ndarray | None = None,
                  seconds: np.ndarray | float | None = None) -> np.ndarray:
        """Predicted normalized loss reduction over the next epoch (or over ``seconds`` of
        running, per job) on ``cores`` per job.

        ``cores`` has shape ``(J,)`` or ``(J, K)`` (K candidate core counts per job), or
        ``(R,)``/``(R, K)`` with ``rows`` selecting R jobs. 0 cores give 0.
        """
        cores = np.asarray(cores, dtype=np.float64)
        curves = self.curves if rows is None else self.curves.take(rows)
        red = curves.reduction(self.iterations(np.maximum(cores, 1.0), rows, seconds))
        return np.where(cores >= 1, red, 0.0)

    def useful_cores(self) -> np.ndarray:
        """Per job, the most cores that still speed it up (capped by ``caps``)."""
        return np.minimum(np.floor(self.speed.best_cores() + 1e-9), self.caps).astype(np.int64)


def build_forecast(
    cluster: ClusterView,
    curves: CurveMemo,
    prior_seconds: float = 1.0,
    normalize: str = "span",
    learn_scaling: bool = True,
    speeds: ThroughputMemo | None = None,
) -> Forecast:
    """Fit every active job of ``cluster``: the predicted reductions the policies allocate by.

    Args:
        cluster: the jobs, capacity and epoch length of one decision.
        curves: the loss-curve fits (its ``window`` and ``decay``), kept across decisions.
        prior_seconds: single-core seconds per iteration assumed for a job with no throughput
            observation when no other job has one either (else the median of the others).
        normalize: ``"span"``: reductions in units of each job's own ``L_0 - L*`` (first loss
            minus the estimated final loss); ``"max_drop"``: in units of the largest
            one-iteration reduction seen so far.
        learn_scaling: a job seen on too few core counts takes the serial share of its
            throughput prior from the other jobs' fits
            (:func:`~slaq_mpi.brain.throughput.population_serial_fraction`) instead of the fixed
            :data:`~slaq_mpi.brain.throughput.SERIAL_FRACTION`.
        speeds: the throughput fits kept across decisions (with ``learn_scaling``; the same
            fits as from scratch).
    """
    jobs = sorted(cluster.jobs, key=lambda j: j.job_id)
    histories = [j.losses for j in jobs]
    ids = [j.job_id for j in jobs]
    fit = curves.fit(ids, histories, class_codes([j.convergence for j in jobs]))
    n = fit.n
    if normalize == "span":
        fit = replace(fit, span=_spans(histories, fit))
    speed = _fit_speed(jobs, prior_seconds, learn_scaling, speeds)
    budget = np.array([j.max_iterations for j in jobs], dtype=np.float64)  # None: nan
    budget[np.isnan(budget)] = np.inf
    remaining = np.maximum(budget - n, 0.0)
    max_cores = np.array([j.max_cores for j in jobs], dtype=np.int64)
    caps = np.minimum(np.maximum(max_cores, 1), max(1, int(cluster.capacity)))
    return Forecast(tuple(ids), fit, speed, remaining, caps, float(cluster.epoch_seconds))


def _spans(histories: Sequence[Sequence[float]], curves: CurveFit) -> np.ndarray:
    """Per job ``L_0 - L*``: first loss minus the estimated final loss ``L*``.

    ``L*`` is the fit's asymptote, but the loss left (``last - L*``) is at most
    ``TAIL_FACTOR`` times the fit's drop over the next ``max(n, TAIL_HORIZON)`` iterations:
    what a ``1/k`` tail leaves after ``n`` iterations. A 1/k-like fit of a short window can put
    its asymptote far below the true final loss, which would make every later reduction of
    such a job look small.
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


def _fit_speed(jobs: Sequence[JobView], prior_seconds: float, learn_scaling: bool,
               speeds: ThroughputMemo | None = None) -> ThroughputModel:
    """Every job's throughput fit; a job not observed yet scales like the prior the others
    were shaped by, with the median one-core time of the observed jobs."""
    count = len(jobs)
    if learn_scaling and speeds is not None:
        speed = speeds.fit([j.job_id for j in jobs], [j.throughput for j in jobs], prior_seconds)
    else:
        owner, cores, seconds = flat_observations([j.throughput for j in jobs])
        speed = fit_throughput_flat(owner, cores, seconds, count, prior_seconds,
                                    learn_serial=learn_scaling)
    serial = population_serial_fraction(speed) if learn_scaling else SERIAL_FRACTION
    seen = speed.observed > 0
    if not seen.any() or seen.all():
        return speed
    t1 = float(np.median(speed.seconds(np.ones(count))[seen]))
    return ThroughputModel(
        alpha=np.where(seen, speed.alpha, (1.0 - serial) * t1),
        beta=np.where(seen, speed.beta, serial * t1),
        gamma=np.where(seen, speed.gamma, 0.0),
        observed=speed.observed,
        distinct=speed.distinct,
    )
