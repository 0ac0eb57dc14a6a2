"""Datasets: the HDF5 format, writing it in row chunks, and reading per-rank row shards.

HDF5 layout (the native format):

* ``/X``: dense features, shape (rows, features), float64; or a group ``/X`` holding a CSR
  matrix as ``data`` (float64), ``indices`` (int64), ``indptr`` (int64, rows + 1) with the
  attribute ``shape = (rows, features)``.
* ``/y``: optional labels or targets, shape (rows,).

A rank reads only its own rows (``read_shard``), never the whole file (a worker keeps a small
dataset whole in memory once read, :mod:`slaq_mpi.data.shard_cache`). ``check_file`` scans a
file in row chunks before any rank starts and names the file and the first bad row.
Synthetic datasets are made by :mod:`slaq_mpi.data.generators`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.sparse as sp

from jobs.base import Shard
from slaq_mpi.errors import DataError

CHUNK_ROWS = 65536


@dataclass(frozen=True)
class DatasetSpec:
    """Where a job's data comes from: an HDF5 ``path``, or a synthetic ``generator``."""

    path: str | None = None
    generator: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def key(self, seed: int) -> str:
        """A short stable name for the file generated with job seed ``seed`` (the data seed is
        ``params["seed"]`` when given, else the job's seed)."""
        params = {"seed": seed, **dict(self.params)}
        blob = json.dumps({"g": self.generator, "p": params}, sort_keys=True)
        return f"{self.generator}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class DatasetInfo:
    """Shape facts of an HDF5 dataset, read without loading it."""

    rows: int
    features: int
    has_labels: bool
    sparse: bool
    top_label: float | None = None  # the highest label (set by check_file; None: not read)


#: What h5py raises on a damaged file, depending on where the damage is (a wrong B-tree
#: signature is a RuntimeError, a bad object header a KeyError, a mangled type a ValueError).
H5_DAMAGE = (OSError, RuntimeError, KeyError, ValueError)


# --- writing ----------------------------------------------------------------------------

