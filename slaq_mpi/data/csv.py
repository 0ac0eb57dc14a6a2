"""The CSV reader: comma-separated numeric cells, one row a line, blank lines skipped. Bad
input raises :class:`~slaq_mpi.errors.DataError` naming the file, line and column."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from slaq_mpi.errors import DataError

__all__ = ["csv_rows", "floats", "is_number"]


def csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped cells) of every non-blank line."""
    with open(path, encoding="utf-8-sig", errors="replace") as fh:  # -sig: drop a BOM
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield lineno, [c.strip() for c in line.rstrip("\r\n").split(",")]


def floats(path: Path, lineno: int, cells: list[str]) -> list[float]:
    """The cells of line ``lineno`` as finite floats; refuses any other cell."""
    out = []
    for col, cell in enumerate(cells):
        try:
            v = float(cell)
        except ValueError:
            raise DataError(f"{path}:{lineno}: column {col} is {cell!r}, not a number") from None
        if not math.isfinite(v):
            raise DataError(f"{path}:{lineno}: column {col} is {cell!r}; values must be finite")
        out.append(v)
    return out


def is_number(cell: str) -> bool:
    """Whether ``cell`` reads as a number (``float`` accepts it)."""
    try:
        float(cell)
    except ValueError:
        return False
    return True
