"""Loss-curve prediction for many jobs at once (SLAQ's quality model, no MPI).

For every job the recent loss history (a window of the last ``window`` losses) is fitted
with exponentially decaying weights (recent points count most) by one of two families:

* sublinear (first-order methods): ``f(k) = 1 / (a k^2 + b k + c) + d``, written around the
  last observed iteration ``k_n`` (``u = k - k_n``) as ``f = d + A / (1 + p1 u + p2 u^2)``
  (``p1, p2 >= 0``; ``p2 = 0`` gives ``f ~ 1/k``);
* linear / superlinear (L-BFGS, EM, Lloyd): ``f(k) = mu^(k - b) + c``, i.e.
  ``f = c + A * exp(-r u)`` with ``mu = exp(-r)``.

The fit is a *variable projection* solved for all jobs together: for each point of a fixed
grid of the nonlinear parameters (``p1, p2`` or ``r``) the linear parameters ``(A, d)``
have a closed-form weighted least-squares solution, and all the sums it needs are three
(jobs x window) @ (window x grid) matrix products. Each job keeps the grid point of least
residual allowed by its declared convergence class (both families for ``"unknown"``), then a
few batched Levenberg-Marquardt steps refine all four parameters of every job together.

Every fit starts from scratch: the forecast is a function of the histories alone, whatever
was fitted before (a resumed run decides as an uninterrupted one would).
:class:`~slaq_mpi.brain.memo.CurveMemo` skips refitting the histories that did not change since
its previous call (same results).

Losses are *normalized* as in the paper: a job's loss reduction is divided by the largest
one-iteration reduction seen so far for that job (:func:`normalize_drops`); or, with
:attr:`CurveFit.span` set, by the job's estimated ``L_0 - L*``. Jobs with too
few losses, or whose losses never decreased, fall back to a prior; nothing returns NaN. In span
units a short history's fit is blended with the prior, never with more weight than the job's
last reduction over the prior's reduction in that iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from typing import Any

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite
from slaq_mpi.brain.fitting import (
    FAMILY_FLAT,
    FAMILY_LINEAR,
    FAMILY_PRIOR,
    FAMILY_SUBLINEAR,
    MIN_FULL_POINTS,
    coarse,
    refine,
    shape,
)
from slaq_mpi.brain.windows import DEFAULT_WINDOW, history_windows, max_drops, tail_windows

__all__ = [
    "FAMILY_FLAT",
    "FAMILY_LINEAR",
    "FAMILY_PRIOR",
    "FAMILY_SUBLINEAR",
    "CurveFit",
    "DEFAULT_DECAY",
    "DEFAULT_WINDOW",
    "fit_curves",
    "fit_windows",
    "class_codes",
    "history_windows",
    "max_drops",
    "normalize_drops",
    "prior_reduction",
    "tail_windows",
]


DEFAULT_DECAY = 6.0
SKIP_INITIAL_AFTER = 6  # the initial model's loss is left out of fits of longer histories
MIN_FIT_POINTS = 3  # fewer losses: the prior
REFINE_STEPS = 3
YOUNG_EXTRA_STEPS = 12  # more refinement for jobs whose history is shorter than the window
UNKNOWN_LINEAR_MARGIN = 0.5  # unknown class: linear wins if its residual is below this share
SPAN_PRIOR_C = 1.0  # span prior: half of L_0 - L* in the first iteration
SPAN_PRIOR_EVIDENCE = 1.0  # span units: the prior counts as this many iterations of evidence
PRIOR_SCALE = 5.0  # the prior's total normalized reduction from iteration 0
_CLASS_CODES = {"sublinear": 1, "linear": 2}


def normalize_drops(losses: Sequence[float] | np.ndarray) -> np.ndarray:
    """Per-iteration loss reductions divided by the largest reduction seen so far.

    Element ``k - 1`` is ``(L[k-1] - L[k]) / max_{i <= k} (L[i-1] - L[i])``; it is 0 while no
    positive reduction has been seen. Non-finite losses give 0. Length ``len(losses) - 1``.
    """
    arr = np.asarray(losses, dtype=np.float64)
    if arr.size < 2:
        return np.zeros(0)
    drops = np.nan_to_num(arr[:-1] - arr[1:], nan=0.0, posinf=0.0, neginf=0.0)
    best = np.maximum.accumulate(np.maximum(drops, 0.0))
    out = np.zeros_like(drops)
    np.divide(drops, best, out=out, where=best > 0)
    return out


def prior_reduction(done: np.ndarray | float, more: np.ndarray | float) -> np.ndarray:
    """The prior's normalized reduction over ``more`` iterations after ``done`` iterations.

    The prior assumes normalized per-iteration reductions ``~ (1 + x / s)^-2`` (first one about
    1, total ``s = PRIOR_SCALE``): cumulative ``F(x) = s x / (s + x)``. Optimistic for new jobs,
    as the paper relies on: their first iterations give the largest normalized drops.
    """
    x0 = np.maximum(np.asarray(done, dtype=np.float64), 0.0)
    x1 = x0 + np.maximum(np.asarray(more, dtype=np.float64), 0.0)
    s = PRIOR_SCALE
    return s * x1 / (s + x1) - s * x0 / (s + x0)


def _prior_pace(last_drop: np.ndarray, span: np.ndarray, done: np.ndarray) -> np.ndarray:
    """``min(1, observed / prior)``: the job's last reduction (units of ``span``) over the
    span prior's reduction in that iteration (iteration ``done``); 1 where ``span`` is 0.
    A last reduction that is unknown (a non-finite loss: ``last_drop`` 0) counts as none.

    A job whose loss fell 99% in its first iteration and 1% of that in its second has
    converged; the prior alone would promise it a third of its span.
    """
    c = SPAN_PRIOR_C
    step = done / (c + done) - np.maximum(done - 1, 0) / (c + np.maximum(done - 1, 0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pace = np.where((span > 0) & (step > 0), last_drop / span / step, 1.0)
    return np.where(np.isnan(pace), 1.0, np.minimum(np.maximum(pace, 0.0), 1.0))  # an overflow is fast: 1


def span_prior_reduction(done: np.ndarray | float, more: np.ndarray | float) -> np.ndarray:
    """The prior in units of ``L_0 - L*``: cumulative ``x / (c + x)`` (``c = SPAN_PRIOR_C``)."""
    x0 = np.maximum(np.asarray(done, dtype=np.float64), 0.0)
    x1 = x0 + np.maximum(np.asarray(more, dtype=np.float64), 0.0)
    c = SPAN_PRIOR_C
    return x1 / (c + x1) - x0 / (c + x0)


# --- fitted curves ------------------------------------------------------------------------


@dataclass(frozen=True)
class CurveFit:
    """Fitted loss curves of a batch of jobs; every array has shape ``(jobs,)``.

    Attributes:
        family: ``FAMILY_SUBLINEAR``, ``FAMILY_LINEAR``, ``FAMILY_PRIOR`` (too little
            history: the prior is used) or ``FAMILY_FLAT`` (no decrease: no reduction).
        amp: ``A`` in loss units (the curve is ``floor + amp * h(u)``).
        p1, p2: the sublinear shape ``1 / (1 + p1 u + p2 u^2)``, or ``r, 0`` for the linear
            shape ``exp(-r u)``; ``u`` counts iterations after the last observed one.
        floor: the fitted asymptote in loss units.
        last: the last observed loss (predictions are anchored to it).
        n: losses seen (iterations run).
        max_drop: the largest one-iteration reduction seen (the normalizer; 0 if none).
        rms: weighted RMS residual of the fit, relative to the window's loss range.
        last_drop: the reduction of the last iteration in loss units (0 if it was not a
            reduction): the job's current pace, which bounds the young-job prior's weight.
        span: the normalizer of :meth:`reduction` in loss units: ``L_0 - L*`` (first loss minus
            the estimated final loss, the paper's normalized-loss scale), or 0 for SLAQ's
            max-drop normalization.
    """

    family: np.ndarray
    amp: np.ndarray
    p1: np.ndarray
    p2: np.ndarray
    floor: np.ndarray
    last: np.ndarray
    n: np.ndarray
    max_drop: np.ndarray
    rms: np.ndarray
    last_drop: np.ndarray
    span: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.family.shape[0])

    def take(self, rows: np.ndarray) -> CurveFit:
        """The fits of the jobs ``rows`` (an index array), in that order."""
        parts: dict[str, Any] = {f: None if getattr(self, f) is None else getattr(self, f)[rows]
                                 for f in self.__dataclass_fields__}
        return CurveFit(**parts)

    def _col(self, arr: np.ndarray, more: np.ndarray) -> np.ndarray:
        return arr.reshape(arr.shape + (1,) * (more.ndim - 1)) if more.ndim > 1 else arr

    def drop(self, more: np.ndarray | float) -> np.ndarray:
        """Predicted loss reduction (loss units) after ``more`` further iterations.

        ``more`` broadcasts against ``(jobs,)`` or has shape ``(jobs, K)``. Prior jobs use the
        prior scaled by ``max_drop`` (0 if no reduction has been seen).
        """
        m = np.maximum(np.asarray(more, dtype=np.float64), 0.0)
        m = np.broadcast_to(m, self.family.shape) if m.ndim == 0 else m
        fam, p1, p2 = (self._col(a, m) for a in (self.family, self.p1, self.p2))
        amp, max_drop, n = (self._col(a, m) for a in (self.amp, self.max_drop, self.n))
        with np.errstate(over="ignore"):  # extreme histories (1e300 losses): capped below
            fitted = amp * (1.0 - shape(fam, p1, p2, m))
            is_prior = fam == FAMILY_PRIOR
            prior = max_drop * prior_reduction(np.maximum(n - 1, 0), m) if is_prior.any() else 0.0
            out = np.where(is_prior, prior, np.where(fam == FAMILY_FLAT, 0.0, fitted))
            out = np.minimum(out, m * max_drop * 1.5 + 0.0)
        return zero_nonfinite(np.maximum(out, 0.0))

    def predict_loss(self, more: np.ndarray | float) -> np.ndarray:
        """Predicted loss after ``more`` further iterations, anchored at the last loss."""
        m = np.asarray(more, dtype=np.float64)
        return self._col(self.last, m) - self.drop(m)

    def reduction(self, more: np.ndarray | float) -> np.ndarray:
        """Predicted *normalized* reduction (units of ``max_drop``) after ``more`` iterations.

        This is SLAQ's currency for comparing jobs. Jobs without a usable history get the
        optimistic prior (:func:`prior_reduction`), also when ``max_drop`` is still 0.
        """
        m = np.maximum(np.asarray(more, dtype=np.float64), 0.0)
        m = np.broadcast_to(m, self.family.shape) if m.ndim == 0 else m
        fam, max_drop, n = (self._col(a, m) for a in (self.family, self.max_drop, self.n))
        span = np.zeros_like(max_drop) if self.span is None else self._col(self.span, m)
        unit = np.where(span > 0, span, max_drop)
        with np.errstate(divide="ignore", invalid="ignore"):
            fitted = np.where(unit > 0, self.drop(m) / unit, 0.0)
        done = np.maximum(n - 1, 0)
        has_span = span > 0
        if has_span.all():
            prior = span_prior_reduction(done, m)
        elif not has_span.any():
            prior = prior_reduction(done, m)
        else:
            prior = np.where(has_span, span_prior_reduction(done, m), prior_reduction(done, m))
        # span units: the fit of a short history is blended with the prior (little evidence
        # yet), whose weight shrinks when the job's last reduction was below the prior's pace
        w = np.where(span > 0, SPAN_PRIOR_EVIDENCE / (SPAN_PRIOR_EVIDENCE + done), 0.0)
        if has_span.any():
            w = w * _prior_pace(self._col(self.last_drop, m), span, done)
        out = np.where(fam == FAMILY_PRIOR, prior, (1.0 - w) * fitted + w * prior)
        return zero_nonfinite(np.maximum(out, 0.0))


def fit_windows(
    values: np.ndarray,
    mask: np.ndarray,
    n: np.ndarray,
    max_drop: np.ndarray,
    classes: np.ndarray,
    decay: float = DEFAULT_DECAY,
    steps: int = REFINE_STEPS,
) -> CurveFit:
    """Fit every job's window (see :func:`tail_windows`) at once, from scratch.

    Args:
        values, mask: ``(jobs, window)`` right-aligned losses and their validity.
        n: history lengths; max_drop: largest one-iteration reduction per job.
        classes: per job 1 (sublinear), 2 (linear) or 0 (unknown: least residual wins).
        decay: e-folding length, in iterations, of the exponentially decaying weights.
        steps: Levenberg-Marquardt refinement steps after the grid search.
    """
    window = values.shape[1]
    n = np.asarray(n)
    max_drop = np.asarray(max_drop, dtype=np.float64)
    mask = _skip_initial_loss(mask, n)
    valid_n = mask.sum(axis=1)
    last, last_drop = _last_losses(values, mask)
    scale, fit_ok = _loss_scale(values, mask, last)
    fit_ok &= (valid_n >= MIN_FIT_POINTS) & (max_drop > 0)
    w = np.where(mask, _weights(window, float(decay))[None, :], 0.0)
    y = np.where(mask, (values - last[:, None]) / scale[:, None], 0.0)
    s_w = np.maximum(w.sum(axis=1), 1e-300)
    fam, amp, off, p1, p2, sse = _fit_families(y, w, mask, valid_n, fit_ok, np.asarray(classes), steps)
    found = fit_ok & np.isfinite(sse) & (amp > 0)
    family = np.where(found, fam, FAMILY_FLAT)
    family = np.where(valid_n < MIN_FIT_POINTS, FAMILY_PRIOR, family)
    family = np.where((family == FAMILY_PRIOR) & (n >= MIN_FIT_POINTS) & (max_drop <= 0), FAMILY_FLAT,
                      family).astype(np.int8)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # extreme losses: capped
        rms = np.sqrt(np.maximum(sse, 0.0) / s_w)
        amp_loss = amp * scale
        floor = last + off * scale
    return CurveFit(
        family=family,
        amp=zero_nonfinite(np.where(found, amp_loss, 0.0)),
        p1=zero_nonfinite(np.where(found, p1, 0.0)),
        p2=zero_nonfinite(np.where(found, p2, 0.0)),
        floor=zero_nonfinite(np.where(found, floor, last)),
        last=zero_nonfinite(last),
        n=n.astype(np.float64),
        max_drop=zero_nonfinite(max_drop),
        rms=zero_nonfinite(np.where(found, rms, 0.0)),
        last_drop=last_drop,
    )


@lru_cache(maxsize=16)
def _weights(window: int, decay: float) -> np.ndarray:
    """The weights of a window's points, oldest first: ``exp(-age / decay)`` (shared: not to
    be changed)."""
    age = np.arange(window - 1, -1, -1, dtype=np.float64)
    return np.exp(-age / max(decay, 1e-6))


def _skip_initial_loss(mask: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``mask`` without the initial model's loss (iteration 0) in histories longer than
    ``SKIP_INITIAL_AFTER``: it is often atypical (e.g. hinge loss 1 at ``w = 0``)."""
    first = mask.shape[1] - n
    drop = ((n > SKIP_INITIAL_AFTER) & (first >= 0)).nonzero()[0]
    if drop.size:
        mask = mask.copy()
        mask[drop, first[drop]] = False
    return mask


