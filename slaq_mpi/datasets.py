"""Datasets: synthetic generators, the HDF5 format, and per-rank row shards.

HDF5 layout (the native format):

* ``/X``: dense features, shape (rows, features), float64; or a group ``/X`` holding a CSR
  matrix as ``data`` (float64), ``indices`` (int64), ``indptr`` (int64, rows + 1) with the
  attribute ``shape = (rows, features)``.
* ``/y``: optional labels or targets, shape (rows,).

A rank reads only its own rows (``read_shard``), never the whole file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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

    def key(self) -> str:
        """A short stable name for a generated dataset file."""
        blob = json.dumps({"g": self.generator, "p": dict(self.params)}, sort_keys=True)
        return f"{self.generator}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class DatasetInfo:
    """Shape facts of an HDF5 dataset, read without loading it."""

    rows: int
    features: int
    has_labels: bool
    sparse: bool


# --- synthetic generators -------------------------------------------------------------

def _classification(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    w = rng0.standard_normal(p["features"]) / np.sqrt(p["features"])
    noise = float(p.get("noise", 0.5))

    def chunk(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        X = rng.standard_normal((n, p["features"]))
        y = (X @ w * 3.0 + noise * rng.standard_normal(n) > 0).astype(np.float64)
        return X, y

    return chunk


def _regression(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    w = rng0.standard_normal(p["features"])
    noise = float(p.get("noise", 0.1))

    def chunk(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        X = rng.standard_normal((n, p["features"]))
        return X, X @ w + noise * rng.standard_normal(n)

    return chunk


def _blobs(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    centers = rng0.uniform(-5.0, 5.0, size=(int(p.get("centers", 8)), p["features"]))
    spread = float(p.get("spread", 1.0))

    def chunk(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        lab = rng.integers(0, len(centers), size=n)
        X = centers[lab] + spread * rng.standard_normal((n, p["features"]))
        return X, lab.astype(np.float64)

    return chunk


# generator name -> (factory, optional parameter names with their types)
GENERATORS: dict[str, tuple[Callable[..., Any], dict[str, type]]] = {
    "classification": (_classification, {"noise": float}),
    "regression": (_regression, {"noise": float}),
    "blobs": (_blobs, {"centers": int, "spread": float}),
}
GENERATOR_REQUIRED: dict[str, type] = {"rows": int, "features": int}


def generate(spec: DatasetSpec, path: Path, seed: int) -> None:
    """Write the synthetic dataset ``spec`` to ``path`` in row chunks (atomically)."""
    assert spec.generator is not None
    factory, _ = GENERATORS[spec.generator]
    p = dict(spec.params)
    rows, feats = int(p["rows"]), int(p["features"])
    data_seed = int(p.get("seed", seed))
    chunk = factory(np.random.default_rng([data_seed, 0]), p)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with h5py.File(tmp, "w") as f:
        X = f.create_dataset("X", shape=(rows, feats), dtype="f8", chunks=(min(rows, 4096), feats))
        y = f.create_dataset("y", shape=(rows,), dtype="f8")
        for i, lo in enumerate(range(0, rows, CHUNK_ROWS)):
            n = min(CHUNK_ROWS, rows - lo)
            Xc, yc = chunk(np.random.default_rng([data_seed, i + 1]), n)
            X[lo : lo + n] = Xc
            y[lo : lo + n] = yc
        f.attrs["generator"] = json.dumps({"generator": spec.generator, **p, "seed": data_seed})
    os.replace(tmp, path)


def materialize(spec: DatasetSpec, data_dir: Path, seed: int) -> Path:
    """The HDF5 file for ``spec``: its path, or a generated file under ``data_dir``."""
    if spec.path is not None:
        return Path(spec.path)
    path = data_dir / f"{spec.key()}.h5"
    if not path.exists():
        generate(spec, path, seed)
    return path


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
                rows, feats = (int(v) for v in X.attrs["shape"])
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
    except OSError as exc:
        raise DataError(f"{path}: not a readable HDF5 file ({exc})") from None
    if rows < 1 or feats < 1:
        raise DataError(f"{path}: X has shape ({rows}, {feats}); need at least one row and column")
    return DatasetInfo(rows, feats, has_y, sparse)


def check_file(path: str | Path, solver: Any) -> DatasetInfo:
    """Validate a dataset file for a solver class before any rank starts.

    Raises:
        DataError: naming the file (and the row, where one is at fault).
    """
    info = inspect(path)
    if getattr(solver, "needs_labels", False) and not info.has_labels:
        raise DataError(f"{path}: this algorithm needs labels, and the file has no 'y'")
    return info


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
