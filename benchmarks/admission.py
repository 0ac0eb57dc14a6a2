"""How fast a running run takes added jobs, and how fast `slaq status` answers.

1. Starts an open 8-rank run (two long sleeping jobs, benchmarks/sleeper.py), then `slaq add`s
   20 short sleeping jobs one after another, and measures, per job, the time from `slaq add`
   returning to the job's first iteration (its start in metrics.h5, put on the wall clock with
   status.json's `updated` and `now`); then drains the run.
2. Builds a run directory with 1,000 jobs in its history (950 done, 50 running, 1,000
   decisions) and times `slaq status` on it.

Targets (issue 33): median add-to-first-iteration <= one epoch + 0.5 s; status <= 1 s.

Usage: python benchmarks/admission.py [--epoch S] [--adds N] [--seed S]
Prints progress lines, then one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
SLEEPER = Path(__file__).resolve().parent / "sleeper.py"
DATASET = {"generator": "blobs", "rows": 256, "features": 1, "seed": 0}
SLAQ = [sys.executable, "-m", "slaq_mpi"]


def _job(name: str, work: float, iterations: int) -> dict[str, Any]:
    return {"name": name, "algorithm": f"{SLEEPER}:Sleeper", "dataset": DATASET,
            "hyperparameters": {"work": work}, "stop": {"max_iterations": iterations}}


def _first_starts(run: Path, names: list[str]) -> dict[str, float]:
    """Wall-clock start of each named job's first iteration, for those that have one."""
    try:
        status = json.loads((run / "status.json").read_text())
        offset = float(status["updated"]) - float(status["now"])
        found = {}
        with h5py.File(run / "metrics.h5", "r") as f:
            for name in names:
                if name in f["jobs"] and len(f["jobs"][name]["time"]):
                    g = f["jobs"][name]
                    found[name] = float(g["time"][0] - g["iter_seconds"][0]) + offset
        return found
    except (OSError, KeyError, ValueError):
        return {}


def measure_adds(tmp: Path, epoch: float, adds: int, seed: int) -> dict[str, Any]:
    """Add ``adds`` jobs to an open run; the add-to-first-iteration times."""
    rng = np.random.default_rng(seed)
    run = tmp / "run"
    cfg = tmp / "open.yaml"
    cfg.write_text(yaml.safe_dump({"name": "admission", "output_dir": str(run), "ranks": 8,
                                   "epoch_seconds": epoch, "policy": "fair", "seed": seed,
                                   "open": True, "jobs": [_job("base-1", 0.2, 100000),
                                                          _job("base-2", 0.1, 100000)]}))
    proc = subprocess.Popen([*SLAQ, "run", str(cfg)], cwd=tmp, stdout=(tmp / "run.log").open("w"),
                            stderr=subprocess.STDOUT)
    while not (run / "status.json").is_file():
        if proc.poll() is not None:
            raise SystemExit(f"the run ended first: {(tmp / 'run.log').read_text()[-2000:]}")
        time.sleep(0.2)
    returned: dict[str, float] = {}
    for i in range(adds):
        name = f"added-{i:02d}"
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump([_job(name, float(rng.uniform(0.02, 0.2)), 40)]))
        res = subprocess.run([*SLAQ, "add", str(run), str(path)], cwd=tmp, capture_output=True, text=True)
        returned[name] = time.time()
        if res.returncode != 0:
            raise SystemExit(f"slaq add failed: {res.stdout}{res.stderr}")
        print(f"added {name} ({i + 1}/{adds})", flush=True)
        time.sleep(float(rng.uniform(0.2, 1.5)))
    end = time.monotonic() + 300
    starts: dict[str, float] = {}
    while len(starts) < adds and time.monotonic() < end:
        time.sleep(0.5)
        starts = _first_starts(run, list(returned))
    subprocess.run([*SLAQ, "drain", str(run)], cwd=tmp, capture_output=True)
    subprocess.run([*SLAQ, "cancel", str(run), "base-1", "base-2"], cwd=tmp, capture_output=True)
    status = proc.wait(timeout=300)
    waits = sorted(starts[n] - returned[n] for n in starts)
    return {"n": len(waits), "missing": adds - len(waits), "run_exit_status": status,
            "median_s": round(statistics.median(waits), 3) if waits else None,
            "p95_s": round(float(np.percentile(waits, 95)), 3) if waits else None,
            "max_s": round(waits[-1], 3) if waits else None,
            "target_median_s": epoch + 0.5}


def status_run(out: Path) -> None:
    """A run directory with 1,000 jobs in its history (950 done, 50 running)."""
    from slaq_mpi.storage.metrics import JobRecord, RunRecord
    from slaq_mpi.storage.status_file import RunStatus, job_status, run_utilization, write_status

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    jobs = {}
    for j in range(1000):
        running = j >= 950
        n = int(rng.integers(5, 95)) if running else 100
        k = np.arange(n)
        rec = JobRecord(name=f"job{j:04d}", algorithm="logreg", convergence="sublinear",
                        arrival=2.0 * j, max_cores=4, start=2.0 * j + 1.0,
                        status="running" if running else "done")
        rec.loss = (1.0 / (1.0 + rng.uniform(0.02, 0.2) * k) + 0.05).tolist()
        rec.time = (rec.start + 0.5 * (k + 1)).tolist()
        rec.cores, rec.iter_seconds = [2] * n, [0.5] * n
        rec.throughput, rec.attained_core_seconds = [(2, 0.5)], 1.0 * n
        if not running:
            rec.end = rec.time[-1]
        jobs[rec.name] = rec
    record = RunRecord(attrs={"name": "bench", "policy": "slaq", "capacity": 64,
                              "epoch_seconds": 2.0, "mode": "run", "config": ""}, jobs=jobs)
    for e in range(1000):
        record.add_epoch(2.0 * e, {f"job{(e + i) % 1000:04d}": 2 for i in range(32)}, 1.0, False)
    record.write(out / "metrics.h5")
    rows = [job_status(r, cores=2 if r.status == "running" else 0) for r in jobs.values()]
    write_status(out, RunStatus(name="bench", policy="slaq", workers=64, epoch_seconds=2.0,
                                open=False, draining=False, state="running", updated=time.time(),
                                now=2000.0, last_decision=1999.5,
                                utilization=run_utilization(jobs.values(), 64, 2000.0), jobs=rows))


def measure_status(tmp: Path, repeats: int = 5) -> dict[str, Any]:
    """Wall seconds of `slaq status` on a run of 1,000 jobs (the whole command, start-up too)."""
    run = tmp / "status-run"
    status_run(run)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        res = subprocess.run([*SLAQ, "status", str(run)], capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if res.returncode != 0:
            raise SystemExit(f"slaq status failed: {res.stdout}{res.stderr}")
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "repeats": repeats, "target_s": 1.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epoch", type=float, default=1.0, help="the run's epoch_seconds (default 1)")
    ap.add_argument("--adds", type=int, default=20, help="jobs to add (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the added jobs' sizes and spacing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        adds = measure_adds(Path(tmp), args.epoch, args.adds, args.seed)
        print(f"add to first iteration: {adds}", flush=True)
        status = measure_status(Path(tmp))
        print(f"slaq status on 1,000 jobs: {status}", flush=True)
    print(json.dumps({"add_to_first_iteration": adds, "status_1000_jobs": status}))


if __name__ == "__main__":
    main()
