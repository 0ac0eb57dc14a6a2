"""Run under mpiexec: train logistic regression on one HDF5 file, report each rank's memory.

Usage: mpiexec -n 8 python benchmarks/solvers_memory.py DATA.h5 ITERATIONS
Rank 0 prints one JSON line: peak RSS per rank (max over ranks), RSS before reading the shard,
and the shard's own size.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys

import numpy as np

from jobs import load_solver
from slaq_mpi.data.datasets import read_shard
from slaq_mpi.runtime.comm import world_group


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="HDF5 dataset (docs/data.md)")
    ap.add_argument("iterations", type=int, help="iterations of logistic regression to run")
    args = ap.parse_args()
    path, iterations = args.data, args.iterations
    group = world_group()
    before = _rss_mb()
    shard = read_shard(path, group.rank, group.size)
    shard_mb = shard.X.nbytes / 2**20 + (shard.y.nbytes / 2**20 if shard.y is not None else 0.0)
    solver = load_solver("logreg")(group, shard, {}, 0)
    losses = [solver.step() for _ in range(iterations)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    stats = group.allreduce(np.array([peak, before, shard_mb]), op="max")
    if group.rank == 0:
        print(json.dumps({"ranks": group.size, "rows": shard.n_rows, "features": shard.n_features,
                          "peak_rss_mb_per_rank": round(float(stats[0]), 1),
                          "rss_before_shard_mb": round(float(stats[1]), 1),
                          "shard_mb": round(float(stats[2]), 1), "losses": losses[:3]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
