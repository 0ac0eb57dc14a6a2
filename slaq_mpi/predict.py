"""Loss-curve prediction for many jobs at once (SLAQ's quality model, no MPI).

For every job the recent loss history (a window of the last ``window`` losses) is fitted
with exponentially decaying weights (recent points count most) by one of two families:

* sublinear (first-order methods): ``f(k) = 1 / (a k^2 + b k + c) + d``, written around the
  last observed iteration ``k_n`` (``u = k - k_n``) as ``f = d + A / ((1 + u/k1)(1 + u/k2))``
  (``k1 <= k2``, ``k2`` may be infinite: ``f ~ 1/k``);
* linear / superlinear (L-BFGS, EM, Lloyd): ``f(k) = mu^(k - b) + c``, i.e.
  ``f = c + A * exp(-r u)`` with ``mu = exp(-r)``.

The fit is a *variable projection* solved for all jobs together: for each point of a fixed
grid of the nonlinear parameters (``1/k1, 1/k2`` or ``r``) the linear parameters ``(A, d)``
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

DEFAULT_WINDOW = 32
DEFAULT_DECAY = 8.0
MIN_FIT_POINTS = 3  # fewer losses: the prior
MIN_FULL_POINTS = 5  # fewer losses: one nonlinear parameter only
REFINE_STEPS = 6
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

    Sublinear: ``1 / ((1 + p1 u)(1 + p2 u))`` (0 past a pole); linear: ``exp(-p1 u)``.
    """
    sub = family == FAMILY_SUBLINEAR
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q1 = 1.0 + np.where(sub, p1, 0.0) * u
        q2 = 1.0 + np.where(sub, p2, 0.0) * u
        h_sub = np.where((q1 > 0) & (q2 > 0), 1.0 / (q1 * q2), 0.0)
        h_lin = np.exp(-np.where(sub, 0.0, p1) * u)
    return np.where(sub, h_sub, h_lin)


@dataclass(frozen=True)
class _Grid:
    family: np.ndarray  # (G,) FAMILY_SUBLINEAR or FAMILY_LINEAR
    p1: np.ndarray  # nu1 = 1/k1 (sublinear) or r (linear)
    p2: np.ndarray  # nu2 <= nu1 (sublinear, 0 means k2 = inf) or 0
    simple: np.ndarray  # (G,) one nonlinear parameter only (usable with 3-4 points)
    basis: np.ndarray  # (G, W): the shape at u = -(W-1) .. 0
    basis_sq: np.ndarray


@lru_cache(maxsize=8)
def _grid(window: int) -> _Grid:
    nus = np.concatenate([2.0 ** -np.arange(0, 13, dtype=np.float64) * 1.2, [0.0]])
    pairs = [(a, b) for i, a in enumerate(nus) for b in nus[i:] if a > 0]
    rates = np.geomspace(1.0e-3, 3.0, 20)
    family = np.concatenate(
        [np.full(len(pairs), FAMILY_SUBLINEAR), np.full(len(rates), FAMILY_LINEAR)]
    ).astype(np.int8)
    p1 = np.concatenate([[a for a, _ in pairs], rates])
    p2 = np.concatenate([[b for _, b in pairs], np.zeros(len(rates))])
    u = np.arange(-(window - 1), 1, dtype=np.float64)
    basis = _shape(family[:, None], p1[:, None], p2[:, None], u[None, :])
    return _Grid(family, p1, p2, p2 == 0, basis, basis * basis)


# --- fitted curves ------------------------------------------------------------------------


@dataclass(frozen=True)
class CurveFit:
    """Fitted loss curves of a batch of jobs; every array has shape ``(jobs,)``.

    Attributes:
        family: ``FAMILY_SUBLINEAR``, ``FAMILY_LINEAR``, ``FAMILY_PRIOR`` (too little
            history: the prior is used) or ``FAMILY_FLAT`` (no decrease: no reduction).
        amp: ``A`` in loss units (the curve is ``floor + amp * h(u)``).
        p1, p2: ``1/k1, 1/k2`` (sublinear; 0 means an infinite ``k``) or ``r, 0`` (linear).
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
    n = np.fromiter((len(h) for h in histories), dtype=np.int64, count=jobs)
    take = np.minimum(n, window)
    flat = _flat([h[len(h) - t :] for h, t in zip(histories, take.tolist(), strict=True)], int(take.sum()))
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
    y: np.ndarray, w: np.ndarray, valid_n: np.ndarray, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Best grid point per job: ``(family, p1, p2, amp, offset, sse)`` (sse inf: none)."""
    jobs, window = y.shape
    grid = _grid(window)
    wy = w * y
    s_w = w.sum(axis=1)[:, None]
    s_y = wy.sum(axis=1)[:, None]
    s_yy = (wy * y).sum(axis=1)[:, None]
    s_e = w @ grid.basis.T
    s_ee = w @ grid.basis_sq.T
    s_ey = wy @ grid.basis.T
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s_w * s_ee - s_e * s_e
        amp = (s_w * s_ey - s_e * s_y) / det
        off = (s_y - amp * s_e) / s_w
        sse = s_yy - amp * s_ey - off * s_y
        good = np.isfinite(sse) & (det > 1e-12 * s_w * s_ee) & (amp > 0)
        # a sublinear shape's pole must lie before the first point of the window
        nu_max = 1.0 / np.maximum(valid_n - 0.75, 0.25)
        good &= (grid.family[None, :] != FAMILY_SUBLINEAR) | (grid.p1[None, :] < nu_max[:, None])
    good &= (classes[:, None] == 0) | (classes[:, None] == grid.family[None, :])
    good &= (valid_n[:, None] >= MIN_FULL_POINTS) | grid.simple[None, :]
    sse = np.where(good, np.maximum(sse, 0.0), np.inf)
    best = np.argmin(sse, axis=1)
    rows = np.arange(jobs)
    return (grid.family[best], grid.p1[best], grid.p2[best], amp[rows, best], off[rows, best],
            sse[rows, best])


