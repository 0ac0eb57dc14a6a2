"""Synthetic datasets: the generators, their parameters' rules, and the files they write.

Each generator writes rows in chunks through :class:`~slaq_mpi.data.datasets.RowWriter` (the
HDF5 format of :mod:`slaq_mpi.data.datasets`), so no dataset is ever held in memory whole; the same
parameters and seed give the same file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.sparse as sp

from slaq_mpi.data import cache
from slaq_mpi.data.datasets import CHUNK_ROWS, LABEL_RULES, DatasetSpec, RowWriter
from slaq_mpi.errors import ConfigError, DataError
from slaq_mpi.storage.durable import replacing
from slaq_mpi.storage.outpaths import nearest_existing

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
        if not isinstance(value, bool) and isinstance(value, int | np.integer) and value > SEED_MAX:
            return f"must be an integer in [{int(lo)}, {SEED_MAX}]"
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
    """Why ``solver`` cannot use the data ``generator`` writes (None if it can): the same
    rules ``check_file`` applies to a data file's labels and counts."""
    if getattr(solver, "feature_kind", "") == "counts" and generator != "documents":
        return "it writes real-valued features (some negative); this algorithm needs counts >= 0"
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
    return f"it writes {what}; {LABEL_RULES[want][1]} for this algorithm"


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
    # durable: a resume after a node crash reuses this file
    with replacing(path, path.with_name(path.name + f".tmp{os.getpid()}")) as tmp, \
            h5py.File(tmp, "w") as f:
        writer = RowWriter(f, rows, feats)
        for i, lo in enumerate(range(0, rows, step)):
            Xc, yc = chunk(np.random.default_rng([data_seed, i + 1]), min(step, rows - lo))
            writer.append(Xc, yc)
        writer.close()
        f.attrs["generator"] = _description(spec, seed)


def _description(spec: DatasetSpec, seed: int) -> str:
    """The ``generator`` attribute of the file ``spec`` generates with job seed ``seed``: JSON
    of the generator, its parameters and the data seed."""
    p = dict(spec.params)
    return json.dumps({"generator": spec.generator, **p, "seed": int(p.get("seed", seed))})


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
    base = nearest_existing(where)
    free = shutil.disk_usage(base).free
    if needed > free:
        raise ConfigError(what, f"{needed / 1e9:.3g} GB", f"generating it needs more than the "
                          f"{free / 1e9:.3g} GB free under {base}; make it smaller or free space")


def check_generated_space(datasets: Iterable[tuple[DatasetSpec, int]], data_dir: Path,
                          what: str) -> None:
    """Refuse to start a run whose generated datasets (``(spec, job seed)`` pairs; each
    distinct one once) that neither ``data_dir`` nor the data cache holds yet do not fit in
    the free space of the cache's file system.

    Raises:
        ConfigError: naming ``what``, the size and the free space.
    """
    todo = {spec.key(seed): spec for spec, seed in datasets
            if spec.generator is not None and will_generate(spec, data_dir, seed)}
    if todo:
        check_space(sum(map(generated_bytes, todo.values())), cache.cache_dir(), what)


def materialize(spec: DatasetSpec, data_dir: Path, seed: int) -> Path:
    """The HDF5 file for ``spec``: its path, or ``data_dir/<key>.h5`` for a generated one, the
    file the data cache keeps for this spec and seed (:mod:`slaq_mpi.data.cache`), generated
    there first unless a run made it before. A cache that cannot be written is passed over,
    with a line saying so: the file is generated in ``data_dir``."""
    if spec.path is not None:
        return Path(spec.path)
    path = data_dir / f"{spec.key(seed)}.h5"
    if path.exists():  # a link whose cached file was removed is made again
        return path
    try:
        kept = cache.cached(spec.key(seed), _description(spec, seed),
                            lambda tmp: generate(spec, tmp, seed))
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home directory to find it in
        why = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.filename else exc
        print(f"slaq: the data cache cannot be used ({why}); generating {path.name} in {data_dir} "
              f"(set {cache.CACHE_ENV} to a directory every node can write)", flush=True)
        generate(spec, path, seed)
        return path
    cache.link(kept, path)
    return path


def will_generate(spec: DatasetSpec, data_dir: Path, seed: int) -> bool:
    """Whether :func:`materialize` would generate ``spec`` (neither ``data_dir`` nor the data
    cache holds it yet)."""
    if spec.generator is None or (data_dir / f"{spec.key(seed)}.h5").exists():
        return False
    try:
        return not cache.holds(spec.key(seed), _description(spec, seed))
    except (OSError, RuntimeError):
        return True
