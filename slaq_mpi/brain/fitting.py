"""Batched variable-projection fitting of loss windows (internals of :mod:`slaq_mpi.brain.predict`).

Both families are written around the last observed iteration (``u = k - k_n``): sublinear
``h(u) = 1 / (1 + p1 u + p2 u^2)`` and linear ``h(u) = exp(-p1 u)``; the curve is
``offset + amp * h(u)``. For fixed nonlinear parameters the linear ones have a closed form, so
a coarse grid search (:func:`coarse`) is three matrix products for all jobs, and refinement
(:func:`refine`) is Levenberg-Marquardt on the nonlinear parameters only, job by job in plain
float arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from operator import mul, neg

import numpy as np

__all__ = ["FAMILY_FLAT", "FAMILY_LINEAR", "FAMILY_PRIOR", "FAMILY_SUBLINEAR", "MIN_FULL_POINTS",
           "coarse", "refine", "shape"]

FAMILY_PRIOR = 0
FAMILY_SUBLINEAR = 1
FAMILY_LINEAR = 2
FAMILY_FLAT = 3
MIN_FULL_POINTS = 5  # fewer losses: one nonlinear parameter only


# --- curve shapes and the coarse grid of nonlinear parameters ------------------------------


def shape(family: np.ndarray, p1: np.ndarray, p2: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Curve shapes ``h(u)`` with ``h(0) = 1``, broadcasting the parameters against ``u``.

    Sublinear: ``1 / (1 + p1 u + p2 u^2)`` (0 where that is not positive); linear: ``exp(-p1 u)``.
    """
    sub = family == FAMILY_SUBLINEAR
    every, some = bool(sub.all()), bool(sub.any())
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if every:  # one family only: the other's shapes are not computed
            q = 1.0 + (p1 + p2 * u) * u
            return np.where(q > 0, 1.0 / q, 0.0)
        if not some:
            return np.exp(-p1 * u)
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
def _offsets(window: int) -> np.ndarray:
    """``u = -(window - 1) .. 0`` as a ``(1, window)`` row (shared: not to be changed)."""
    return np.arange(-(window - 1), 1, dtype=np.float64)[None, :]


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
    basis = shape(family[:, None], p1[:, None], p2[:, None], u[None, :])
    return _Grid(family, p1, p2, pole, p2 == 0, basis, basis * basis)


# --- the batched fit ----------------------------------------------------------------------


