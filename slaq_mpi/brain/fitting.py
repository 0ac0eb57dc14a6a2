"""Batched variable-projection fitting of loss windows (internals of :mod:`slaq_mpi.brain.predict`).

Both families are written around the last observed iteration (``u = k - k_n``): sublinear
``h(u) = 1 / (1 + p1 u + p2 u^2)`` and linear ``h(u) = exp(-p1 u)``; the curve is
``offset + amp * h(u)``. For fixed nonlinear parameters the linear ones have a closed form, so
a coarse grid search (:func:`coarse`) is three matrix products for all jobs, and refinement
(:func:`refine`) is batched Levenberg-Marquardt on the nonlinear parameters only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from slaq_mpi.brain._numeric import zero_nonfinite

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


def _project(
    p1: np.ndarray, p2: np.ndarray, sub: bool, u: np.ndarray, w: np.ndarray, wy: np.ndarray,
    s_w: np.ndarray, s_y: np.ndarray, s_yy: np.ndarray, valid: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Shapes and the optimal linear parameters for nonlinear ``(p1, p2)`` per job.

    Returns ``(h, amp, off, sse)``; ``sse`` is inf where the shape has a pole in the window or
    the best amplitude is not positive. Call under ``np.errstate`` (divisions by 0, overflows
    and invalid values are expected and handled).
    """
    if sub:
        q = 1.0 + u * (p1[:, None] + p2[:, None] * u)
        h = 1.0 / q
        bad = ((q <= 0) & valid).any(axis=1)
    else:
        h = np.exp(-p1[:, None] * u)
        bad = ~np.isfinite(h).all(axis=1)
    s_h = np.einsum("jw,jw->j", w, h)
    s_hh = np.einsum("jw,jw->j", w * h, h)
    s_hy = np.einsum("jw,jw->j", wy, h)
    det = s_w * s_hh - s_h * s_h
    amp = (s_w * s_hy - s_h * s_y) / det
    off = (s_y - amp * s_h) / s_w
    sse = s_yy - amp * s_hy - off * s_y
    bad |= ~(np.isfinite(sse) & (det > 1e-12 * s_w * s_hh) & (amp > 0))
    return h, amp, off, np.where(bad, np.inf, np.maximum(sse, 0.0))


def _kaufman(
    g: np.ndarray, w: np.ndarray, wh: np.ndarray, wr: np.ndarray,
    gram: tuple[np.ndarray, np.ndarray, np.ndarray], det: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For a derivative column ``g``: its projected squared norm, its product with the
    residual, and its products with ``h`` and ``1`` (weighted by ``w``; ``det`` is the
    determinant of the weighted Gram matrix of ``h`` and ``1``). Call under ``np.errstate``."""
    s_w, s_h, s_hh = gram
    hg = np.einsum("jw,jw->j", wh, g)
    one = np.einsum("jw,jw->j", w, g)
    inside = (hg * (s_w * hg - s_h * one) + one * (s_hh * one - s_h * hg)) / det
    norm = np.einsum("jw,jw->j", w * g, g) - inside
    return norm, np.einsum("jw,jw->j", wr, g), hg, one


def _normal(
    sub: bool, two: np.ndarray, u: np.ndarray, w: np.ndarray, y: np.ndarray, s_w: np.ndarray,
    h: np.ndarray, amp: np.ndarray, off: np.ndarray,
) -> tuple[Any, ...]:
    """Kaufman's Gauss-Newton system at the current fit (shape ``h``, ``amp``, ``off``):
    ``(m11, r1, m22, r2, m12)``, the derivative columns with their part in span{h, 1} removed
    (``m22, r2, m12`` are None for the linear family). Call under ``np.errstate``."""
    dh1 = -u * h * h if sub else -u * h  # the shape's derivatives by p1 (and p2: dh1 * u)
    wh = w * h
    s_h = wh.sum(axis=1)
    gram = (s_w, s_h, np.einsum("jw,jw->j", wh, h))
    wr = w * (amp[:, None] * h + off[:, None] - y)
    g1 = amp[:, None] * dh1
    det = s_w * gram[2] - s_h * s_h
    m11, r1, hg1, one1 = _kaufman(g1, w, wh, wr, gram, det)
    if not sub:
        return m11, r1, None, None, None
    g2 = amp[:, None] * (dh1 * u) * two[:, None]
    m22, r2, hg2, one2 = _kaufman(g2, w, wh, wr, gram, det)
    m12 = np.einsum("jw,jw->j", w * g1, g2) - (
        hg1 * (gram[0] * hg2 - s_h * one2) + one1 * (gram[2] * one2 - s_h * hg2)) / det
    return m11, r1, m22, r2, m12


def refine(
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
    u = _offsets(window)
    wy = w * y
    s_w = w.sum(axis=1)
    s_y = wy.sum(axis=1)
    s_yy = np.einsum("jw,jw->j", wy, y)
    args = (sub, u, w, wy, s_w, s_y, s_yy, valid)
    two = sub & free2
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        h, amp, off, sse = _project(p1, p2, *args)
        lam = np.full(jobs, 1e-3)
        system: tuple[Any, ...] | None = None  # Kaufman's, while the fit holds
        for _ in range(steps):
            if system is None:
                system = _normal(sub, two, u, w, y, s_w, h, amp, off)
            m11, r1, m22, r2, m12 = system
            if sub:
                a11 = m11 * (1.0 + lam) + 1e-300
                a22 = m22 * (1.0 + lam) + 1e-300
                dt = a11 * a22 - m12 * m12
                d1 = zero_nonfinite(-(a22 * r1 - m12 * r2) / dt)
                d2 = zero_nonfinite(np.where(two, -(a11 * r2 - m12 * r1) / dt, 0.0))
                t1, t2 = np.maximum(p1 + d1, 0.0), np.maximum(p2 + d2, 0.0)
            else:
                d1 = zero_nonfinite(-r1 / (m11 * (1.0 + lam) + 1e-300))
                t1, t2 = np.minimum(np.maximum(p1 + d1, 1e-5), 5.0), p2
            t_h, t_amp, t_off, t_sse = _project(t1, t2, *args)
            better = t_sse < sse
            if not better.any():  # nothing moves: only the damping grows
                lam = lam * 10.0
                continue
            system = None
            if better.all():
                p1, p2, amp, off, sse, h = t1, t2, t_amp, t_off, t_sse, t_h
                lam = lam * 0.3
                continue
            p1, p2 = np.where(better, t1, p1), np.where(better, t2, p2)
            amp, off = np.where(better, t_amp, amp), np.where(better, t_off, off)
            sse = np.where(better, t_sse, sse)
            h = np.where(better[:, None], t_h, h)
            lam = np.where(better, lam * 0.3, lam * 10.0)
    return p1, p2, amp, off, sse
