"""Every job's predicted gain on each core count, kept across decisions while its forecast row
is unchanged (no MPI).

The greedy compares each job's gain ``weight * reduction(a)`` on ``a = 1 .. n`` cores
(:meth:`~slaq_mpi.brain.forecast.Forecast.reduction`). A job's gains depend only on its own
row of the forecast (its curve fit, throughput fit, remaining iterations and cap), its weight
and the epoch: between two decisions most jobs report nothing new, so their rows are the
same, and so are their gains. :class:`GainRows` evaluates the gains of the jobs whose row is
new or changed, in one batch, and keeps the others': each element is computed on its own
(element-wise array operations), so a kept row is bit for bit the row evaluated again.
"""

from __future__ import annotations

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite
from slaq_mpi.brain.allocate import positive_marginals
from slaq_mpi.brain.forecast import Forecast

__all__ = ["GainRows", "row_lengths"]

_CURVE_FIELDS = ("family", "amp", "p1", "p2", "floor", "last", "n", "max_drop", "rms", "last_drop")


def row_lengths(fc: Forecast) -> np.ndarray:
    """Per job, the core counts ``1 .. n`` whose gains can matter to the greedy: up to two
    past its useful cores (beyond them an iteration is no faster, so a further core gains
    nothing), at most its cap."""
    return np.minimum(np.maximum(fc.useful_cores() + 2, 1), np.maximum(fc.caps, 1)).astype(np.int64)


def _row_keys(fc: Forecast, weights: np.ndarray, lengths: np.ndarray, min_gain: float) -> list[bytes]:
    """Per job, the bytes of everything its gains depend on."""
    c, s = fc.curves, fc.speed
    span = np.zeros(len(c)) if c.span is None else c.span
    cols = [getattr(c, f).astype(np.float64) for f in _CURVE_FIELDS]
    cols += [span, s.alpha, s.beta, s.gamma, fc.remaining, weights, lengths.astype(np.float64),
             np.full(len(c), fc.epoch_seconds), np.full(len(c), min_gain)]
    table = np.ascontiguousarray(np.column_stack(cols))
    return [row.tobytes() for row in table]


class GainRows:
    """Per job id, its gains on ``1 .. n`` cores (``n``: :func:`row_lengths`) and their
    positive marginals, for a sequence of decisions (jobs not in a decision are forgotten)."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[bytes, np.ndarray, np.ndarray]] = {}

    def evaluate(self, fc: Forecast, weights: np.ndarray, min_gain: float
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Every job's gains (row ``i`` on ``1 .. len`` cores) and positive marginals
        (:func:`~slaq_mpi.brain.allocate.positive_marginals`), in the forecast's order."""
        ids = fc.job_ids
        lengths = row_lengths(fc)
        keys = _row_keys(fc, weights, lengths, min_gain)
        old, new = self._rows, {}
        gains: list[np.ndarray] = [np.zeros(0)] * len(ids)
        margs: list[np.ndarray] = [np.zeros(0)] * len(ids)
        fresh = []
        for i, (jid, key) in enumerate(zip(ids, keys, strict=True)):
            hit = old.get(jid)
            if hit is not None and hit[0] == key:
                new[jid] = hit
                gains[i], margs[i] = hit[1], hit[2]
            else:
                fresh.append(i)
        if fresh:
            rows = np.array(fresh, dtype=np.int64)
            size = lengths[rows]
            cores = np.minimum(np.arange(1, int(size.max()) + 1)[None, :], size[:, None])
            got = zero_nonfinite(fc.reduction(cores.astype(np.float64), rows) * weights[rows, None])
            for k, i in enumerate(fresh):
                g = got[k, : int(size[k])].copy()
                m = positive_marginals(g, min_gain)
                gains[i], margs[i] = g, m
                new[ids[i]] = (keys[i], g, m)
        self._rows = new
        return gains, margs
