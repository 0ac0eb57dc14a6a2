"""slaq against fair and the oracle on configs/paper.yaml, over several workload draws.

One seed draws one workload (arrival times, job mix, sizes, recorded curves), and a single draw
can favour any policy. So a change to the brain is judged here on several draws, not on the
config's own seed only, and on the time to 90% loss reduction as well as the average: a forecast
can lower the average by keeping nearly converged jobs active while new jobs reach 90% later.
The draws are those of ``slaq simulate CONFIG --draws K`` (seeds FIRST..FIRST+K-1, run in
parallel processes: :mod:`slaq_mpi.sim.draws`), which also gives medians and quartiles.

Prints a line per seed (progress on stderr), then ONE JSON line last:
``{"seeds": [...], "avg_normalized_loss": {seed: {policy: value}},
"slaq_below_fair_pct": {"per_seed": [...], "mean": x}, "slaq_above_oracle_pct": {...},
"oracle_below_fair_pct": {...}, "slaq_above_oracle_job_s_pct": {...},
"slaq_t90_below_fair_pct": {...}}`` (the last: slaq's mean time to 90% loss reduction). Averages and
job-seconds (``normalized_loss_job_s``) use the common window of each seed's runs (as
``slaq simulate`` does).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from slaq_mpi.config import experiment as config
from slaq_mpi.sim.draws import run_draws

ROOT = Path(__file__).resolve().parent.parent


def _pct(values: list[float]) -> dict[str, object]:
    return {"per_seed": [round(v, 2) for v in values], "mean": round(float(np.mean(values)), 2)}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default=str(ROOT / "configs" / "paper.yaml"))
    ap.add_argument("--seed", type=int, default=None, help="the first seed (default: the config's)")
    ap.add_argument("--draws", type=int, default=20, help="how many draws (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=None, help="processes (default: the cores)")
    args = ap.parse_args(argv)
    base = config.load(args.config, check_files=False)
    first = base.seed if args.seed is None else args.seed
    ds = run_draws(base, ["slaq", "fair", "oracle"], first, args.draws, jobs=args.jobs,
                   progress=lambda line: print(line, file=sys.stderr, flush=True))
    seeds = ds.seeds
    table: dict[int, dict[str, float]] = {}
    below, above, oracle_below, above_job_s, t90_below = [], [], [], [], []
    for seed, draw in zip(seeds, ds.draws, strict=True):
        rows = draw.rows
        avg = {name: float(row["avg_normalized_loss"]) for name, row in rows.items()}
        table[seed] = {name: round(v, 5) for name, v in avg.items()}
        below.append(100.0 * (1.0 - avg["slaq"] / avg["fair"]))
        above.append(100.0 * (avg["slaq"] / avg["oracle"] - 1.0))
        oracle_below.append(100.0 * (1.0 - avg["oracle"] / avg["fair"]))
        job_s = {name: float(row["normalized_loss_job_s"]) for name, row in rows.items()}
        above_job_s.append(100.0 * (job_s["slaq"] / job_s["oracle"] - 1.0))
        t90 = {name: float(row["mean_time_to_90"]) for name, row in rows.items()}
        t90_below.append(100.0 * (1.0 - t90["slaq"] / t90["fair"]))
        print(f"seed {seed}: slaq {avg['slaq']:.4f} fair {avg['fair']:.4f} oracle {avg['oracle']:.4f}"
              f" | slaq {below[-1]:.1f}% below fair, {above[-1]:+.1f}% vs oracle;"
              f" oracle {oracle_below[-1]:.1f}% below fair; job-s slaq {above_job_s[-1]:+.1f}% vs oracle;"
              f" t90 slaq {t90_below[-1]:.1f}% below fair",
              file=sys.stderr, flush=True)
    print(json.dumps({"seeds": seeds, "avg_normalized_loss": table,
                      "slaq_below_fair_pct": _pct(below), "slaq_above_oracle_pct": _pct(above),
                      "oracle_below_fair_pct": _pct(oracle_below),
                      "slaq_above_oracle_job_s_pct": _pct(above_job_s),
                      "slaq_t90_below_fair_pct": _pct(t90_below), "config": args.config}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
