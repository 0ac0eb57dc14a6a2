"""A solver that only sleeps, for measuring scheduling rather than this machine's cores.

One iteration on ``a`` ranks sleeps ``work / a + overhead`` seconds (``work``: one-core
seconds per iteration) and then takes part in one tiny allreduce, so the job's ranks really
synchronise every iteration while using no CPU. Its loss is a known curve of the iteration
count k (0-based, the model before the update):

    loss_k = floor + (1 - floor) * (k + 1) ** -power

the same on any number of ranks; the state is the iteration count, so a job moved between
rank sets continues exactly. The dataset is ignored (any tiny generated one will do).

Use it in a job as ``algorithm: benchmarks/sleeper.py:Sleeper`` (from the repository root, or
give the file's absolute path), e.g.::

    algorithm: benchmarks/sleeper.py:Sleeper
    dataset: {generator: blobs, rows: 256, features: 1, seed: 0}
    hyperparameters: {work: 0.5, overhead: 0.001, floor: 0.1, power: 1.0}
    stop: {max_iterations: 200}

Run as a script, it prints a job's first losses and its seconds per iteration on a few core
counts, serially (no MPI, no sleeping):

    python benchmarks/sleeper.py [--work 0.5] [--overhead 0.001] [--floor 0.1] [--power 1.0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs.base import NON_NEGATIVE, POSITIVE, Allowed, GroupComm, Shard, Solver


def sleeper_loss(k: int, floor: float, power: float) -> float:
    """The loss a :class:`Sleeper` reports at (0-based) iteration ``k``."""
    return floor + (1.0 - floor) * float(k + 1) ** -power


def iteration_seconds(work: float, overhead: float, cores: int) -> float:
    """Seconds a :class:`Sleeper` iteration sleeps on ``cores`` ranks."""
    return work / cores + overhead


class Sleeper(Solver):
    """Sleeps ``work / ranks + overhead`` seconds per iteration; loss follows a power law."""

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {"work": 0.1, "overhead": 0.001, "floor": 0.1, "power": 1.0}
    allowed: ClassVar[dict[str, Allowed]] = {
        "work": NON_NEGATIVE,
        "overhead": NON_NEGATIVE,
        "floor": Allowed(lo=0.0, hi=1.0, hi_open=True),
        "power": POSITIVE,
    }
    needs_labels: ClassVar[bool] = False
    dataset_kind: ClassVar[str] = "blobs"

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        super().__init__(comm, shard, params, seed)
        self.k = 0

    def step(self) -> float:
        """Sleep one iteration's time, meet the group in one allreduce, return the loss."""
        p = self.params
        time.sleep(iteration_seconds(float(p["work"]), float(p["overhead"]), self.comm.size))
        loss = sleeper_loss(self.k, float(p["floor"]), float(p["power"]))
        # the group's one collective of the iteration: every rank holds the same k
        agreed = self.comm.allreduce(np.array([loss]), op="max")
        self.k += 1
        return float(agreed[0])

    def get_state(self) -> dict[str, np.ndarray]:
        """The iteration count (the whole model)."""
        return {"k": np.array([self.k], dtype=np.int64)}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Continue from the iteration count in ``state``."""
        self.k = int(np.asarray(state["k"]).ravel()[0])


def main() -> None:
    """Print the loss curve and iteration times of the hyperparameters given."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key, value in Sleeper.defaults.items():
        ap.add_argument(f"--{key}", type=float, default=value, help=f"default {value}")
    ap.add_argument("--iterations", type=int, default=10, help="losses to print (default 10)")
    args = ap.parse_args()
    losses = [sleeper_loss(k, args.floor, args.power) for k in range(args.iterations)]
    print("losses: " + " ".join(f"{v:.6g}" for v in losses))
    print("seconds per iteration: " + ", ".join(
        f"{a} cores {iteration_seconds(args.work, args.overhead, a):.4g}" for a in (1, 2, 4, 8, 16, 32)))


if __name__ == "__main__":
    main()
