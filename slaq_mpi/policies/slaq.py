"""SLAQ: give cores to the jobs whose normalized loss would drop the most next epoch.

Per decision, a pure function of the snapshot (a resumed run decides as an uninterrupted one
would):

1. forecast every job's normalized loss reduction over the next epoch as a function of cores
   (:func:`slaq_mpi.brain.forecast.build_forecast`);
2. greedy: one core per job, then one core at a time to the largest marginal reduction
   (:func:`slaq_mpi.brain.allocate.allocate_by_rows`, on each job's reductions per core count,
   kept across decisions while the job's forecast is unchanged:
   :class:`~slaq_mpi.brain.gainrows.GainRows`);
3. more jobs than cores: a reserved share of the cores for the least-served jobs, the rest for
   the largest predicted one-core reductions;
4. with at least as many cores as jobs, the greedy's allocation is kept only if its predicted
   reduction, net of the time its moves cost (``snapshot.move_seconds`` per moved job), beats
   that of the allocation held now (:func:`slaq_mpi.brain.moves.settle_moves`): ranks are not
   churned for forecasts that shift a little.
"""

from __future__ import annotations

import numpy as np

from slaq_mpi.brain.allocate import allocate_by_rows
from slaq_mpi.brain.forecast import NORMALIZATIONS, Forecast, build_forecast
from slaq_mpi.brain.gainrows import GainRows
from slaq_mpi.brain.memo import CurveMemo
from slaq_mpi.brain.moves import settle_moves
from slaq_mpi.brain.predict import DEFAULT_DECAY, DEFAULT_WINDOW
from slaq_mpi.brain.speedmemo import ThroughputMemo
from slaq_mpi.policies._params import require, require_decay, require_window
from slaq_mpi.policies.snapshot import ClusterSnapshot

__all__ = ["SlaqPolicy"]


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
    fits of unchanged histories and observations, and the gains of unchanged forecasts, are
    kept, and they equal those from scratch bit for bit.
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
        require_window(window)
        require("min_gain", min_gain, min_gain >= 0, "a number >= 0")
        require_decay(decay)
        require("prior_seconds", prior_seconds, prior_seconds > 0, "> 0")
        require("reserve_fraction", reserve_fraction, 0 <= reserve_fraction <= 1, "a fraction in [0, 1]")
        require("normalize", normalize, normalize in NORMALIZATIONS, "'span' or 'max_drop'")
        self.window = int(window)
        self.decay = float(decay)
        self.prior_seconds = float(prior_seconds)
        self.reserve_fraction = float(reserve_fraction)
        self.min_gain = float(min_gain)
        self.normalize = normalize
        self.learn_scaling = bool(learn_scaling)
        self._curves = CurveMemo(self.window, self.decay)
        self._gains = GainRows()
        self._speeds = ThroughputMemo()

    def forecast(self, snapshot: ClusterSnapshot) -> Forecast:
        """Fit every active job of ``snapshot``: the predicted reductions the greedy uses."""
        if (self._curves.window, self._curves.decay) != (self.window, self.decay):
            self._curves = CurveMemo(self.window, self.decay)  # changed after the last decision
        return build_forecast(snapshot, self._curves, self.prior_seconds, self.normalize,
                              self.learn_scaling, self._speeds)

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id for the next epoch (sum <= capacity; each <= its max cores)."""
        if not snapshot.jobs or snapshot.capacity <= 0:
            return {j.job_id: 0 for j in snapshot.jobs}
        fc = self.forecast(snapshot)
        count = len(fc.job_ids)
        capacity = int(snapshot.capacity)
        if capacity < count:
            return self._admit(snapshot, fc, capacity)

        weights = self._weights(snapshot, fc)
        gains, margs = self._gains.evaluate(fc, weights, self.min_gain)
        alloc = allocate_by_rows(margs, fc.caps, capacity, fc.useful_cores(), self.min_gain)
        alloc = self._settle(snapshot, fc, alloc, weights, gains)
        return dict(zip(fc.job_ids, alloc.tolist(), strict=True))

    @staticmethod
    def _weights(snapshot: ClusterSnapshot, fc: Forecast) -> np.ndarray:
        """Every job's weight, in the forecast's order: the reductions the greedy compares
        are weighted by them."""
        by_id = {j.job_id: j.weight for j in snapshot.jobs}
        return np.array([by_id[i] for i in fc.job_ids], dtype=np.float64)

    def _settle(self, snapshot: ClusterSnapshot, fc: Forecast, alloc: np.ndarray,
                weights: np.ndarray, gains: list[np.ndarray]) -> np.ndarray:
        """``alloc``, or the allocation held now if the moves it makes cost more than they
        gain over the next epoch (:func:`~slaq_mpi.brain.moves.settle_moves`); ``gains``: each
        job's weighted gains over a whole epoch on ``1 .. len`` cores (:class:`GainRows`)."""
        by_id = {j.job_id: j for j in snapshot.jobs}
        jobs = [by_id[i] for i in fc.job_ids]
        current = np.array([j.cores for j in jobs], dtype=np.int64)
        started = np.array([bool(j.losses) for j in jobs], dtype=bool)
        epoch = float(fc.epoch_seconds)
        sizes = np.array([g.size for g in gains], dtype=np.int64)

        def value(cores: np.ndarray, seconds: np.ndarray) -> np.ndarray:
            cores = np.asarray(cores, dtype=np.int64)
            out = np.zeros(cores.shape[0])
            kept = (cores >= 1) & (cores <= sizes) & (np.asarray(seconds) == epoch)
            for i in kept.nonzero()[0].tolist():
                out[i] = gains[i][cores[i] - 1]
            rest = ((cores >= 1) & ~kept).nonzero()[0]
            if rest.size:
                out[rest] = fc.reduction(cores[rest], rest, np.asarray(seconds)[rest]) * weights[rest]
            return out

        return settle_moves(current, alloc, fc.caps, int(snapshot.capacity), started,
                            float(snapshot.epoch_seconds), float(snapshot.move_seconds), value)

    def _admit(self, snapshot: ClusterSnapshot, fc: Forecast, capacity: int) -> dict[str, int]:
        """Fewer cores than jobs: one core each for a reserved least-served share, then the
        largest predicted one-core reductions (ties by job id)."""
        by_id = {j.job_id: j for j in snapshot.jobs}
        jobs = [by_id[i] for i in fc.job_ids]
        reserve = min(capacity, max(1, int(capacity * self.reserve_fraction)))
        served = sorted(range(len(jobs)),
                        key=lambda i: (jobs[i].attained_core_seconds, jobs[i].arrival, jobs[i].job_id))
        chosen = set(served[:reserve])
        one = fc.reduction(np.ones(len(jobs))) * self._weights(snapshot, fc)
        for i in np.lexsort((np.arange(len(jobs)), -one)).tolist():
            if len(chosen) >= capacity:
                break
            chosen.add(i)
        return {jid: int(i in chosen) for i, jid in enumerate(fc.job_ids)}
