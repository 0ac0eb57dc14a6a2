"""Datasets: synthetic generators, the HDF5 format, and per-rank row shards.

HDF5 layout (the native format):

* ``/X``: dense features, shape (rows, features), float64; or a group ``/X`` holding a CSR
  matrix as ``data`` (float64), ``indices`` (int64), ``indptr`` (int64, rows + 1) with the
  attribute ``shape = (rows, features)``.
* ``/y``: optional labels or targets, shape (rows,).

A rank reads only its own rows (``read_shard``), never the whole file. ``check_file`` scans a
file in row chunks before any rank starts and names the file and the first bad row.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.sparse as sp

from jobs.base import Shard
from slaq_mpi.errors import ConfigError, DataError

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


# --- synthetic generators -------------------------------------------------------------

def _sparse_rows(rng: np.random.Generator, n: int, d: int, density: float) -> sp.csr_matrix:
    """``n`` x ``d`` CSR rows with about a ``density`` fraction of standard-normal entries."""
    per_row = rng.binomial(d, density, size=n)
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(0, d, size=len(rows))
    X = sp.csr_matrix((rng.standard_normal(len(rows)), (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    return X


def _features(rng: np.random.Generator, n: int, d: int, density: float) -> Any:
    if density < 1.0:
        return _sparse_rows(rng, n, d, density)
    return rng.standard_normal((n, d))


def _classification(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    w = rng0.standard_normal(p["features"]) / np.sqrt(p["features"])
    noise = float(p.get("noise", 0.5))
    density = float(p.get("density", 1.0))
    scale = 3.0 / np.sqrt(min(max(density, 1e-12), 1.0))

    def chunk(rng: np.random.Generator, n: int) -> tuple[Any, np.ndarray]:
        X = _features(rng, n, p["features"], density)
        y = (np.asarray(X @ w) * scale + noise * rng.standard_normal(n) > 0).astype(np.float64)
        return X, y

    return chunk


def _regression(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    w = rng0.standard_normal(p["features"])
    noise = float(p.get("noise", 0.1))
    density = float(p.get("density", 1.0))

    def chunk(rng: np.random.Generator, n: int) -> tuple[Any, np.ndarray]:
        X = _features(rng, n, p["features"], density)
        return X, np.asarray(X @ w) + noise * rng.standard_normal(n)

    return chunk


def _blobs(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    centers = rng0.uniform(-5.0, 5.0, size=(int(p.get("centers", 8)), p["features"]))
    spread = float(p.get("spread", 1.0))

    def chunk(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        lab = rng.integers(0, len(centers), size=n)
        X = centers[lab] + spread * rng.standard_normal((n, p["features"]))
        return X, lab.astype(np.float64)

    return chunk


def _documents(rng0: np.random.Generator, p: Mapping[str, Any]) -> Callable[..., Any]:
    """Bag-of-words counts from an LDA model: ``features`` words, ``topics`` topics."""
    vocab, k = int(p["features"]), int(p.get("topics", 10))
    length, alpha = int(p.get("doc_length", 100)), float(p.get("alpha", 0.1))
    if k < 1 or length < 1 or alpha <= 0.0:
        raise DataError("documents: topics and doc_length must be >= 1 and alpha > 0")
    cum_beta = np.cumsum(rng0.dirichlet(np.full(vocab, 0.05), size=k), axis=1)

    def chunk(rng: np.random.Generator, n: int) -> tuple[sp.csr_matrix, None]:
        theta = rng.dirichlet(np.full(k, alpha), size=n)
        sizes = np.maximum(rng.poisson(length, size=n), 1)
        doc = np.repeat(np.arange(n), sizes)
        u = rng.random(len(doc))
        topic = np.minimum((u[:, None] > np.cumsum(theta, axis=1)[doc]).sum(axis=1), k - 1)
        word = np.empty(len(doc), dtype=np.int64)
        for t in range(k):
            at = np.flatnonzero(topic == t)
            word[at] = np.searchsorted(cum_beta[t], rng.random(len(at)) * cum_beta[t, -1], side="right")
        word = np.minimum(word, vocab - 1)
        X = sp.csr_matrix((np.ones(len(doc)), (doc, word)), shape=(n, vocab))
        X.sum_duplicates()
        return X, None

    return chunk


# generator name -> (factory, optional parameter names with their types)
GENERATORS: dict[str, tuple[Callable[..., Any], dict[str, type]]] = {
    "classification": (_classification, {"noise": float, "density": float}),
    "regression": (_regression, {"noise": float, "density": float}),
    "blobs": (_blobs, {"centers": int, "spread": float}),
    "documents": (_documents, {"topics": int, "doc_length": int, "alpha": float}),
}
GENERATOR_REQUIRED: dict[str, type] = {"rows": int, "features": int}

#: The allowed range of every generator parameter, as the experiment YAML checks it
#: (``config._dataset``): integers (sizes, counts) >= 1, the seed >= 0, numbers >= 0 and
#: finite, ``alpha`` and ``density`` > 0, ``density`` <= 1. ``slaq data make`` applies the same.
SEED_MAX = 2**63 - 1  # seeds are kept in HDF5 attributes as 64-bit integers
GENERATOR_MIN: dict[str, tuple[float, bool]] = {  # name -> (lowest, whether lowest itself is refused)
    "rows": (1, False), "features": (1, False), "seed": (0, False), "centers": (1, False),
    "topics": (1, False), "doc_length": (1, False), "noise": (0.0, False), "spread": (0.0, False),
    "alpha": (0.0, True), "density": (0.0, True),
}


def generator_param_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the generator parameter ``key`` (None: nothing): the
    allowed range, the same as the experiment YAML's (``config._dataset``) checks."""
    optional = {k: t for _, opts in GENERATORS.values() for k, t in opts.items()}
    want = {**GENERATOR_REQUIRED, "seed": int, **optional}[key]
    lo, open_lo = GENERATOR_MIN[key]
    if want is int:
        if key == "seed" and not isinstance(value, bool) and isinstance(value, int | np.integer) \
                and value > SEED_MAX:
            return f"must be an integer in [0, {SEED_MAX}]"
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
            return f"must be an integer >= {int(lo)}"
        return None
    rng = f"> {lo:g}" if open_lo else f">= {lo:g}"
    if (isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating)
            or not math.isfinite(value) or value < lo or (open_lo and value == lo)):
        return "must be a fraction in (0, 1]" if key == "density" else f"must be a finite number {rng}"
    if key == "density" and value > 1:
        return "must be a fraction in (0, 1]"
    return None

