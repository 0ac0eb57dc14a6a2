"""Small helpers for the lines slaq prints."""

from __future__ import annotations


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``count(1, "job")`` is ``"1 job"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
