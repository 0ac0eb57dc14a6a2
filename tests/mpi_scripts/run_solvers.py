"""Run several solvers on the MPI world, for the rank-count and restore tests.

Usage: run_solvers.py SPEC.json OUT.json STATE_DIR full|resume

SPEC lists jobs {name, algorithm, path, params, seed, iterations, checkpoint_at}. ``full`` runs
every job from the start for ``iterations`` steps and saves the state after ``checkpoint_at``
steps to STATE_DIR/NAME.npz; ``resume`` restores those states and runs the remaining steps.
Rank 0 writes {name: [losses]} to OUT.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from jobs import load_solver
from slaq_mpi.data.datasets import read_shard
from slaq_mpi.runtime.comm import world_group


def main() -> int:
    spec_path, out_path, state_dir, mode = sys.argv[1:5]
    group = world_group()
    jobs = json.loads(Path(spec_path).read_text())
    out: dict[str, list[float]] = {}
    for job in jobs:
        shard = read_shard(job["path"], group.rank, group.size)
        solver = load_solver(job["algorithm"])(group, shard, job["params"], int(job["seed"]))
        k, total = int(job["checkpoint_at"]), int(job["iterations"])
        state_file = Path(state_dir) / f"{job['name']}.npz"
        losses: list[float] = []
        if mode == "resume":
            with np.load(state_file) as saved:
                solver.set_state({key: saved[key] for key in saved.files})
            k, total = 0, total - k
        for i in range(total):
            if mode == "full" and i == k and group.rank == 0:
                np.savez(state_file, **solver.get_state())  # leader only: get_state is local
            losses.append(float(solver.step()))
        out[job["name"]] = losses
    if group.rank == 0:
        Path(out_path).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