def _last_losses(values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per window, the last loss (0 if missing) and the last iteration's reduction (0 if it
    was not a reduction or a loss is missing)."""
    jobs, window = values.shape
    last = np.where(mask[:, -1], values[:, -1], 0.0) if window else np.zeros(jobs)
    if window < 2:
        return last, np.zeros(jobs)
    with np.errstate(invalid="ignore", over="ignore"):
        last_drop = np.where(mask[:, -2] & mask[:, -1], values[:, -2] - values[:, -1], 0.0)
    return last, np.maximum(zero_nonfinite(last_drop), 0.0)


def _loss_scale(values: np.ndarray, mask: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per window, the range of its losses (1 if none: the unit the fit works in) and whether
    that range is wide enough to fit next to the last loss."""
    big = np.where(mask, values, -np.inf).max(axis=1, initial=-np.inf)
    small = np.where(mask, values, np.inf).min(axis=1, initial=np.inf)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, 1e308 - -1e308
        span = np.where(np.isfinite(big - small), big - small, 0.0)
    return np.where(span > 0, span, 1.0), span > 1e-12 * np.abs(last)


def _fit_families(
    y: np.ndarray, w: np.ndarray, mask: np.ndarray, valid_n: np.ndarray, fit_ok: np.ndarray,
    classes: np.ndarray, steps: int,
) -> tuple[np.ndarray, ...]:
    """Fit the jobs ``fit_ok`` by their class's family; an unknown class is fitted as both
    and linear must fit clearly better. Returns ``(family, amp, offset, p1, p2, sse)``."""
    jobs = y.shape[0]
    unknown = classes == 0
    fam = np.where(unknown, FAMILY_SUBLINEAR, classes).astype(np.int8)
    amp, off, p1, p2 = np.zeros(jobs), np.zeros(jobs), np.zeros(jobs), np.zeros(jobs)
    sse = np.full(jobs, np.inf)
    for kind, members in ((FAMILY_SUBLINEAR, fam == FAMILY_SUBLINEAR),
                          (FAMILY_LINEAR, (fam == FAMILY_LINEAR) | unknown)):
        idx = (members & fit_ok).nonzero()[0]
        if not idx.size:
            continue
        f_p1, f_p2, f_amp, f_off, f_sse = _fit_family(kind, y[idx], w[idx], mask[idx], valid_n[idx], steps)
        if kind == FAMILY_SUBLINEAR:
            take = np.ones(idx.size, bool)
        else:
            take = ~unknown[idx] | (f_sse < UNKNOWN_LINEAR_MARGIN * sse[idx])
        t = idx[take]
        amp[t], off[t], p1[t], p2[t], sse[t] = f_amp[take], f_off[take], f_p1[take], f_p2[take], f_sse[take]
        fam[t] = kind
    return fam, amp, off, p1, p2, sse


