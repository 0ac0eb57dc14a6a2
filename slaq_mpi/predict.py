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

Losses are *normalized* as in the paper: a job's loss reduction is divided by the largest
one-iteration reduction seen so far for that job (:func:`normalize_drops`). Jobs with too
few losses, or whose losses never decreased, fall back to a prior; nothing returns NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np

__all__ = [
    "FAMILY_FLAT",
    "FAMILY_LINEAR",
    "FAMILY_PRIOR",
    "FAMILY_SUBLINEAR",
    "CurveFit",
    "fit_curves",
    "fit_windows",
    "class_codes",
    "history_windows",
    "max_drops",
    "normalize_drops",
    "prior_reduction",
    "tail_windows",
]

FAMILY_PRIOR = 0
FAMILY_SUBLINEAR = 1
FAMILY_LINEAR = 2
FAMILY_FLAT = 3

DEFAULT_WINDOW = 16
DEFAULT_DECAY = 6.0
SKIP_INITIAL_AFTER = 6  # the initial model's loss is left out of fits of longer histories
MIN_FIT_POINTS = 3  # fewer losses: the prior
MIN_FULL_POINTS = 5  # fewer losses: one nonlinear parameter only
REFINE_STEPS = 3
YOUNG_EXTRA_STEPS = 12  # more refinement for jobs whose history is shorter than the window
UNKNOWN_LINEAR_MARGIN = 0.5  # unknown class: linear wins if its residual is below this share
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


# --- curve shapes and the coarse grid of nonlinear parameters ------------------------------


