"""How far the best schedules we can build are from the job-seconds bound (``sim/bound.py``).

The bound is a relaxation: if even clairvoyant schedules stay well above it, the distance of a
policy from the bound measures the bound's slack as much as the policy. This runs, on the
workloads of the given seeds of a config, ``fair`` and the ``oracle`` (for the comparison
window, as ``slaq simulate --draws`` uses) and clairvoyant *priority* schedules: at every
decision the jobs are ranked by the bound's own priority (the largest true drop of normalized
loss per core-second over any run of their next iterations, the drop to 0 at the end
included: Smith's rule on the bound's blocks) and take, in that order, as many cores as they
can use, up to the fewest cores of their fastest iteration (``smith-fast``) or the most cores
whose core-seconds per iteration stay within 1/0.9 of the least (``smith-eff90``). Each is a
real allocation in the simulator (whole cores, moves paid, one decision an epoch).

Prints one line per seed, then ONE JSON line last: per seed and schedule the job-seconds and
how far they are above the bound (percent), and the medians over the seeds.

    python benchmarks/bound_slack.py configs/paper.yaml --seed 2017 --seed 2019
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from slaq_mpi.config import experiment as config
from slaq_mpi.policies.snapshot import ClusterSnapshot
from slaq_mpi.report.evaluation import (
    common_l_star,
    comparison_window,
    normalized_loss,
    normalized_loss_job_seconds,
)
from slaq_mpi.sim.bound import bound_metrics, least_core_seconds
from slaq_mpi.sim.engine import simulate
from slaq_mpi.sim.run import prepare, run_workload
from slaq_mpi.sim.workload import SimJob

EFFICIENCY = {"smith-fast": None, "smith-eff90": 0.9}


class SmithPolicy:
    """Clairvoyant priority schedule: the jobs of largest true loss drop per core-second over
    their next iterations first, each on up to ``cores_for`` of its cores (simulator only)."""

    name = "smith"

    def __init__(self, capacity: int, efficiency: float | None) -> None:
        self.capacity = capacity
        self.efficiency = efficiency
        self._truth: dict[str, tuple[np.ndarray, float, int, int]] = {}

    def bind_truth(self, jobs: Mapping[str, SimJob]) -> None:
        """Every job's summed drops of its running-minimum normalized loss (the bound's), its
        least core-seconds per iteration, its stop iteration and the cores it may take."""
        for name, job in jobs.items():
            stop = max(int(job.stop_iter), 1)
            curve = np.asarray(job.curve[:stop], dtype=np.float64)
            shown = np.concatenate(([1.0], normalized_loss(curve, float(curve[0]), job.l_star)))
            low = np.minimum.accumulate(shown)
            cum = np.concatenate(([0.0], np.cumsum(np.append(-np.diff(low[:stop]), low[stop - 1]))))
            least = least_core_seconds(job, self.capacity)
            cores = np.arange(1, max(1, min(job.max_cores, self.capacity)) + 1)
            area = cores * job.scaling.seconds_array(cores)
            secs = job.scaling.seconds_array(cores)
            top = int(cores[np.argmin(secs)])
            if self.efficiency is not None:
                top = min(top, int(cores[area <= least / self.efficiency].max()))
            self._truth[name] = (cum, least, stop, top)

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job: the highest priorities first, each up to its cores, until none are left."""
        ranked = []
        for j in snapshot.jobs:
            cum, least, stop, top = self._truth[j.job_id]
            done = min(len(j.losses), stop - 1)
            rate = float(((cum[done + 1:] - cum[done]) / np.arange(1, stop - done + 1)).max()) / least
            ranked.append((-rate, j.arrival, j.job_id, top))
        ranked.sort()
        left = int(snapshot.capacity)
        out = {}
        for _, _, jid, top in ranked:
            out[jid] = min(top, left)
            left -= out[jid]
        return out


def run_seed(spec: Any, seed: int) -> dict[str, Any]:
    """The job-seconds of ``fair``, the oracle and the priority schedules on one draw, and the
    bound's, on the window and L* of ``fair`` and the oracle."""
    draw = replace(spec, seed=seed)
    work, runs = run_workload(draw, ["fair", "oracle"])
    window = comparison_window(runs.values())
    settings, jobs = prepare(draw)
    for name, eff in EFFICIENCY.items():
        runs[name] = simulate(jobs, SmithPolicy(settings.capacity, eff), capacity=settings.capacity,
                              epoch_seconds=draw.epoch_seconds, seed=seed,
                              time_noise=settings.time_noise,
                              reconfigure_seconds=settings.reconfigure_seconds,
                              epoch_model=settings.epoch_model)
    l_star = common_l_star(runs.values())
    bound = bound_metrics(work.jobs, work.capacity, l_star, window)["normalized_loss_job_s"]
    job_s = {name: normalized_loss_job_seconds(run, l_star, window) for name, run in runs.items()}
    return {"bound": bound, "job_s": job_s,
            "above_bound_pct": {k: 100.0 * (v / bound - 1.0) for k, v in job_s.items()}}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--seed", type=int, action="append", help="workload seeds (default: the config's)")
    args = ap.parse_args(argv)
    spec = config.load(args.config, check_files=False)
    seeds = args.seed or [spec.seed]
    per_seed = {}
    for seed in seeds:
        got = run_seed(spec, seed)
        per_seed[seed] = got
        print(f"seed {seed}: bound {got['bound']:.1f} job-s; above it: "
              + ", ".join(f"{k} {v:+.1f}%" for k, v in got["above_bound_pct"].items()), flush=True)
    names = list(next(iter(per_seed.values()))["above_bound_pct"])
    median = {k: statistics.median(s["above_bound_pct"][k] for s in per_seed.values()) for k in names}
    print(json.dumps({"seeds": per_seed, "median_above_bound_pct": median,
                      "finite": all(math.isfinite(v) for v in median.values())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
