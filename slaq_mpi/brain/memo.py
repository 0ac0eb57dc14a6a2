"""Loss-curve fits across a sequence of decisions, refitting only the histories that changed.

A job's fit is a function of its own history, class, ``window`` and ``decay`` alone: every row
of the batch is computed on its own, without BLAS products, whose rows can change in their last
bits with the batch's size (:func:`slaq_mpi.brain.fitting.coarse`). So a job whose history and
class are what they were at the previous decision keeps that decision's fit, bit for bit the
fit from scratch. Between two scheduling epochs most jobs finish no iteration (a job on one
core may take minutes per iteration), so most fits are reused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slaq_mpi.brain.predict import (
    DEFAULT_DECAY,
    DEFAULT_WINDOW,
    CurveFit,
    fit_windows,
    max_drops,
    tail_windows,
)

__all__ = ["CurveMemo", "same_history"]


def same_history(old: Sequence[object], new: Sequence[object]) -> bool:
    """Whether history ``new`` is the (immutable) tuple ``old`` was. Other sequences may change
    in place, so they always count as changed; so does a NaN not shared as the same object."""
    return isinstance(new, tuple) and (old is new or old == new)


_ROW_FIELDS = ("family", "amp", "p1", "p2", "floor", "last", "n", "max_drop", "rms", "last_drop")


class CurveMemo:
    """:func:`~slaq_mpi.brain.predict.fit_windows` for a sequence of decisions.

    Each call fits only the histories that are new or changed since the previous call, as one
    batch; the others keep the previous call's fit. The result equals fitting every history
    from scratch, bit for bit.
    """

    def __init__(self, window: int = DEFAULT_WINDOW, decay: float = DEFAULT_DECAY) -> None:
        self.window = int(window)
        self.decay = float(decay)
        self._rows: dict[str, tuple[Sequence[float], int, np.ndarray]] = {}  # id: (history, class, row)

    def fit(self, job_ids: Sequence[str], histories: Sequence[Sequence[float]],
            codes: np.ndarray) -> CurveFit:
        """The fits of ``histories`` (classes ``codes``, see
        :func:`~slaq_mpi.brain.predict.class_codes`), one row per
        job of ``job_ids`` (distinct ids); forgets the jobs not in ``job_ids``."""
        jobs = len(job_ids)
        rows = np.empty((jobs, len(_ROW_FIELDS)))
        old, new = self._rows, {}
        fresh = []
        for i, (jid, hist, code) in enumerate(zip(job_ids, histories, codes.tolist(), strict=True)):
            hit = old.get(jid)
            if hit is not None and hit[1] == code and same_history(hit[0], hist):
                rows[i] = hit[2]
                new[jid] = (hist, code, hit[2])
            else:
                fresh.append(i)
        if fresh:
            part = [histories[i] for i in fresh]
            values, mask, n = tail_windows(part, self.window)
            fit = fit_windows(values, mask, n, max_drops(part), codes[fresh], self.decay)
            got = np.stack([getattr(fit, f).astype(np.float64) for f in _ROW_FIELDS], axis=1)
            rows[fresh] = got
            for k, i in enumerate(fresh):
                new[job_ids[i]] = (histories[i], int(codes[i]), got[k])
        self._rows = new
        cols = {f: rows[:, c] for c, f in enumerate(_ROW_FIELDS)}
        cols["family"] = cols["family"].astype(np.int8)
        return CurveFit(**cols)