def _shape(family: np.ndarray, p1: np.ndarray, p2: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Curve shapes ``h(u)`` with ``h(0) = 1``, broadcasting the parameters against ``u``.

    Sublinear: ``1 / (1 + p1 u + p2 u^2)`` (0 where that is not positive); linear: ``exp(-p1 u)``.
    """
    sub = family == FAMILY_SUBLINEAR
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = 1.0 + (np.where(sub, p1, 0.0) + np.where(sub, p2, 0.0) * u) * u
        h_sub = np.where(q > 0, 1.0 / q, 0.0)
        h_lin = np.exp(-np.where(sub, 0.0, p1) * u)
    return np.where(sub, h_sub, h_lin)


@dataclass(frozen=True)
class _Grid:
    family: np.ndarray  # (G,) FAMILY_SUBLINEAR or FAMILY_LINEAR
    p1: np.ndarray  # 1/k1 + 1/k2 (sublinear) or r (linear)
    p2: np.ndarray  # 1/(k1 k2) (sublinear) or 0
    pole: np.ndarray  # 1/k1: the shape has a pole at u = -k1 (sublinear), else 0
    simple: np.ndarray  # (G,) one nonlinear parameter only (usable with 3-4 points)
    basis: np.ndarray  # (G, W): the shape at u = -(W-1) .. 0
    basis_sq: np.ndarray


@lru_cache(maxsize=8)
def _grid(window: int) -> _Grid:
    nus = np.concatenate([3.0 ** -np.arange(0, 9, dtype=np.float64) * 1.2, [0.0]])
    pairs = [(a, b) for i, a in enumerate(nus) for b in nus[i:] if a > 0]
    rates = np.geomspace(1.0e-3, 3.0, 14)
    family = np.concatenate(
        [np.full(len(pairs), FAMILY_SUBLINEAR), np.full(len(rates), FAMILY_LINEAR)]
    ).astype(np.int8)
    p1 = np.concatenate([[a + b for a, b in pairs], rates])
    p2 = np.concatenate([[a * b for a, b in pairs], np.zeros(len(rates))])
    pole = np.concatenate([[a for a, _ in pairs], np.zeros(len(rates))])
    u = np.arange(-(window - 1), 1, dtype=np.float64)
    basis = _shape(family[:, None], p1[:, None], p2[:, None], u[None, :])
    return _Grid(family, p1, p2, pole, p2 == 0, basis, basis * basis)


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

    def __len__(self) -> int:
        return int(self.family.shape[0])

    def take(self, rows: np.ndarray) -> CurveFit:
        """The fits of the jobs ``rows`` (an index array), in that order."""
        return CurveFit(**{f: getattr(self, f)[rows] for f in self.__dataclass_fields__})

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
        fitted = amp * (1.0 - _shape(fam, p1, p2, m))
        prior = max_drop * prior_reduction(np.maximum(n - 1, 0), m)
        out = np.where(fam == FAMILY_PRIOR, prior, np.where(fam == FAMILY_FLAT, 0.0, fitted))
        out = np.minimum(out, m * max_drop * 1.5 + 0.0)
        return np.nan_to_num(np.maximum(out, 0.0), nan=0.0, posinf=0.0)

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
        with np.errstate(divide="ignore", invalid="ignore"):
            fitted = np.where(max_drop > 0, self.drop(m) / max_drop, 0.0)
        prior = prior_reduction(np.maximum(n - 1, 0), m)
        out = np.where(fam == FAMILY_PRIOR, prior, fitted)
        return np.nan_to_num(np.clip(out, 0.0, None), nan=0.0, posinf=0.0)


# --- building windows from histories ------------------------------------------------------


def _flat(histories: Sequence[Sequence[float] | np.ndarray], count: int) -> np.ndarray:
    return np.fromiter(chain.from_iterable(histories), dtype=np.float64, count=count)


def tail_windows(
    histories: Sequence[Sequence[float] | np.ndarray], window: int = DEFAULT_WINDOW
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-aligned windows of the last ``window`` losses of every history.

    Returns ``(values, mask, n)``: ``values`` and ``mask`` of shape ``(jobs, window)`` (the
    last loss in the last column; missing or non-finite entries masked) and history lengths.
    """
    jobs = len(histories)
    n = np.fromiter(map(len, histories), dtype=np.int64, count=jobs)
    take = np.minimum(n, window)
    flat = _flat([h[-window:] for h in histories], int(take.sum()))
    mask = np.arange(window)[None, :] >= (window - take)[:, None]
    values = np.zeros((jobs, window))
    values[mask] = flat
    mask &= np.isfinite(values)
    values[~mask] = 0.0
    return values, mask, n


def max_drops(
    histories: Sequence[Sequence[float] | np.ndarray],
    start: np.ndarray | None = None,
    previous: np.ndarray | None = None,
) -> np.ndarray:
    """The largest one-iteration loss reduction of every history (0 if none).

    With ``start`` (per job, an index into its history) and ``previous`` (the result for the
    history up to ``start``), only losses from ``start - 1`` on are read: incremental update.
    """
    jobs = len(histories)
    if start is None:
        start = np.zeros(jobs, dtype=np.int64)
        previous = np.zeros(jobs)
    lo = np.maximum(np.asarray(start, dtype=np.int64) - 1, 0)
    prev = np.zeros(jobs) if previous is None else np.asarray(previous, dtype=np.float64)
    n = np.fromiter((len(h) for h in histories), dtype=np.int64, count=jobs)
    seg = np.maximum(n - lo, 0)
    lo_list = lo.tolist()
    flat = _flat([h[s:] for h, s in zip(histories, lo_list, strict=True)], int(seg.sum()))
    drops = np.zeros(flat.shape[0])
    if flat.shape[0] > 1:
        drops[1:] = flat[:-1] - flat[1:]
    starts = np.cumsum(seg) - seg
    has = seg > 0
    drops[starts[has]] = 0.0
    drops = np.where(np.isfinite(drops), np.maximum(drops, 0.0), 0.0)
    out = prev.copy()
    if has.any():
        out[has] = np.maximum(prev[has], np.maximum.reduceat(drops, starts[has]))
    return out


def history_windows(
    histories: Sequence[Sequence[float] | np.ndarray], window: int = DEFAULT_WINDOW
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``tail_windows`` plus ``max_drops``: ``(values, mask, n, max_drop)``."""
    values, mask, n = tail_windows(histories, window)
    return values, mask, n, max_drops(histories)


# --- the batched fit ----------------------------------------------------------------------


def _coarse(
    y: np.ndarray, w: np.ndarray, valid_n: np.ndarray, family: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Best grid point of ``family`` per job: ``(p1, p2, amp, offset, sse)`` (sse inf: none)."""
    jobs, window = y.shape
    grid = _grid(window)
    cols = np.flatnonzero(grid.family == family)
    basis = grid.basis[cols]
    wy = w * y
    s_w = w.sum(axis=1)[:, None]
    s_y = wy.sum(axis=1)[:, None]
    s_yy = (wy * y).sum(axis=1)[:, None]
    s_e = w @ basis.T
    s_ee = w @ grid.basis_sq[cols].T
    s_ey = wy @ basis.T
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s_w * s_ee - s_e * s_e
        amp = (s_w * s_ey - s_e * s_y) / det
        off = (s_y - amp * s_e) / s_w
        sse = s_yy - amp * s_ey - off * s_y
        good = (det > 1e-12 * s_w * s_ee) & (amp > 0)
    short = np.flatnonzero(valid_n < window)
    if short.size:  # a pole must lie before the first point; few points: one parameter only
        nu_max = 1.0 / np.maximum(valid_n[short] - 0.75, 0.25)
        ok = grid.pole[cols][None, :] < nu_max[:, None]
        ok &= (valid_n[short, None] >= MIN_FULL_POINTS) | grid.simple[cols][None, :]
        good[short] &= ok
    sse = np.where(good, np.maximum(sse, 0.0), np.inf)
    best = np.argmin(sse, axis=1)
    rows = np.arange(jobs)
    return grid.p1[cols][best], grid.p2[cols][best], amp[rows, best], off[rows, best], sse[rows, best]


def _project(
    p1: np.ndarray, p2: np.ndarray, sub: bool, u: np.ndarray, w: np.ndarray, wy: np.ndarray,
    s_w: np.ndarray, s_y: np.ndarray, s_yy: np.ndarray, valid: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Shapes and the optimal linear parameters for nonlinear ``(p1, p2)`` per job.

    Returns ``(h, amp, off, sse, dh1, dh2)``; ``sse`` is inf where the shape has a pole in the
    window or the best amplitude is not positive.
    """
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if sub:
            q = 1.0 + u * (p1[:, None] + p2[:, None] * u)
            h = 1.0 / q
            dh1 = -u * h * h
            dh2 = dh1 * u
            bad = ((q <= 0) & valid).any(axis=1)
        else:
            h = np.exp(-p1[:, None] * u)
            dh1 = -u * h
            dh2 = dh1
            bad = ~np.isfinite(h).all(axis=1)
        s_h = np.einsum("jw,jw->j", w, h)
        s_hh = np.einsum("jw,jw->j", w * h, h)
        s_hy = np.einsum("jw,jw->j", wy, h)
        det = s_w * s_hh - s_h * s_h
        amp = (s_w * s_hy - s_h * s_y) / det
        off = (s_y - amp * s_h) / s_w
        sse = s_yy - amp * s_hy - off * s_y
    bad |= ~np.isfinite(sse) | ~(det > 1e-12 * s_w * s_hh) | ~(amp > 0)
    return h, amp, off, np.where(bad, np.inf, np.maximum(sse, 0.0)), dh1, dh2


def _kaufman(
    g: np.ndarray, g_same: np.ndarray, w: np.ndarray, wh: np.ndarray, wr: np.ndarray,
    gram: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For a derivative column ``g``: its projected squared norm, its product with the
    residual, and its products with ``h`` and ``1`` (weighted by ``w``)."""
    s_w, s_h, s_hh = gram
    hg = np.einsum("jw,jw->j", wh, g)
    one = np.einsum("jw,jw->j", w, g)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s_w * s_hh - s_h * s_h
        inside = (hg * (s_w * hg - s_h * one) + one * (s_hh * one - s_h * hg)) / det
        norm = np.einsum("jw,jw->j", w * g, g_same) - inside
    return norm, np.einsum("jw,jw->j", wr, g), hg, one


def _refine(
    p1: np.ndarray, p2: np.ndarray, sub: bool, y: np.ndarray, w: np.ndarray, valid: np.ndarray,
    free2: np.ndarray, steps: int,
) -> tuple[np.ndarray, ...]:
    """Batched variable-projection Gauss-Newton (Levenberg-Marquardt damped) on the nonlinear
    parameters of one family's jobs; the amplitude and offset are always the exact weighted
    least-squares optimum for the current shape.

    Returns ``(p1, p2, amp, off, sse)``. Bounds: sublinear ``p1, p2 >= 0`` (``p2`` stays 0
    unless ``free2``); linear ``1e-5 <= p1 <= 5``.
    """
    jobs, window = y.shape
    u = np.arange(-(window - 1), 1, dtype=np.float64)[None, :]
    wy = w * y
    s_w = w.sum(axis=1)
    s_y = wy.sum(axis=1)
    s_yy = np.einsum("jw,jw->j", wy, y)
    args = (sub, u, w, wy, s_w, s_y, s_yy, valid)
    h, amp, off, sse, dh1, dh2 = _project(p1, p2, *args)
    lam = np.full(jobs, 1e-3)
    two = sub & free2
    for _ in range(steps):
        # Kaufman's Jacobian: derivative columns with their part in span{h, 1} removed
        wh = w * h
        s_h = wh.sum(axis=1)
        gram = (s_w, s_h, np.einsum("jw,jw->j", wh, h))
        wr = w * (amp[:, None] * h + off[:, None] - y)
        g1 = amp[:, None] * dh1
        m11, r1, hg1, one1 = _kaufman(g1, g1, w, wh, wr, gram)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if sub:
                g2 = amp[:, None] * dh2 * two[:, None]
                m22, r2, hg2, one2 = _kaufman(g2, g2, w, wh, wr, gram)
                det = gram[0] * gram[2] - s_h * s_h
                m12 = np.einsum("jw,jw->j", w * g1, g2) - (
                    hg1 * (gram[0] * hg2 - s_h * one2) + one1 * (gram[2] * one2 - s_h * hg2)) / det
                a11 = m11 * (1.0 + lam) + 1e-300
                a22 = m22 * (1.0 + lam) + 1e-300
                dt = a11 * a22 - m12 * m12
                d1 = -(a22 * r1 - m12 * r2) / dt
                d2 = np.where(two, -(a11 * r2 - m12 * r1) / dt, 0.0)
            else:
                d1 = -r1 / (m11 * (1.0 + lam) + 1e-300)
                d2 = np.zeros(jobs)
        d1 = np.nan_to_num(d1, nan=0.0, posinf=0.0, neginf=0.0)
        d2 = np.nan_to_num(d2, nan=0.0, posinf=0.0, neginf=0.0)
        if sub:
            t1, t2 = np.maximum(p1 + d1, 0.0), np.maximum(p2 + d2, 0.0)
        else:
            t1, t2 = np.clip(p1 + d1, 1e-5, 5.0), p2
        t_h, t_amp, t_off, t_sse, t_dh1, t_dh2 = _project(t1, t2, *args)
        better = t_sse < sse
        b = better[:, None]
        p1, p2 = np.where(better, t1, p1), np.where(better, t2, p2)
        amp, off = np.where(better, t_amp, amp), np.where(better, t_off, off)
        sse = np.where(better, t_sse, sse)
        h, dh1, dh2 = np.where(b, t_h, h), np.where(b, t_dh1, dh1), np.where(b, t_dh2, dh2)
        lam = np.where(better, lam * 0.3, lam * 10.0)
    return p1, p2, amp, off, sse


def fit_windows(
    values: np.ndarray,
    mask: np.ndarray,
    n: np.ndarray,
    max_drop: np.ndarray,
    classes: np.ndarray,
    decay: float = DEFAULT_DECAY,
    steps: int = REFINE_STEPS,
) -> CurveFit:
    """Fit every job's window (see :func:`tail_windows`) at once.

    Args:
        values, mask: ``(jobs, window)`` right-aligned losses and their validity.
        n: history lengths; max_drop: largest one-iteration reduction per job.
        classes: per job 1 (sublinear), 2 (linear) or 0 (unknown: least residual wins).
        decay: e-folding length, in iterations, of the exponentially decaying weights.
        steps: Levenberg-Marquardt refinement steps after the grid search.
    """
    jobs, window = values.shape
    n = np.asarray(n)
    max_drop = np.asarray(max_drop, dtype=np.float64)
    classes = np.asarray(classes)
    # the loss of the initial model (iteration 0) is often atypical (e.g. hinge loss 1 at w = 0)
    first = window - n
    drop = np.flatnonzero((n > SKIP_INITIAL_AFTER) & (first >= 0))
    if drop.size:
        mask = mask.copy()
        mask[drop, first[drop]] = False
    valid_n = mask.sum(axis=1)
    last = np.where(mask[:, -1], values[:, -1], 0.0) if window else np.zeros(jobs)
    big = np.where(mask, values, -np.inf).max(axis=1, initial=-np.inf)
    small = np.where(mask, values, np.inf).min(axis=1, initial=np.inf)
    with np.errstate(invalid="ignore"):
        span = np.where(np.isfinite(big - small), big - small, 0.0)
    scale = np.where(span > 0, span, 1.0)
    fit_ok = (valid_n >= MIN_FIT_POINTS) & (span > 1e-12 * np.abs(last)) & (max_drop > 0)
    age = np.arange(window - 1, -1, -1, dtype=np.float64)
    w = np.where(mask, np.exp(-age / max(decay, 1e-6))[None, :], 0.0)
    y = np.where(mask, (values - last[:, None]) / scale[:, None], 0.0)

    unknown = classes == 0
    fam = np.where(unknown, FAMILY_SUBLINEAR, classes).astype(np.int8)
    amp, off, p1, p2 = np.zeros(jobs), np.zeros(jobs), np.zeros(jobs), np.zeros(jobs)
    sse = np.full(jobs, np.inf)
    # one pass per family; an unknown class is fitted as both and linear must fit clearly better
    for family, members in ((FAMILY_SUBLINEAR, fam == FAMILY_SUBLINEAR),
                            (FAMILY_LINEAR, (fam == FAMILY_LINEAR) | unknown)):
        idx = np.flatnonzero(members & fit_ok)
        if not idx.size:
            continue
        sub = family == FAMILY_SUBLINEAR
        f_p1, f_p2, f_amp, f_off, f_sse = _coarse(y[idx], w[idx], valid_n[idx], family)
        fin = np.isfinite(f_sse)
        # young jobs (short histories: the largest predicted gains, and few) get more steps
        for extra, rows in ((steps, fin), (YOUNG_EXTRA_STEPS * (steps > 0), fin & (valid_n[idx] < window))):
            if extra > 0 and rows.any():
                sel = idx[rows]
                f_p1[rows], f_p2[rows], f_amp[rows], f_off[rows], f_sse[rows] = _refine(
                    f_p1[rows], f_p2[rows], sub, y[sel], w[sel], mask[sel], valid_n[sel] >= MIN_FULL_POINTS,
                    extra,
                )
        take = np.ones(idx.size, bool) if sub else ~unknown[idx] | (f_sse < UNKNOWN_LINEAR_MARGIN * sse[idx])
        t = idx[take]
        amp[t], off[t], p1[t], p2[t], sse[t] = f_amp[take], f_off[take], f_p1[take], f_p2[take], f_sse[take]
        fam[t] = family
    found = fit_ok & np.isfinite(sse)
    found &= amp > 0
    family = np.where(found, fam, FAMILY_FLAT)
    family = np.where(valid_n < MIN_FIT_POINTS, FAMILY_PRIOR, family)
    family = np.where((family == FAMILY_PRIOR) & (n >= MIN_FIT_POINTS) & (max_drop <= 0), FAMILY_FLAT,
                      family).astype(np.int8)
    with np.errstate(invalid="ignore", divide="ignore"):
        rms = np.sqrt(np.maximum(sse, 0.0) / np.maximum(w.sum(axis=1), 1e-300))
    return CurveFit(
        family=family,
        amp=np.nan_to_num(np.where(found, amp * scale, 0.0), nan=0.0, posinf=0.0, neginf=0.0),
        p1=np.nan_to_num(np.where(found, p1, 0.0)),
        p2=np.nan_to_num(np.where(found, p2, 0.0)),
        floor=np.nan_to_num(np.where(found, last + off * scale, last)),
        last=np.nan_to_num(last),
        n=n.astype(np.float64),
        max_drop=np.nan_to_num(max_drop),
        rms=np.nan_to_num(np.where(found, rms, 0.0), posinf=0.0),
    )


def class_codes(classes: Sequence[str]) -> np.ndarray:
    """Convergence class names as codes for :func:`fit_windows` (unknown names give 0)."""
    return np.fromiter((_CLASS_CODES.get(c, 0) for c in classes), dtype=np.int8, count=len(classes))


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
