"""Wall time of the simulator: configs/paper.yaml per policy, configs/scale.yaml for 100 epochs.

Prints progress, then ONE JSON line last:
``{"paper_s": {policy: seconds}, "scale_s": seconds, ...}`` (wall seconds; ``*_cpu_s`` give the
CPU seconds of this process, which show how much of the wall time was lost to a busy machine).
Targets (issue 5): paper <= 10 s per policy, scale (100 epochs, slaq) <= 60 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from slaq_mpi import config
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
    args = ap.parse_args(argv)
    paper = config.load(args.paper, check_files=False)
    paper_s: dict[str, float | None] = {}
    paper_cpu: dict[str, float | None] = {}
    for name in args.policy or ["slaq", "fair", "oracle"]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            run_policies(paper, [name])
        except (PolicyError, ImportError) as exc:
            print(f"paper {name}: unavailable ({exc})", file=sys.stderr)
            paper_s[name] = paper_cpu[name] = None
            continue
        paper_s[name] = round(time.perf_counter() - t0, 3)
        paper_cpu[name] = round(time.process_time() - c0, 3)
        print(f"paper {name}: {paper_s[name]} s", file=sys.stderr, flush=True)
    scale = config.load(args.scale, check_files=False)
    settings, jobs = prepare(scale)
    scale_s: float | None
    scale_cpu: float | None = None
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        run_policies(scale, [args.scale_policy], max_epochs=args.scale_epochs,
                     progress=lambda m: print(m, file=sys.stderr, flush=True))
        scale_s = round(time.perf_counter() - t0, 3)
        scale_cpu = round(time.process_time() - c0, 3)
    except (PolicyError, ImportError) as exc:
        print(f"scale {args.scale_policy}: unavailable ({exc})", file=sys.stderr)
        scale_s = None
    print(f"scale {args.scale_policy}: {scale_s} s for {args.scale_epochs} epochs", file=sys.stderr)
    print(json.dumps({"paper_s": paper_s, "scale_s": scale_s, "paper_cpu_s": paper_cpu,
                      "scale_cpu_s": scale_cpu, "scale_policy": args.scale_policy,
                      "scale_epochs": args.scale_epochs, "scale_jobs": len(jobs),
                      "scale_cores": settings.capacity}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
