"""The LibSVM / SVMlight text reader: ``label index:value ...`` lines, ``#`` comments, ``qid:``
ignored. Bad input raises :class:`~slaq_mpi.errors.DataError` naming the file and line."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from slaq_mpi.errors import DataError

__all__ = ["libsvm_lines"]


def libsvm_lines(path: Path) -> Iterator[tuple[int, float, list[int], list[float]]]:
    """(line number, label, indices, values) of every data line; raises on a bad line."""
    with open(path, encoding="utf-8-sig", errors="replace") as fh:  # -sig: drop a BOM
        for lineno, line in enumerate(fh, 1):
            text = line.split("#", 1)[0].strip()  # a comment may hold any bytes
            if "\x00" in text or "\ufffd" in text:
                raise DataError(f"{path}:{lineno}: not text (a binary file?); LibSVM input is "
                                "lines of 'label index:value ...'")
            if not text:
                continue
            tokens = text.split()
            try:
                label = float(tokens[0])
            except ValueError:
                raise DataError(f"{path}:{lineno}: the label {tokens[0]!r} is not a number") from None
            idx: list[int] = []
            vals: list[float] = []
            for tok in tokens[1:]:
                key, sep, val = tok.partition(":")
                if key == "qid":
                    continue
                try:
                    if not sep:
                        raise ValueError
                    i, v = int(key), float(val)
                except ValueError:
                    raise DataError(f"{path}:{lineno}: cannot parse {tok!r}; "
                                    "want INDEX:VALUE") from None
                if i < 0 or not math.isfinite(v) or not math.isfinite(label):
                    bad = tok if i < 0 or not math.isfinite(v) else tokens[0]
                    raise DataError(f"{path}:{lineno}: {bad!r}: indices must be >= 0 and "
                                    "values finite")
                if idx and i <= idx[-1]:
                    raise DataError(f"{path}:{lineno}: index {i} after {idx[-1]}; indices must "
                                    "increase along a line")
                idx.append(i)
                vals.append(v)
            yield lineno, label, idx, vals