def _fit_family(
    kind: int, y: np.ndarray, w: np.ndarray, mask: np.ndarray, valid_n: np.ndarray, steps: int,
) -> tuple[np.ndarray, ...]:
    """One family's grid search then refinement for the given windows:
    ``(p1, p2, amp, offset, sse)``. Young jobs (windows not yet full: the largest predicted
    gains, and few) get more refinement steps."""
    sub = kind == FAMILY_SUBLINEAR
    f_p1, f_p2, f_amp, f_off, f_sse = coarse(y, w, valid_n, kind)
    fin = np.isfinite(f_sse)
    young = fin & (valid_n < y.shape[1])
    for extra, rows in ((steps, fin), (YOUNG_EXTRA_STEPS * (steps > 0), young)):
        if extra > 0 and rows.any():
            f_p1[rows], f_p2[rows], f_amp[rows], f_off[rows], f_sse[rows] = refine(
                f_p1[rows], f_p2[rows], sub, y[rows], w[rows], mask[rows],
                valid_n[rows] >= MIN_FULL_POINTS, extra,
            )
    return f_p1, f_p2, f_amp, f_off, f_sse


def class_codes(classes: Sequence[str]) -> np.ndarray:
    """Convergence class names as codes for :func:`fit_windows` (unknown names give 0)."""
    return np.fromiter(map(_CLASS_CODES.get, classes, repeat(0)), dtype=np.int8, count=len(classes))


def fit_curves(
    histories: Sequence[Sequence[float] | np.ndarray],
    classes: Sequence[str] | None = None,
    window: int = DEFAULT_WINDOW,
    decay: float = DEFAULT_DECAY,
    steps: int = REFINE_STEPS,
) -> CurveFit:
    """Fit the loss histories of many jobs (vectorized across jobs).

    Args:
        histories: per job, its loss of every iteration so far (any length, may be empty).
        classes: per job ``"sublinear"``, ``"linear"`` or ``"unknown"`` (default: unknown).
        window: how many of the most recent losses are fitted.
        decay: e-folding length, in iterations, of the weights (recent points count most).
        steps: Gauss-Newton refinement steps after the grid search (more: closer fits).
    """
    values, mask, n, max_drop = history_windows(histories, window)
    codes = class_codes(classes) if classes is not None else np.zeros(len(histories), np.int8)
    return fit_windows(values, mask, n, max_drop, codes, decay, steps)
