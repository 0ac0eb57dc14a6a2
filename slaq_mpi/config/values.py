"""Checks of single configuration values (integers, finite numbers), shared by the config,
the simulator's and Slurm's settings and the policies' parameters; they import nothing else of
slaq, so the scheduling brain does not pull in the config loader."""

from __future__ import annotations

import math
from typing import Any

from slaq_mpi.errors import ConfigError

__all__ = ["MAX_RANKS", "integer", "number"]

MAX_RANKS = 2**24  # ranks (and simulated cores): 16,777,216, beyond the largest machines


def integer(val: Any, where: str, lo: int, hi: int | None = None) -> int:
    """``val`` if it is an integer in ``[lo, hi]`` (``hi`` None: no bound), else a
    :class:`ConfigError` naming ``where`` and the range."""
    allowed = f"must be an integer >= {lo}" if hi is None else f"must be an integer in [{lo}, {hi}]"
    if isinstance(val, bool) or not isinstance(val, int) or val < lo or (hi is not None and val > hi):
        raise ConfigError(where, val, allowed)
    return int(val)


def number(val: Any, where: str, lo: float, open_lo: bool = False, hi: float = math.inf) -> float:
    """``val`` as a float if it is a finite number ``>= lo`` (``> lo`` with ``open_lo``) and
    ``<= hi``, else a :class:`ConfigError` naming ``where`` and the range."""
    try:
        ok = not isinstance(val, bool) and isinstance(val, int | float) and math.isfinite(val)
    except OverflowError:  # an integer beyond any float
        ok = False
    if not ok or val < lo or (open_lo and val == lo) or val > hi:
        upper = "" if hi == math.inf else f" and <= {hi:g}"
        raise ConfigError(where, val, f"must be a finite number {'>' if open_lo else '>='} {lo:g}{upper}")
    return float(val)