class RowWriter:
    """Appends row chunks (dense or CSR, with optional labels) to an open HDF5 file.

    The first chunk fixes the layout: a dense ``/X`` or a CSR group ``/X``; ``/y`` is written
    when the chunks carry labels. ``rows`` is the total to be written (checked by ``close``).
    """

    def __init__(self, f: h5py.File, rows: int, features: int) -> None:
        self.f, self.rows, self.features, self.at, self.nnz = f, rows, features, 0, 0
        self.sparse: bool | None = None
        self.labels: bool | None = None

    def _start(self, X: Any, y: np.ndarray | None) -> None:
        f, rows, feats = self.f, self.rows, self.features
        self.sparse, self.labels = sp.issparse(X), y is not None
        if self.sparse:
            g = f.create_group("X")
            g.attrs["shape"] = np.array([rows, feats], dtype=np.int64)
            g.create_dataset("data", shape=(0,), maxshape=(None,), dtype="f8", chunks=(65536,))
            g.create_dataset("indices", shape=(0,), maxshape=(None,), dtype="i8", chunks=(65536,))
            g.create_dataset("indptr", shape=(rows + 1,), dtype="i8")
            g["indptr"][0] = 0
        else:
            f.create_dataset("X", shape=(rows, feats), dtype="f8",
                             chunks=(max(1, min(rows, 4096, 2**19 // feats)), feats))
        if self.labels:
            f.create_dataset("y", shape=(rows,), dtype="f8")

    def append(self, X: Any, y: np.ndarray | None) -> None:
        """Write the next ``len(X)`` rows."""
        if self.sparse is None:
            self._start(X, y)
        n, lo = X.shape[0], self.at
        if self.sparse:
            X = sp.csr_matrix(X)
            g, k = self.f["X"], X.nnz
            for name, arr in (("data", X.data), ("indices", X.indices)):
                g[name].resize((self.nnz + k,))
                g[name][self.nnz : self.nnz + k] = arr
            g["indptr"][lo + 1 : lo + n + 1] = X.indptr[1:].astype(np.int64) + self.nnz
            self.nnz += k
        else:
            self.f["X"][lo : lo + n] = X
        if self.labels:
            assert y is not None
            self.f["y"][lo : lo + n] = y
        self.at += n

    def close(self) -> None:
        """Check that every declared row was written."""
        if self.at != self.rows:
            raise DataError(f"wrote {self.at} rows, expected {self.rows}")


FINGERPRINT_BYTES = 1 << 20  # the first and last MiB of a data file are hashed,
FINGERPRINT_SAMPLES = 256  # and this many blocks spread evenly between them
_SAMPLE_BYTES = 4096


def fingerprint(path: str | Path, samples: int = FINGERPRINT_SAMPLES) -> str:
    """A cheap fingerprint of a data file, ``SIZE:SHA256:SAMPLES``: its size and a SHA-256 of
    its first and last MiB and of ``samples`` 4 KiB blocks spread evenly between them (at most
    3 MiB read, whatever the size). A file regenerated, replaced or rewritten in part differs
    there; a touched or copied one does not. A change confined to a few KiB between two
    samples can be missed. ``samples=0`` gives the older ``SIZE:SHA256`` (head and tail
    only), which runs started before the samples were taken kept.
    """
    p = Path(path)
    size = p.stat().st_size
    digest = hashlib.sha256()
    with open(p, "rb") as fh:
        digest.update(fh.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            tail = max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES)
            last = tail - _SAMPLE_BYTES  # where the last block between head and tail starts
            if samples > 0 and last > FINGERPRINT_BYTES:
                for i in range(samples):
                    fh.seek(FINGERPRINT_BYTES + (last - FINGERPRINT_BYTES) * i // max(samples - 1, 1))
                    digest.update(fh.read(_SAMPLE_BYTES))
            fh.seek(tail)
            digest.update(fh.read(FINGERPRINT_BYTES))
    text = f"{size}:{digest.hexdigest()}"
    return f"{text}:{samples}" if samples > 0 else text


def fingerprint_matches(path: str | Path, kept: str) -> bool:
    """Whether ``path`` still has the fingerprint ``kept``, taken again the way ``kept`` was
    (with as many samples as it names; none for the older ``SIZE:SHA256``).

    Raises:
        OSError: the file cannot be read.
    """
    parts = kept.split(":")
    samples = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0
    if samples > 1 << 16:  # not one we took: never read gigabytes to find that out
        return False
    return fingerprint(path, samples) == kept


# --- reading ----------------------------------------------------------------------------

def row_bounds(n_rows: int, size: int, rank: int) -> tuple[int, int]:
    """Rows [start, stop) of ``rank`` among ``size`` ranks: contiguous, sizes differ by <= 1."""
    base, extra = divmod(n_rows, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def inspect(path: str | Path) -> DatasetInfo:
    """Shape facts of an HDF5 dataset.

    Raises:
        DataError: not an HDF5 file, no ``X``, or ``y`` of the wrong length.
    """
    try:
        with h5py.File(path, "r") as f:
            if "X" not in f:
                raise DataError(f"{path}: no 'X' dataset or group (features) in the file")
            X = f["X"]
            if isinstance(X, h5py.Group):
                missing = [k for k in ("data", "indices", "indptr") if k not in X]
                if missing or "shape" not in X.attrs:
                    raise DataError(
                        f"{path}: sparse group 'X' needs data, indices, indptr and a shape "
                        f"attribute; missing {missing or ['shape']}"
                    )
                shape = np.asarray(X.attrs["shape"])
                if shape.shape != (2,) or shape.dtype.kind not in "iu" or (shape < 0).any():
                    raise DataError(f"{path}: sparse group 'X' has shape attribute {shape.tolist()}; "
                                    "it must be two integers >= 0: (rows, features)")
                rows, feats = (int(v) for v in shape)
                if X["indptr"].shape != (rows + 1,):
                    raise DataError(f"{path}: X/indptr has shape {X['indptr'].shape}, want ({rows + 1},)")
                sparse = True
            else:
                if X.ndim != 2:
                    raise DataError(f"{path}: X has shape {X.shape}; it must be 2-D (rows, features)")
                rows, feats = (int(v) for v in X.shape)
                sparse = False
            has_y = "y" in f
            if has_y and f["y"].shape != (rows,):
                raise DataError(f"{path}: y has shape {f['y'].shape}; X has {rows} rows, want ({rows},)")
    except DataError:
        raise
    except H5_DAMAGE as exc:
        raise DataError(f"{path}: not a readable HDF5 file ({exc})") from None
    if rows < 1 or feats < 1:
        raise DataError(f"{path}: X has shape ({rows}, {feats}); need at least one row and column")
    return DatasetInfo(rows, feats, has_y, sparse)


def check_file(path: str | Path, solver: Any) -> DatasetInfo:
    """Validate a dataset file for a solver class before any rank starts.

    Scans the file in row chunks (never whole): shapes, CSR structure, non-finite values in
    ``X`` or ``y``, and labels the solver does not accept. A solver declares its labels with
    the class attribute ``label_kind``: ``"binary"`` (0 or 1), ``"classes"`` (integers >= 0),
    ``"real"`` (any finite number); without one, labels are only checked to be finite. With
    ``feature_kind = "counts"`` every value of ``X`` must also be >= 0.

    Raises:
        DataError: naming the file and, where one is at fault, the first bad row.
    """
    info = inspect(path)
    if getattr(solver, "needs_labels", False) and not info.has_labels:
        own = "" if getattr(solver, "__module__", "").startswith("jobs.") else (
            " (a solver that trains without labels declares `needs_labels = False`; the default is "
            "True, docs/solvers.md)")
        raise DataError(f"{path}: this algorithm needs labels, and the file has no 'y'{own}")
    try:
        with h5py.File(path, "r") as f:
            counts = getattr(solver, "feature_kind", "") == "counts"
            if info.sparse:
                _scan_csr(path, f["X"], info, counts)
            else:
                _scan_dense(path, f["X"], info, counts)
            if info.has_labels:
                top = _scan_labels(path, f["y"], getattr(solver, "label_kind", None))
                info = replace(info, top_label=top)
    except DataError:
        raise
    except H5_DAMAGE as exc:
        raise DataError(f"{path}: truncated or corrupt HDF5 file ({exc})") from None
    return info


def _numeric(path: str | Path, name: str, ds: h5py.Dataset) -> None:
    if ds.dtype.kind not in "fiub":
        raise DataError(f"{path}: {name} has dtype {ds.dtype}; it must be numeric")


def _read(path: str | Path, name: str, ds: h5py.Dataset, lo: int, hi: int) -> np.ndarray:
    try:
        return np.asarray(ds[lo:hi])
    except H5_DAMAGE as exc:
        raise DataError(f"{path}: truncated or corrupt HDF5 file: reading {name} entries "
                        f"{lo}..{hi - 1} failed ({exc})") from None


_COUNTS_RULE = "values must be counts >= 0 for this algorithm"


def _scan_dense(path: str | Path, X: h5py.Dataset, info: DatasetInfo, counts: bool) -> None:
    _numeric(path, "X", X)
    step = max(1, CHUNK_ROWS * 64 // info.features)
    for lo in range(0, info.rows, step):
        block = _read(path, "X rows", X, lo, min(lo + step, info.rows))
        finite = np.isfinite(block)
        bad = ~finite | (counts & (np.where(finite, block, 0.0) < 0))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            why = "values must be finite" if not finite[r, c] else _COUNTS_RULE
            raise DataError(f"{path}: row {lo + int(r)}: X[{lo + int(r)}, {int(c)}] is "
                            f"{block[r, c]}; {why}")


def _scan_csr(path: str | Path, X: h5py.Group, info: DatasetInfo, counts: bool) -> None:
    data, indices, indptr = X["data"], X["indices"], X["indptr"]
    for name, ds in (("X/data", data), ("X/indices", indices), ("X/indptr", indptr)):
        _numeric(path, name, ds)
        if ds.ndim != 1:
            raise DataError(f"{path}: {name} has shape {ds.shape}; it must be 1-D")
        if name != "X/data" and ds.dtype.kind not in "iu":
            raise DataError(f"{path}: {name} has dtype {ds.dtype}; it must hold integers (int64)")
    if data.shape != indices.shape:
        raise DataError(f"{path}: X/data has {data.shape[0]} entries and X/indices "
                        f"{indices.shape[0]}; they must match")
    step = CHUNK_ROWS * 16
    prev = 0
    for lo in range(0, info.rows + 1, step):
        ptr = _read(path, "X/indptr", indptr, lo, min(lo + step, info.rows + 1)).astype(np.int64)
        if lo == 0 and ptr[0] != 0:
            raise DataError(f"{path}: X/indptr[0] is {ptr[0]}; it must be 0")
        drops = np.flatnonzero(np.diff(np.concatenate([[prev], ptr])) < 0)
        if drops.size:
            row = lo + int(drops[0]) - 1
            raise DataError(f"{path}: row {row}: X/indptr decreases (row has a negative length)")
        prev = int(ptr[-1])
    if prev != data.shape[0]:
        raise DataError(f"{path}: X/indptr ends at {prev} but X/data has {data.shape[0]} entries "
                        f"(rows {info.rows})")
    for lo in range(0, data.shape[0], step):
        hi = min(lo + step, data.shape[0])
        vals = _read(path, "X/data", data, lo, hi)
        cols = _read(path, "X/indices", indices, lo, hi)
        finite = np.isfinite(vals)
        bad_val = ~finite | (counts & (np.where(finite, vals, 0.0) < 0))
        bad_col = (cols < 0) | (cols >= info.features)
        if bad_val.any() or bad_col.any():
            i = int(np.flatnonzero(bad_val | bad_col)[0])
            row = int(np.searchsorted(indptr[:], lo + i, side="right")) - 1
            what = (f"value {vals[i]}; {'values must be finite' if not finite[i] else _COUNTS_RULE}"
                    if bad_val[i] else f"column index {cols[i]}; allowed 0..{info.features - 1}")
            raise DataError(f"{path}: row {row}: X has {what}")


#: Per label kind a solver declares: the test every label must pass, and the rule in words.
LABEL_RULES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "binary": (lambda y: (y == 0) | (y == 1), "labels must be 0 or 1"),
    "classes": (lambda y: (y >= 0) & (y == np.round(y)) & (y < 2**31),
                "labels must be class numbers 0, 1, 2, ..."),
    "real": (lambda y: np.ones(len(y), dtype=bool), ""),
}


def _scan_labels(path: str | Path, y: h5py.Dataset, kind: str | None) -> float | None:
    """Check every label against the rule of ``kind``; returns the highest (None: no rows)."""
    _numeric(path, "y", y)
    top: float | None = None
    ok, rule = LABEL_RULES.get(kind or "real", LABEL_RULES["real"])
    step = CHUNK_ROWS * 16
    for lo in range(0, y.shape[0], step):
        block = _read(path, "y", y, lo, min(lo + step, y.shape[0])).astype(np.float64)
        finite = np.isfinite(block)
        bad = ~finite | ~np.where(finite, ok(np.where(finite, block, 0.0)), False)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            why = "labels must be finite" if not finite[i] else f"{rule} for this algorithm"
            raise DataError(f"{path}: row {lo + i}: y is {block[i]}; {why}")
        if block.size:
            top = max(float(block.max()), -math.inf if top is None else top)
    return top


def read_shard(path: str | Path, rank: int, size: int) -> Shard:
    """Rank ``rank`` of ``size``'s contiguous rows of the HDF5 dataset at ``path``."""
    with h5py.File(path, "r") as f:
        X = f["X"]
        if isinstance(X, h5py.Group):
            rows, feats = (int(v) for v in X.attrs["shape"])
            lo, hi = row_bounds(rows, size, rank)
            ptr = X["indptr"][lo : hi + 1].astype(np.int64)
            a, b = int(ptr[0]), int(ptr[-1])
            Xs = sp.csr_matrix(
                (X["data"][a:b].astype(np.float64), X["indices"][a:b], ptr - a),
                shape=(hi - lo, feats),
            )
        else:
            rows = int(X.shape[0])
            lo, hi = row_bounds(rows, size, rank)
            Xs = np.asarray(X[lo:hi], dtype=np.float64)
        y = np.asarray(f["y"][lo:hi], dtype=np.float64) if "y" in f else None
    return Shard(X=Xs, y=y, row_start=lo, n_rows=rows)