#: Which label kinds (a solver's ``label_kind``) accept the labels of each kind a generator writes.
_ACCEPTS = {"binary": {"binary"}, "classes": {"binary", "classes"},
            "real": {"binary", "classes", "real"}}


def generator_top_label(generator: str, params: Mapping[str, Any]) -> float | None:
    """The highest label ``generator`` writes with ``params`` (None: real-valued or none)."""
    if generator == "classification":
        return 1.0
    if generator == "blobs":
        return float(int(params.get("centers", 8)) - 1)
    return None


def generator_label_problem(generator: str, params: Mapping[str, Any], solver: Any) -> str | None:
    """Why ``solver`` cannot use the labels ``generator`` writes (None if it can): the same
    rules ``check_file`` applies to a data file's labels."""
    centers = int(params.get("centers", 8))
    writes = {"classification": "binary", "regression": "real",
              "blobs": "binary" if centers <= 2 else "classes"}.get(generator)
    if writes is None:
        return "it writes no labels, and this algorithm needs them" if getattr(
            solver, "needs_labels", False) else None
    want = getattr(solver, "label_kind", None)
    if want is None or writes in _ACCEPTS.get(want, {writes}):
        return None
    what = {"real": "real-valued targets", "classes": f"class labels 0..{centers - 1}"}[writes]
    return f"it writes {what}; {_LABEL_RULES[want][1]} for this algorithm"