def coarse(
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
    # einsum, not BLAS: a matrix product's row can change in its last bits with the number of
    # rows (blocking), and each job's fit must not depend on which jobs share its batch
    s_e = np.einsum("jw,gw->jg", w, basis)
    s_ee = np.einsum("jw,gw->jg", w, grid.basis_sq[cols])
    s_ey = np.einsum("jw,gw->jg", wy, basis)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s_w * s_ee - s_e * s_e
        amp = (s_w * s_ey - s_e * s_y) / det
        off = (s_y - amp * s_e) / s_w
        sse = s_yy - amp * s_ey - off * s_y
        good = (det > 1e-12 * s_w * s_ee) & (amp > 0)
    short = (valid_n < window).nonzero()[0]
    if short.size:  # a pole must lie before the first point; few points: one parameter only
        nu_max = 1.0 / np.maximum(valid_n[short] - 0.75, 0.25)
        ok = grid.pole[cols][None, :] < nu_max[:, None]
        ok &= (valid_n[short, None] >= MIN_FULL_POINTS) | grid.simple[cols][None, :]
        good[short] &= ok
    sse = np.where(good, np.maximum(sse, 0.0), np.inf)
    best = np.argmin(sse, axis=1)
    rows = np.arange(jobs)
    return grid.p1[cols][best], grid.p2[cols][best], amp[rows, best], off[rows, best], sse[rows, best]


def _div(a: float, b: float) -> float:
    """``a / b`` as IEEE arithmetic gives it: a division by 0 is inf or NaN, not an error."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _exp(x: float) -> float:
    """``exp(x)``, inf where it overflows."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _finite(x: float) -> float:
    """``x``, or 0 where it is NaN or infinite."""
    return x if math.isfinite(x) else 0.0


class _Window:
    """One job's window as plain floats: its offsets ``u``, weights ``w``, values ``y`` (the
    weighted sums the projection needs are taken once) and which points are valid."""

    __slots__ = ("u", "w", "y", "wy", "valid", "s_w", "s_y", "s_yy")

    def __init__(self, u: list[float], w: list[float], y: list[float], valid: list[bool]) -> None:
        self.u, self.w, self.y, self.valid = u, w, y, valid
        self.wy = list(map(mul, w, y))
        self.s_w = sum(w)
        self.s_y = sum(self.wy)
        self.s_yy = sum(map(mul, self.wy, y))

    def project(self, sub: bool, p1: float, p2: float) -> tuple[list[float], float, float, float]:
        """The shape for nonlinear ``(p1, p2)`` and the optimal linear parameters:
        ``(h, amp, off, sse)``; ``sse`` is inf where the shape has a pole in the window or the
        best amplitude is not positive."""
        if sub:
            q = [1.0 + x * (p1 + p2 * x) for x in self.u]
            bad = min(q) <= 0 and any(v <= 0 and ok for v, ok in zip(q, self.valid, strict=True))
            try:
                h = [1.0 / v for v in q]
            except ZeroDivisionError:
                h = [_div(1.0, v) for v in q]
        else:
            h = [_exp(-p1 * x) for x in self.u]
            bad = not all(map(math.isfinite, h))
        w, s_w = self.w, self.s_w
        wh = list(map(mul, w, h))
        s_h = sum(wh)
        s_hh = sum(map(mul, wh, h))
        s_hy = sum(map(mul, self.wy, h))
        det = s_w * s_hh - s_h * s_h
        amp = _div(s_w * s_hy - s_h * self.s_y, det)
        off = _div(self.s_y - amp * s_h, s_w)
        sse = self.s_yy - amp * s_hy - off * self.s_y
        if bad or not (math.isfinite(sse) and det > 1e-12 * s_w * s_hh and amp > 0):
            return h, amp, off, math.inf
        return h, amp, off, max(sse, 0.0)

    def normal(self, sub: bool, two: bool, h: list[float], amp: float, off: float
               ) -> tuple[float, float, float, float, float]:
        """Kaufman's Gauss-Newton system at the fit (shape ``h``, ``amp``, ``off``):
        ``(m11, r1, m22, r2, m12)``, the derivative columns with their part in span{h, 1}
        removed (``m22, r2, m12`` are 0 for the linear family)."""
        u, w, y, s_w = self.u, self.w, self.y, self.s_w
        # the shape's derivatives by p1 (and p2: dh1 * u)
        dh1 = [-x * v * v for x, v in zip(u, h, strict=True)] if sub else list(map(mul, map(neg, u), h))
        wh = list(map(mul, w, h))
        s_h = sum(wh)
        s_hh = sum(map(mul, wh, h))
        wr = [wi * (amp * hi + off - yi) for wi, hi, yi in zip(w, h, y, strict=True)]
        det = s_w * s_hh - s_h * s_h

        def kaufman(g: list[float]) -> tuple[float, float, float, float, list[float]]:
            hg = sum(map(mul, wh, g))
            one = sum(map(mul, w, g))
            wg = list(map(mul, w, g))
            inside = _div(hg * (s_w * hg - s_h * one) + one * (s_hh * one - s_h * hg), det)
            return sum(map(mul, wg, g)) - inside, sum(map(mul, wr, g)), hg, one, wg

        g1 = [amp * d for d in dh1]
        m11, r1, hg1, one1, wg1 = kaufman(g1)
        if not sub:
            return m11, r1, 0.0, 0.0, 0.0
        free = 1.0 if two else 0.0
        g2 = [amp * (d * x) * free for d, x in zip(dh1, u, strict=True)]
        m22, r2, hg2, one2, _ = kaufman(g2)
        m12 = sum(map(mul, wg1, g2)) - _div(
            hg1 * (s_w * hg2 - s_h * one2) + one1 * (s_hh * one2 - s_h * hg2), det)
        return m11, r1, m22, r2, m12

    def refine(self, sub: bool, two: bool, p1: float, p2: float, steps: int
               ) -> tuple[float, float, float, float, float]:
        """Levenberg-Marquardt damped Gauss-Newton from ``(p1, p2)``:
        ``(p1, p2, amp, off, sse)``."""
        h, amp, off, sse = self.project(sub, p1, p2)
        lam = 1e-3
        system: tuple[float, float, float, float, float] | None = None  # Kaufman's, while the fit holds
        for _ in range(steps):
            if system is None:
                system = self.normal(sub, two, h, amp, off)
            m11, r1, m22, r2, m12 = system
            if sub:
                a11 = m11 * (1.0 + lam) + 1e-300
                a22 = m22 * (1.0 + lam) + 1e-300
                dt = a11 * a22 - m12 * m12
                d1 = _finite(-_div(a22 * r1 - m12 * r2, dt))
                d2 = _finite(-_div(a11 * r2 - m12 * r1, dt)) if two else 0.0
                t1, t2 = max(p1 + d1, 0.0), max(p2 + d2, 0.0)
            else:
                d1 = _finite(-_div(r1, m11 * (1.0 + lam) + 1e-300))
                t1, t2 = min(max(p1 + d1, 1e-5), 5.0), p2
            t_h, t_amp, t_off, t_sse = self.project(sub, t1, t2)
            if not t_sse < sse:  # nothing moves: only the damping grows
                lam *= 10.0
                continue
            system = None
            p1, p2, amp, off, sse, h = t1, t2, t_amp, t_off, t_sse, t_h
            lam *= 0.3
        return p1, p2, amp, off, sse


def refine(
    p1: np.ndarray, p2: np.ndarray, sub: bool, y: np.ndarray, w: np.ndarray, valid: np.ndarray,
    free2: np.ndarray, steps: int,
) -> tuple[np.ndarray, ...]:
    """Variable-projection Gauss-Newton (Levenberg-Marquardt damped) on the nonlinear
    parameters of one family's jobs, each job on its own in plain float arithmetic (a window
    is a few dozen numbers); the amplitude and offset are always the exact weighted
    least-squares optimum for the current shape.

    Returns ``(p1, p2, amp, off, sse)``. Bounds: sublinear ``p1, p2 >= 0`` (``p2`` stays 0
    unless ``free2``); linear ``1e-5 <= p1 <= 5``.
    """
    jobs, window = y.shape
    u = _offsets(window)[0].tolist()
    out = np.empty((jobs, 5))
    for k, (a, b, yk, wk, vk, f2) in enumerate(zip(p1.tolist(), p2.tolist(), y.tolist(), w.tolist(),
                                                   valid.tolist(), free2.tolist(), strict=True)):
        out[k] = _Window(u, wk, yk, vk).refine(sub, sub and f2, a, b, steps)
    return out[:, 0], out[:, 1], out[:, 2], out[:, 3], out[:, 4]