def _residuals(theta: np.ndarray, fam: np.ndarray, u: np.ndarray, sw: np.ndarray, y: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted residuals and shapes for parameters ``theta = (A, d, p1, p2)`` per job."""
    h = _shape(fam[:, None], theta[:, 2:3], theta[:, 3:4], u)
    return sw * (theta[:, 1:2] + theta[:, 0:1] * h - y), h


def _refine(
    theta: np.ndarray, fam: np.ndarray, y: np.ndarray, w: np.ndarray, mask: np.ndarray,
    valid_n: np.ndarray, steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Batched Levenberg-Marquardt on ``(A, d, p1, p2)`` from the grid's best point."""
    jobs, window = y.shape
    u = np.where(mask, np.arange(-(window - 1), 1, dtype=np.float64)[None, :], 0.0)
    sw = np.sqrt(w)
    sub = fam == FAMILY_SUBLINEAR
    hi1 = np.where(sub, 0.999 / np.maximum(valid_n - 1.0, 1e-3), 5.0)
    lo1 = np.where(sub, 0.0, 1e-5)
    free2 = sub & (valid_n >= MIN_FULL_POINTS)
    hi2 = np.where(free2, hi1, 0.0)
    lam = np.full(jobs, 1e-2)
    res, h = _residuals(theta, fam, u, sw, y)
    sse = (res * res).sum(axis=1)
    eye = np.eye(4)[None, :, :]
    for _ in range(steps):
        a = theta[:, 0:1]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            q1 = 1.0 + theta[:, 2:3] * u
            q2 = 1.0 + theta[:, 3:4] * u
            d1 = np.where(sub[:, None], -u * h / q1, -u * h)
            d2 = np.where(free2[:, None], -u * h / q2, 0.0)
        cols = np.stack([sw * h, sw, sw * a * d1, sw * a * d2], axis=2)
        cols = np.nan_to_num(cols, nan=0.0, posinf=0.0, neginf=0.0)
        jtj = np.einsum("jwa,jwb->jab", cols, cols)
        grad = np.einsum("jwa,jw->ja", cols, res)
        diag = np.einsum("jaa->ja", jtj)
        ridge = lam[:, None] * diag + 1e-12 * (diag.max(axis=1, keepdims=True) + 1e-30)
        damp = jtj + ridge[:, :, None] * eye
        try:
            step = np.linalg.solve(damp, -grad[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:
            break
        trial = theta + np.nan_to_num(step, nan=0.0, posinf=0.0, neginf=0.0)
        trial[:, 0] = np.maximum(trial[:, 0], 0.0)
        trial[:, 2] = np.clip(trial[:, 2], lo1, hi1)
        trial[:, 3] = np.clip(trial[:, 3], 0.0, hi2)
        t_res, t_h = _residuals(trial, fam, u, sw, y)
        t_sse = (t_res * t_res).sum(axis=1)
        ok = np.isfinite(t_sse) & (t_sse < sse)
        theta = np.where(ok[:, None], trial, theta)
        res = np.where(ok[:, None], t_res, res)
        h = np.where(ok[:, None], t_h, h)
        sse = np.where(ok, t_sse, sse)
        lam = np.where(ok, lam * 0.3, lam * 5.0)
    return theta, sse


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

    fam, p1, p2, amp, off, sse = _coarse(y, w, valid_n, classes)
    found = fit_ok & np.isfinite(sse)
    idx = np.flatnonzero(found)
    if idx.size and steps > 0:
        theta = np.stack([amp[idx], off[idx], p1[idx], p2[idx]], axis=1)
        theta, sse_ref = _refine(theta, fam[idx], y[idx], w[idx], mask[idx], valid_n[idx], steps)
        amp, off, p1, p2, sse = (a.copy() for a in (amp, off, p1, p2, sse))
        amp[idx], off[idx], p1[idx], p2[idx] = theta.T
        sse[idx] = sse_ref
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
) -> CurveFit:
    """Fit the loss histories of many jobs (vectorized across jobs).

    Args:
        histories: per job, its loss of every iteration so far (any length, may be empty).
        classes: per job ``"sublinear"``, ``"linear"`` or ``"unknown"`` (default: unknown).
        window: how many of the most recent losses are fitted.
        decay: e-folding length, in iterations, of the weights (recent points count most).
    """
    values, mask, n, max_drop = history_windows(histories, window)
    codes = class_codes(classes) if classes is not None else np.zeros(len(histories), np.int8)
    return fit_windows(values, mask, n, max_drop, codes, decay)