def _chunk_rows(generator: str, p: Mapping[str, Any]) -> int:
    feats = int(p["features"])
    if generator == "documents":
        per_row = int(p.get("doc_length", 100)) * int(p.get("topics", 10))
        return max(1, min(CHUNK_ROWS, 2**22 // max(per_row, 1)))
    return CHUNK_ROWS if feats <= 256 else max(1, CHUNK_ROWS * 256 // feats)


def generate(spec: DatasetSpec, path: Path, seed: int) -> None:
    """Write the synthetic dataset ``spec`` to ``path`` in row chunks (atomically).

    Dense generators write ``/X`` as an array; ``documents`` (and ``density`` < 1) write the
    CSR group. Memory use is one chunk, whatever the number of rows.
    """
    assert spec.generator is not None
    factory, _ = GENERATORS[spec.generator]
    p = dict(spec.params)
    rows, feats = int(p["rows"]), int(p["features"])
    data_seed = int(p.get("seed", seed))
    chunk = factory(np.random.default_rng([data_seed, 0]), p)
    step = _chunk_rows(spec.generator, p)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            writer = RowWriter(f, rows, feats)
            for i, lo in enumerate(range(0, rows, step)):
                Xc, yc = chunk(np.random.default_rng([data_seed, i + 1]), min(step, rows - lo))
                writer.append(Xc, yc)
            writer.close()
            f.attrs["generator"] = json.dumps({"generator": spec.generator, **p, "seed": data_seed})
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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


def generated_bytes(spec: DatasetSpec) -> float:
    """About how many bytes generating ``spec`` writes (0 for a file dataset)."""
    if spec.generator is None:
        return 0.0
    p = spec.params
    rows, feats = float(p["rows"]), float(p["features"])
    if spec.generator == "documents":  # CSR: a value and a column index per distinct word
        return rows * (min(float(p.get("doc_length", 100)), feats) * 16.0 + 16.0)
    density = float(p.get("density", 1.0))
    if density < 1.0:
        return rows * (feats * density * 16.0 + 16.0)
    return rows * (feats + 1.0) * 8.0


def check_space(needed: float, where: Path, what: str) -> None:
    """Refuse to write about ``needed`` bytes under ``where`` (which may not exist yet) when its
    file system has less free space than that.

    Raises:
        ConfigError: naming ``what``, the size and the free space.
    """
    base = where.resolve()
    while not base.exists():
        base = base.parent
    free = shutil.disk_usage(base).free
    if needed > free:
        raise ConfigError(what, f"{needed / 1e9:.3g} GB", f"generating it needs more than the "
                          f"{free / 1e9:.3g} GB free under {base}; make it smaller or free space")


FINGERPRINT_BYTES = 1 << 20  # the first and last MiB of a data file are hashed


def fingerprint(path: str | Path) -> str:
    """A cheap fingerprint of a data file: its size and a SHA-256 of its first and last MiB
    (a file regenerated or replaced differs there; a touched or copied one does not)."""
    p = Path(path)
    size = p.stat().st_size
    digest = hashlib.sha256()
    with open(p, "rb") as fh:
        digest.update(fh.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            fh.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            digest.update(fh.read(FINGERPRINT_BYTES))
    return f"{size}:{digest.hexdigest()}"


def materialize(spec: DatasetSpec, data_dir: Path, seed: int) -> Path:
    """The HDF5 file for ``spec``: its path, or a generated file under ``data_dir``."""
    if spec.path is not None:
        return Path(spec.path)
    path = data_dir / f"{spec.key(seed)}.h5"
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
    ``"real"`` (any finite number); without one, labels are only checked to be finite.

    Raises:
        DataError: naming the file and, where one is at fault, the first bad row.
    """
    info = inspect(path)
    if getattr(solver, "needs_labels", False) and not info.has_labels:
        raise DataError(f"{path}: this algorithm needs labels, and the file has no 'y'")
    try:
        with h5py.File(path, "r") as f:
            if info.sparse:
                _scan_csr(path, f["X"], info)
            else:
                _scan_dense(path, f["X"], info)
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


def _scan_dense(path: str | Path, X: h5py.Dataset, info: DatasetInfo) -> None:
    _numeric(path, "X", X)
    step = max(1, CHUNK_ROWS * 64 // info.features)
    for lo in range(0, info.rows, step):
        block = _read(path, "X rows", X, lo, min(lo + step, info.rows))
        bad = ~np.isfinite(block)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise DataError(f"{path}: row {lo + int(r)}: X[{lo + int(r)}, {int(c)}] is "
                            f"{block[r, c]}; values must be finite")


def _scan_csr(path: str | Path, X: h5py.Group, info: DatasetInfo) -> None:
    data, indices, indptr = X["data"], X["indices"], X["indptr"]
    for name, ds in (("X/data", data), ("X/indices", indices), ("X/indptr", indptr)):
        _numeric(path, name, ds)
        if ds.ndim != 1:
            raise DataError(f"{path}: {name} has shape {ds.shape}; it must be 1-D")
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
        bad_val = ~np.isfinite(vals)
        bad_col = (cols < 0) | (cols >= info.features)
        if bad_val.any() or bad_col.any():
            i = int(np.flatnonzero(bad_val | bad_col)[0])
            row = int(np.searchsorted(indptr[:], lo + i, side="right")) - 1
            what = (f"value {vals[i]}; values must be finite" if bad_val[i]
                    else f"column index {cols[i]}; allowed 0..{info.features - 1}")
            raise DataError(f"{path}: row {row}: X has {what}")


_LABEL_RULES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "binary": (lambda y: (y == 0) | (y == 1), "labels must be 0 or 1"),
    "classes": (lambda y: (y >= 0) & (y == np.round(y)) & (y < 2**31),
                "labels must be class numbers 0, 1, 2, ..."),
    "real": (lambda y: np.ones(len(y), dtype=bool), ""),
}


def _scan_labels(path: str | Path, y: h5py.Dataset, kind: str | None) -> float | None:
    """Check every label against the rule of ``kind``; returns the highest (None: no rows)."""
    _numeric(path, "y", y)
    top: float | None = None
    ok, rule = _LABEL_RULES.get(kind or "real", _LABEL_RULES["real"])
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
