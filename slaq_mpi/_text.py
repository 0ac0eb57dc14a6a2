"""Small helpers for the lines slaq prints."""

from __future__ import annotations


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``count(1, "job")`` is ``"1 job"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def seconds(t: float) -> str:
    """A time in seconds as a report shows it: ``3484.98``, or ``1,000,000,000`` from 1e5 s on
    (where ``:g`` would give ``1e+09``)."""
    return f"{t:,.0f}" if abs(t) >= 1e5 else f"{t:g}"
