"""Write HDF5 datasets: synthetic ones (:func:`make`) and conversions of LibSVM, CSV and .npy
files (:func:`convert_libsvm`, :func:`convert_csv`, :func:`convert_npy`).

Every writer works in row chunks, so a file of any size fits in memory, and publishes its file
only once ``slaq`` can read it back, never replacing a file. Bad input raises
:class:`~slaq_mpi.errors.DataError` naming the file and the line (or row) at fault.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.sparse as sp

from slaq_mpi.data.csv import csv_rows, floats, scan
from slaq_mpi.data.datasets import CHUNK_ROWS, DatasetSpec, RowWriter, inspect
from slaq_mpi.data.generators import (
    GENERATORS,
    check_space,
    generate,
    generated_bytes,
    generator_param_problem,
)
from slaq_mpi.data.libsvm import libsvm_lines
from slaq_mpi.errors import ConfigError, DataError

__all__ = ["FORMATS", "convert_csv", "convert_libsvm", "convert_npy", "format_from_content",
           "format_from_extension", "make"]

FORMATS = ("libsvm", "csv", "npy")
_EXTENSIONS = {".csv": "csv", ".npy": "npy", ".svm": "libsvm", ".libsvm": "libsvm"}


def format_from_extension(path: Path) -> tuple[str, bool]:
    """The input format of ``path`` by its extension (``.csv``, ``.npy``, ``.svm`` and
    ``.libsvm``; anything else is taken for LibSVM), and whether the extension named it."""
    fmt = _EXTENSIONS.get(path.suffix.lower())
    return (fmt, True) if fmt else ("libsvm", False)


def format_from_content(path: Path) -> str | None:
    """The format the start of ``path`` looks like: ``npy`` (its magic string), ``csv`` (a
    comma in the first line), ``libsvm`` (an INDEX:VALUE pair in it); None if unsure."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    line = next((ln for ln in head.splitlines() if ln.strip() and not ln.lstrip().startswith(b"#")), b"")
    if b"," in line:
        return "csv"
    return "libsvm" if b":" in line else None


