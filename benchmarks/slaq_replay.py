"""CPU time of ``slaq``'s decisions in the paper's experiment, replayed.

Simulates one draw of a config under ``slaq``, keeping every snapshot the policy was given and
its answer, then replays the snapshots through a fresh policy object ``--repeat`` times (CPU
time of the policy alone, not of the simulator), checking that every answer is the same.
On a machine shared with other work the least of the repeats is the figure (as ``timeit``).

Prints ONE JSON line last: ``decisions``, ``ms_per_decision`` (least over repeats),
``runs_ms_per_decision``, ``differing`` (answers that changed on replay: 0) and the seed.

    python benchmarks/slaq_replay.py configs/paper.yaml --seed 2017
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from slaq_mpi.config import experiment as config
from slaq_mpi.policies.slaq import SlaqPolicy
from slaq_mpi.policies.snapshot import ClusterSnapshot
from slaq_mpi.sim.engine import simulate
from slaq_mpi.sim.run import prepare


class _Recording(SlaqPolicy):
    """``slaq``, keeping every snapshot and answer."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[ClusterSnapshot, dict[str, int]]] = []

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """As ``slaq``; the snapshot and the answer are kept."""
        alloc = super().allocate(snapshot)
        self.seen.append((snapshot, alloc))
        return alloc


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, help="the workload's seed (default: the config's)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    spec = config.load(args.config, check_files=False)
    if args.seed is not None:
        spec = replace(spec, seed=args.seed)
    settings, jobs = prepare(spec)
    rec = _Recording()
    simulate(jobs, rec, capacity=settings.capacity, epoch_seconds=spec.epoch_seconds, seed=spec.seed,
             time_noise=settings.time_noise, reconfigure_seconds=settings.reconfigure_seconds,
             epoch_model=settings.epoch_model)
    runs, differing = [], 0
    for _ in range(max(1, args.repeat)):
        policy = SlaqPolicy()
        start = time.process_time()
        answers = [policy.allocate(snap) for snap, _ in rec.seen]
        runs.append((time.process_time() - start) * 1000.0 / max(len(rec.seen), 1))
        differing = sum(a != b for a, (_, b) in zip(answers, rec.seen, strict=True))
        print(f"replayed {len(rec.seen)} decisions: {runs[-1]:.2f} ms each", flush=True)
    print(json.dumps({"seed": spec.seed, "decisions": len(rec.seen), "ms_per_decision": min(runs),
                      "runs_ms_per_decision": runs, "differing": differing}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
