"""The CSV reader: comma-separated numeric cells, one row a line, blank lines skipped, and an
optional header line. Bad input raises :class:`~slaq_mpi.errors.DataError` naming the file,
line and column.

Whether the first line is a header: ``header=True`` or ``False`` says so; ``None`` decides by
:func:`header_decision`: a header is a first line none of whose cells is a number, or one that
is exactly ``0,1,...,n-1`` (the column names ``pandas.DataFrame.to_csv`` writes for unnamed
columns).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from slaq_mpi.errors import DataError

__all__ = ["CsvShape", "csv_rows", "first_line", "floats", "header_decision", "header_note",
           "is_number", "scan"]


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


def header_decision(cells: list[str]) -> tuple[bool, str]:
    """Whether a first line of ``cells`` is a header, and why, in a few words."""
    if cells == [str(i) for i in range(len(cells))]:
        return True, f"it numbers the columns 0..{len(cells) - 1}, as pandas writes them"
    if not any(is_number(c) for c in cells):
        return True, "none of its cells is a number"
    return False, "some of its cells are numbers"


def first_line(path: Path) -> tuple[int, list[str]] | None:
    """The first non-blank line of ``path``: its number and cells (None if there is none)."""
    return next(csv_rows(path), None)


def header_note(path: Path) -> str | None:
    """One line saying what :func:`header_decision` decided for ``path`` and which option
    overrides it (None for a file without lines)."""
    first = first_line(path)
    if first is None:
        return None
    lineno, cells = first
    header, why = header_decision(cells)
    if header:
        return f"{path}: line {lineno} is a header, skipped: {why} (--no-header reads it as data)"
    return (f"{path}: line {lineno} is data: {why} (a header has none, or numbers the columns "
            "0,1,...; --header skips it)")


@dataclass(frozen=True)
class CsvShape:
    """What a first pass over a CSV file found."""

    rows: int  # data rows
    width: int  # cells per line
    header_line: int | None  # the line skipped as a header


def scan(path: Path, header: bool | None = None) -> CsvShape:
    """Read ``path`` once, checking every cell; ``header`` as in the module docstring.

    Raises:
        DataError: naming the line at fault; a refusal of the first line says how it was
            taken for data and which option takes it for a header.
    """
    rows, width, header_line = 0, -1, None
    for lineno, cells in csv_rows(path):
        if width < 0:
            width = len(cells)
            if header if header is not None else header_decision(cells)[0]:
                header_line = lineno
                continue
            try:
                floats(path, lineno, cells)
            except DataError as exc:
                how = ("--no-header reads it as data" if header is not None else
                       f"header detection read it as data, since {header_decision(cells)[1]}")
                raise DataError(f"{exc}; {how}: give --header if line {lineno} is a header") from None
        elif len(cells) != width:
            raise DataError(f"{path}:{lineno}: {len(cells)} columns; the first line has {width}")
        else:
            floats(path, lineno, cells)
        rows += 1
    return CsvShape(rows, max(width, 0), header_line)