def make(kind: str, out: Path, rows: int, features: int, seed: int = 0, **options: Any) -> None:
    """Write ``rows`` x ``features`` of the synthetic dataset ``kind`` to ``out``."""
    if kind not in GENERATORS:
        raise ConfigError("data make KIND", kind, f"allowed: {', '.join(sorted(GENERATORS))}")
    allowed = GENERATORS[kind][1]
    for key in options:
        if key not in allowed:
            raise ConfigError(f"data make --{key.replace('_', '-')}", options[key],
                              f"not an option of {kind}; allowed: {', '.join(sorted(allowed)) or 'none'}")
    for key, val in {"rows": rows, "features": features, "seed": seed, **options}.items():
        problem = generator_param_problem(key, val)
        if problem is not None:
            raise ConfigError(f"data make --{key.replace('_', '-')}", val, problem)
    spec = DatasetSpec(generator=kind, params={"rows": rows, "features": features, "seed": seed,
                                               **options})
    check_space(generated_bytes(spec), out.parent, "data make OUT")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        generate(spec, tmp, seed)
        _readable(tmp, out)
        _publish(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()


def _publish(tmp: Path, out: Path) -> None:
    """Give the finished ``tmp`` the name ``out``, never replacing a file that appeared there
    while it was written (a hard link fails if ``out`` exists; a rename would not)."""
    taken = ConfigError("out", str(out), "appeared while the data was written; data make and "
                        "convert never replace a file: remove it first or give a new path")
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise taken from None
    except OSError:  # a file system without hard links
        if out.exists() or out.is_symlink():
            raise taken from None
        os.replace(tmp, out)
        return
    tmp.unlink()


def _readable(tmp: Path, out: Path) -> None:
    """Check the written ``tmp`` as ``slaq`` will read ``out``: a file it cannot use is an
    error, never an output left behind."""
    try:
        inspect(tmp)
    except DataError as exc:
        raise DataError(str(exc).replace(str(tmp), str(out))) from None


class _Output:
    """An HDF5 file written to a temporary name and renamed into place on success."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tmp = out.with_name(out.name + f".tmp{os.getpid()}")

    def __enter__(self) -> h5py.File:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.f = h5py.File(self.tmp, "w")
        return self.f

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            self.f.close()
            if exc_type is None:
                _readable(self.tmp, self.out)
                _publish(self.tmp, self.out)
        finally:
            if self.tmp.exists():
                self.tmp.unlink()


# --- LibSVM / SVMlight ------------------------------------------------------------------------

def convert_libsvm(src: Path, out: Path, zero_based: bool = False, features: int | None = None) -> None:
    """Convert a LibSVM/SVMlight file to a CSR HDF5 file (two passes, chunked).

    Labels that are exactly -1 and +1 become 0 and 1 (the binary convention of the solvers).
    """
    if features is not None and features < 1:
        raise ConfigError("--features", features, "must be an integer >= 1 (the number of columns)")
    rows, lo_idx, hi_idx = 0, math.inf, -1
    labels: set[float] = set()
    for _, label, idx, _ in libsvm_lines(src):
        rows += 1
        if idx:
            lo_idx, hi_idx = min(lo_idx, idx[0]), max(hi_idx, idx[-1])
        if len(labels) <= 2:
            labels.add(label)
    if rows == 0:
        raise DataError(f"{src}: no data lines")
    base = 0 if zero_based or lo_idx == 0 else 1
    n_feat = features if features is not None else max(hi_idx - base + 1, 1)
    if hi_idx - base + 1 > n_feat:
        raise DataError(f"{src}: feature index {hi_idx} exceeds --features {n_feat}")
    pm_one = labels <= {-1.0, 1.0} and -1.0 in labels
    with _Output(out) as f:
        writer = RowWriter(f, rows, n_feat)
        buf: list[tuple[float, list[int], list[float]]] = []
        for _, label, idx, vals in libsvm_lines(src):
            buf.append(((label + 1.0) / 2.0 if pm_one else label, idx, vals))
            if len(buf) == CHUNK_ROWS:
                writer.append(*_csr_chunk(buf, n_feat, base))
                buf = []
        if buf:
            writer.append(*_csr_chunk(buf, n_feat, base))
        writer.close()


def _csr_chunk(buf: list[tuple[float, list[int], list[float]]], n_feat: int,
               base: int) -> tuple[sp.csr_matrix, np.ndarray]:
    indptr = np.cumsum([0] + [len(idx) for _, idx, _ in buf])
    indices = np.fromiter((i - base for _, idx, _ in buf for i in idx), dtype=np.int64, count=indptr[-1])
    data = np.fromiter((v for _, _, vals in buf for v in vals), dtype=np.float64, count=indptr[-1])
    X = sp.csr_matrix((data, indices, indptr), shape=(len(buf), n_feat))
    return X, np.array([b[0] for b in buf])


# --- CSV ---------------------------------------------------------------------------------------

def convert_csv(src: Path, out: Path, label_column: int | None = None,
                header: bool | None = None) -> None:
    """Convert a numeric CSV file to a dense HDF5 file. ``header``: whether the first line is a
    header (skipped); None decides (:func:`slaq_mpi.data.csv.header_decision`). Every other
    line must be all finite numbers."""
    shape = scan(src, header)
    if shape.rows == 0:
        raise DataError(f"{src}: no data lines")
    lab = _label_index(label_column, shape.width)
    feats = shape.width - (lab is not None)
    if feats < 1:
        raise DataError(f"{src}: no feature columns besides the label")
    with _Output(out) as f:
        writer = RowWriter(f, shape.rows, feats)
        buf: list[list[float]] = []
        for lineno, cells in csv_rows(src):
            if lineno == shape.header_line:
                continue
            buf.append(floats(src, lineno, cells))
            if len(buf) == CHUNK_ROWS:
                writer.append(*_split_label(np.array(buf), lab))
                buf = []
        if buf:
            writer.append(*_split_label(np.array(buf), lab))
        writer.close()


def _label_index(label_column: int | None, width: int) -> int | None:
    """The label column as an index in [0, width), or None; out of range is refused."""
    if label_column is None:
        return None
    if not -width <= label_column < width:
        raise ConfigError("--label-column", label_column, f"the file has {width} columns "
                          f"(0..{width - 1}, or -1..-{width} from the end)")
    return label_column % width


def _split_label(block: np.ndarray, lab: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    if lab is None:
        return block, None
    return np.delete(block, lab, axis=1), block[:, lab].copy()


# --- .npy --------------------------------------------------------------------------------------

def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable .npy array ({exc})") from None


def convert_npy(src: Path, out: Path, label_column: int | None = None, labels: Path | None = None) -> None:
    """Convert a 2-D .npy array (memory-mapped, copied in chunks) to a dense HDF5 file."""
    if labels is not None and label_column is not None:
        raise ConfigError("--labels", str(labels), "give the labels either as a file (--labels) or "
                          "as a column (--label-column), not both")
    arr, y_all = _load_npy(src), (_load_npy(labels) if labels is not None else None)
    if arr.ndim != 2 or arr.dtype.kind not in "fiub":
        raise DataError(f"{src}: array of shape {arr.shape} and dtype {arr.dtype}; want 2-D numeric")
    rows, width = arr.shape
    if y_all is not None and y_all.dtype.kind not in "fiub":  # as X: no text, complex, objects
        raise DataError(f"{labels}: labels of dtype {y_all.dtype}; want real numbers "
                        "(integer, float or bool)")
    if y_all is not None and y_all.shape != (rows,):
        raise DataError(f"{labels}: labels of shape {y_all.shape}; want ({rows},)")
    lab = _label_index(label_column, width)
    feats = width - (lab is not None)
    if rows < 1 or feats < 1:
        raise DataError(f"{src}: array of shape {arr.shape} leaves no rows or feature columns")
    with _Output(out) as f:
        writer = RowWriter(f, rows, feats)
        for lo in range(0, rows, CHUNK_ROWS):
            block = np.asarray(arr[lo : lo + CHUNK_ROWS], dtype=np.float64)
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                raise DataError(f"{src}: row {lo + int(np.argmax(bad))}: non-finite value")
            X, y = _split_label(block, lab)
            if y_all is not None:
                y = np.asarray(y_all[lo : lo + CHUNK_ROWS], dtype=np.float64)
                if not np.isfinite(y).all():
                    raise DataError(f"{labels}: row {lo + int(np.argmax(~np.isfinite(y)))}: "
                                    "non-finite label")
            writer.append(X, y)
        writer.close()
