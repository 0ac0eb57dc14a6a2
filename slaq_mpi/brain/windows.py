"""Loss histories as the fixed-width arrays the batched fit works on (no MPI)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

__all__ = ["DEFAULT_WINDOW", "history_windows", "max_drops", "tail_windows"]

DEFAULT_WINDOW = 16  # most recent losses fitted per job


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


def max_drops(histories: Sequence[Sequence[float] | np.ndarray]) -> np.ndarray:
    """The largest one-iteration loss reduction of every history (0 if none)."""
    jobs = len(histories)
    seg = np.fromiter((len(h) for h in histories), dtype=np.int64, count=jobs)
    flat = _flat(histories, int(seg.sum()))
    drops = np.zeros(flat.shape[0])
    if flat.shape[0] > 1:
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, 1e308 - -1e308: zeroed below
            drops[1:] = flat[:-1] - flat[1:]
    starts = np.cumsum(seg) - seg
    has = seg > 0
    drops[starts[has]] = 0.0
    drops = np.where(np.isfinite(drops), np.maximum(drops, 0.0), 0.0)
    out = np.zeros(jobs)
    if has.any():
        out[has] = np.maximum.reduceat(drops, starts[has])
    return out


def history_windows(
    histories: Sequence[Sequence[float] | np.ndarray], window: int = DEFAULT_WINDOW
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``tail_windows`` plus ``max_drops``: ``(values, mask, n, max_drop)``."""
    values, mask, n = tail_windows(histories, window)
    return values, mask, n, max_drops(histories)
