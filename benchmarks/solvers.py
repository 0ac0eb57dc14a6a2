"""Solver efficiency: seconds per iteration of every built-in solver on one rank against a plain
serial numpy version of the same algorithm (benchmarks/plain_solvers.py), and memory per rank
when 8 ranks train on a 1,000,000 x 100 dense HDF5 file.

Usage: python benchmarks/solvers.py [--quick] [--skip-memory]
Prints ONE JSON line last: {"ratios": {...}, "max_ratio": ..., "peak_rss_mb_per_rank": ...,
"shard_mb": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import plain_solvers as plain  # the script's own directory is on sys.path
import scipy.sparse as sp

from jobs import SerialComm, Shard, load_solver
from slaq_mpi.data.datasets import DatasetSpec
from slaq_mpi.data.generators import generate

ROOT = Path(__file__).resolve().parent.parent


def _data(scale: float) -> dict[str, tuple[Any, np.ndarray | None]]:
    rng = np.random.default_rng(0)
    n, d = int(200_000 * scale), 50
    X = rng.standard_normal((n, d))
    yb = (X @ rng.standard_normal(d) + rng.standard_normal(n) > 0).astype(float)
    yr = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)
    centers = rng.uniform(-5, 5, (8, 20))
    lab = rng.integers(0, 8, int(100_000 * scale))
    blobs = centers[lab] + rng.standard_normal((len(lab), 20))
    docs = int(4000 * scale)
    topics = rng.dirichlet(np.full(1000, 0.05), 10)
    theta = rng.dirichlet(np.full(10, 0.1), docs)
    C = sp.csr_matrix(np.array([rng.multinomial(80, t @ topics) for t in theta]), dtype=float)
    return {"classification": (X, yb), "regression": (X, yr), "blobs": (blobs, lab.astype(float)),
            "documents": (C, None)}


CASES = {  # algorithm: (dataset kind, plain function, iterations per timing round)
    "logreg": ("classification", plain.plain_logreg, 10),
    "logreg_lbfgs": ("classification", plain.plain_logreg_lbfgs, 3),  # before it converges
    "svm": ("classification", plain.plain_svm, 10),
    "linreg": ("regression", plain.plain_linreg, 10),
    "mlp": ("blobs", plain.plain_mlp, 5),
    "kmeans": ("blobs", plain.plain_kmeans, 10),
    "gmm": ("blobs", plain.plain_gmm, 5),
    "lda": ("documents", plain.plain_lda, 2),
    "gbt": ("regression", plain.plain_gbt, 3),
}


def _per_iteration(step: Any, iterations: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iterations):
        step()
    return (time.perf_counter() - t0) / iterations


def time_solvers(scale: float, rounds: int) -> dict[str, dict[str, float]]:
    """Min-over-rounds seconds per iteration, ours and plain, rounds interleaved."""
    data = _data(scale)
    out = {}
    for name, (kind, plain_fn, iters) in CASES.items():
        X, y = data[kind]
        ours = load_solver(name)(SerialComm(), Shard(X, y, 0, X.shape[0]), {}, 7)
        ref = plain_fn(X, y, 7)
        ours.step(), ref()  # warm up (first L-BFGS step, caches)
        t_ours, t_ref = [], []
        for _ in range(rounds):
            t_ours.append(_per_iteration(ours.step, iters))
            t_ref.append(_per_iteration(ref, iters))
        out[name] = {"ours_s": min(t_ours), "plain_s": min(t_ref)}
    return out


def memory_run(rows: int, features: int, ranks: int, data_dir: Path) -> dict[str, Any]:
    """Train on ``ranks`` ranks under mpiexec on a generated dense file; the script's JSON."""
    path = data_dir / f"dense-{rows}x{features}.h5"
    if not path.exists():
        spec = DatasetSpec(generator="classification", params={"rows": rows, "features": features})
        generate(spec, path, 0)
    exe = Path(sys.executable).parent / "mpiexec"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([str(exe) if exe.exists() else "mpiexec", "-n", str(ranks), sys.executable,
                           str(ROOT / "benchmarks" / "solvers_memory.py"), str(path), "5"],
                          capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer rounds")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "slaq-bench"))
    args = parser.parse_args()
    times = time_solvers(0.25 if args.quick else 1.0, 3 if args.quick else 5)
    for name, t in times.items():
        print(f"{name:14s} ours {t['ours_s'] * 1e3:8.2f} ms/it  plain {t['plain_s'] * 1e3:8.2f} ms/it",
              file=sys.stderr)
    ratios = {k: round(v["ours_s"] / v["plain_s"], 3) for k, v in times.items()}
    result: dict[str, Any] = {"ratios": ratios, "max_ratio": max(ratios.values()), "target_ratio": 1.1,
                              "seconds_per_iteration": {k: {a: round(b, 6) for a, b in v.items()}
                                                        for k, v in times.items()}}
    if not args.skip_memory:
        rows = 100_000 if args.quick else 1_000_000
        mem = memory_run(rows, 100, 8, Path(args.data_dir))
        result.update({"memory_rows": rows, "memory_features": 100, "memory_ranks": 8,
                       "peak_rss_mb_per_rank": mem["peak_rss_mb_per_rank"],
                       "rss_before_shard_mb": mem["rss_before_shard_mb"], "shard_mb": mem["shard_mb"]})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
