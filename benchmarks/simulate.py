"""Wall time of the simulator: configs/paper.yaml per policy, configs/scale.yaml for 100 epochs.

Prints progress, then ONE JSON line last:
``{"paper_s": {policy: seconds}, "scale_s": seconds, ...}`` (wall seconds; ``*_cpu_s`` give the
CPU seconds of this process, which show how much of the wall time was lost to a busy machine).
Each figure is the best of ``--repeat`` runs (default 3), as ``timeit`` reports: on a shared
machine the slower runs measure the neighbours; every run's wall time is in ``*_runs_s``.
Targets (issue 5): paper <= 10 s per policy, scale (100 epochs, slaq) <= 60 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from slaq_mpi.config import experiment as config
from slaq_mpi.policies import PolicyError
from slaq_mpi.sim import prepare, run_policies

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--paper", default=str(ROOT / "configs" / "paper.yaml"))
    ap.add_argument("--scale", default=str(ROOT / "configs" / "scale.yaml"))
    ap.add_argument("--policy", action="append", help="paper policies (default: slaq fair oracle)")
    ap.add_argument("--scale-policy", default="slaq")
    ap.add_argument("--scale-epochs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is reported")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    paper = config.load(args.paper, check_files=False)
    paper_s: dict[str, float | None] = {}
    paper_cpu: dict[str, float | None] = {}
    paper_runs: dict[str, list[float]] = {}
    for name in args.policy or ["slaq", "fair", "oracle"]:
        try:
            walls, cpus = _timed(lambda name=name: run_policies(paper, [name]), args.repeat)
        except (PolicyError, ImportError) as exc:
            print(f"paper {name}: unavailable ({exc})", file=sys.stderr)
            paper_s[name] = paper_cpu[name] = None
            continue
        paper_s[name], paper_cpu[name], paper_runs[name] = min(walls), min(cpus), walls
        print(f"paper {name}: {walls} s", file=sys.stderr, flush=True)
    scale = config.load(args.scale, check_files=False)
    settings, jobs = prepare(scale)
    scale_s: float | None = None
    scale_cpu: float | None = None
    scale_runs: list[float] = []
    try:
        scale_runs, cpus = _timed(lambda: run_policies(
            scale, [args.scale_policy], max_epochs=args.scale_epochs,
            progress=lambda m: print(m, file=sys.stderr, flush=True)), args.repeat)
        scale_s, scale_cpu = min(scale_runs), min(cpus)
    except (PolicyError, ImportError) as exc:
        print(f"scale {args.scale_policy}: unavailable ({exc})", file=sys.stderr)
    print(f"scale {args.scale_policy}: {scale_runs} s for {args.scale_epochs} epochs", file=sys.stderr)
    print(json.dumps({"paper_s": paper_s, "scale_s": scale_s, "paper_cpu_s": paper_cpu,
                      "scale_cpu_s": scale_cpu, "paper_runs_s": paper_runs, "scale_runs_s": scale_runs,
                      "repeat": args.repeat, "scale_policy": args.scale_policy,
                      "scale_epochs": args.scale_epochs, "scale_jobs": len(jobs),
                      "scale_cores": settings.capacity}))
    return 0


def _timed(work: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``repeat`` calls of ``work``."""
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        work()
        walls.append(round(time.perf_counter() - t0, 3))
        cpus.append(round(time.process_time() - c0, 3))
    return walls, cpus


if __name__ == "__main__":
    sys.exit(main())
