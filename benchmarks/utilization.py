"""How much of the worker ranks' time live runs spend inside solver iterations, with sleeping
jobs (benchmarks/sleeper.py: no CPU used, so the figures measure scheduling, not this machine's
cores) and with the quickstart's real solvers.

Workloads (each under the policies slaq and fair; epochs of 1 s for the sleeping ones):
  a  12 sleeping jobs, one-core iterations of 20 ms to 3 s, arriving over 20 s, 32 worker ranks
  b  the same shape with 24 jobs on 64 worker ranks
  c  configs/quickstart.yaml (real solvers, its own 8 ranks)
  d  200 short sleeping jobs arriving over 60 s on 16 worker ranks (often more jobs than cores)
--quick runs smaller variants (a smoke test of a few minutes in all).

Every figure comes from the runs' metrics.h5 (slaq_mpi.storage.metrics), so the script measures
whichever runtime the Python running it imports (printed first):
  utilization            core-seconds inside iterations / (worker ranks x (last job end - first arrival))
  unmoved_gap_ms         median start[i+1] - end[i] of a job's consecutive iterations i, i+1 with a
                         decision in (start[i], start[i+1]] that kept its cores (count: _count)
  move_pause_ms          median start[i+1] - end[i] over every move: consecutive iterations on
                         different core counts, no decision from the last one up to end[i] to
                         start[i+1] giving the job 0 cores (a pause, not a wait for cores)
  first_core_wait_s_max  longest wait from a job's arrival to the start of its first iteration
  reports_per_s_rank0    pickled job reports (10 iterations each) unpickled and absorbed into rank
                         0's record per second of CPU time, in this process, by the runtime's own
                         code (slaq_mpi.runtime.job_reports.absorb, with its report journal
                         written to a temporary directory and flushed every 10 reports, as
                         rank 0 flushes it once per pass of its loop over the messages
                         waiting; else Coordinator._absorb_job);
                         reports_per_wall_s_rank0 the same per wall second

Usage: python benchmarks/utilization.py [--workload a,b,c,d] [--policy slaq,fair] [--seed S]
       [--quick] [--keep DIR] [--timeout S] [--reports N]
Prints progress lines, then one JSON line last:
{"a": {"slaq": {...}, "fair": {...}}, ..., "reports_per_s_rank0": x, ..., "commit": the git
commit of the code measured ("+edits" if its checkout had uncommitted changes),
"load_average": the machine's 1, 5 and 15-minute load averages at the end}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
SLEEPER = Path(__file__).resolve().parent / "sleeper.py"
DATASET = {"generator": "blobs", "rows": 256, "features": 1, "seed": 0}  # ignored by the sleeper


@dataclasses.dataclass(frozen=True)
class Shape:
    """A workload of sleeping jobs: one-core seconds per iteration from ``work[0]`` to
    ``work[1]`` (log-spaced), arrivals uniform over ``arrive_over`` seconds, and each job's
    total one-core work drawn uniformly from ``core_seconds``, in at most ``iterations``
    iterations (the fastest jobs' iterations last longer than their work: the allreduce of
    many sleeping ranks takes milliseconds when ranks outnumber cores)."""

    workers: int
    jobs: int
    arrive_over: float
    work: tuple[float, float]
    core_seconds: tuple[float, float]
    iterations: int = 1500
    epoch_seconds: float = 1.0


SHAPES = {
    "a": Shape(32, 12, 20.0, (0.02, 3.0), (40.0, 160.0)),
    "b": Shape(64, 24, 20.0, (0.02, 3.0), (40.0, 160.0)),
    "d": Shape(16, 200, 60.0, (0.02, 0.5), (2.0, 8.0)),
}
QUICK = {
    "a": Shape(8, 4, 5.0, (0.02, 1.0), (15.0, 40.0), iterations=500),
    "b": Shape(16, 6, 5.0, (0.02, 1.0), (20.0, 50.0), iterations=500),
    "d": Shape(6, 30, 10.0, (0.02, 0.3), (0.5, 3.0)),
}
WORKLOADS = ("a", "b", "c", "d")


def say(msg: str) -> None:
    print(msg, flush=True)


# --- workloads ----------------------------------------------------------------------------------

def sleeping_config(name: str, shape: Shape, seed: int) -> dict[str, Any]:
    """The experiment of a sleeping workload (every draw from ``seed`` and the workload)."""
    rng = np.random.default_rng([seed, ord(name)])
    lo, hi = shape.work
    if 1 < shape.jobs <= 50:  # log-spaced over the whole range, in random order
        works = rng.permutation(lo * (hi / lo) ** (np.arange(shape.jobs) / (shape.jobs - 1)))
    else:
        works = np.exp(rng.uniform(math.log(lo), math.log(hi), shape.jobs))
    arrivals = np.sort(rng.uniform(0.0, shape.arrive_over, shape.jobs))
    arrivals[0] = 0.0
    jobs = []
    for i, (work, arrival) in enumerate(zip(works, arrivals, strict=True)):
        total = rng.uniform(*shape.core_seconds)
        jobs.append({
            "name": f"sleep-{i:03d}",
            "algorithm": f"{SLEEPER}:Sleeper",
            "dataset": dict(DATASET),
            "hyperparameters": {"work": round(float(work), 4), "overhead": 0.001,
                                "floor": round(float(rng.uniform(0.01, 0.3)), 4),
                                "power": round(float(rng.uniform(0.5, 1.5)), 3)},
            "arrival": round(float(arrival), 3),
            "stop": {"max_iterations": min(shape.iterations, max(3, int(round(total / work))))},
        })
    return {"name": f"utilization-{name}", "epoch_seconds": shape.epoch_seconds,
            "ranks": shape.workers + 1, "seed": seed, "jobs": jobs}


def quickstart_config(quick: bool) -> dict[str, Any]:
    """configs/quickstart.yaml (with --quick: its first three jobs, fewer iterations)."""
    raw: dict[str, Any] = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    if quick:
        raw["jobs"] = raw["jobs"][:3]
        for job in raw["jobs"]:
            job["stop"]["max_iterations"] = min(job["stop"]["max_iterations"], 15)
    return raw


def workload_config(name: str, policy: str, seed: int, quick: bool) -> dict[str, Any]:
    if name == "c":
        raw = quickstart_config(quick)
    else:
        raw = sleeping_config(name, (QUICK if quick else SHAPES)[name], seed)
    raw["policy"] = policy
    return raw


# --- running -------------------------------------------------------------------------------------

def run_experiment(raw: dict[str, Any], where: Path, timeout: float) -> tuple[Path, float, int]:
    """``slaq run`` the experiment ``raw`` in ``where`` (config.yaml, run/, log.txt), as a user
    starts it (slaq relaunches itself under its mpiexec); returns the run directory, the wall
    seconds and the exit status. A run past ``timeout`` seconds is asked to stop (SIGTERM: every
    job checkpoints, metrics.h5 is saved), then killed if it does not."""
    where.mkdir(parents=True, exist_ok=True)
    raw = dict(raw, output_dir=str(where / "run"))
    cfg = where / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    t0 = time.monotonic()
    with open(where / "log.txt", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slaq_mpi", "run", str(cfg)], cwd=where,
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            say(f"  past {timeout:g} s: asking the run to stop (SIGTERM to pid {proc.pid})")
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
    wall = time.monotonic() - t0
    if status != 0:
        tail = (where / "log.txt").read_text()[-1500:]
        say(f"  slaq run exited with status {status}; the end of its log:\n{tail}")
    return where / "run", wall, status


# --- measures from metrics.h5 -------------------------------------------------------------------

def _median_ms(values: list[float]) -> float | None:
    return round(float(np.median(values)) * 1000.0, 3) if values else None


def _p90_ms(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 90)) * 1000.0, 3) if values else None


def decision_gaps(run: Any) -> tuple[list[float], list[float]]:
    """The gaps start[i+1] - end[i] (seconds) between a job's consecutive iterations i, i+1:
    those on the same cores with a decision in (start[i], start[i+1]] that gave it those
    cores, and every move (core counts differ; the decision in force when iteration i ended
    and every later one up to start[i+1] gave it cores, so the gap is a move's pause rather
    than a wait for cores). A job keeps iterating after the decision that moves it until it
    is asked, so a move's gap usually comes after that decision, not around it."""
    t_dec = np.asarray(run.epoch_time, dtype=np.float64)
    unmoved: list[float] = []
    moved: list[float] = []
    for name, job in run.jobs.items():
        if len(job.time) < 2 or name not in run.job_names:
            continue
        alloc = np.asarray(run.alloc)[:, run.job_names.index(name)]
        cores = np.asarray(job.cores)
        end = np.asarray(job.time, dtype=np.float64)
        start = end - np.asarray(job.iter_seconds, dtype=np.float64)
        first = np.searchsorted(t_dec, start[:-1], side="right")
        last = np.searchsorted(t_dec, start[1:], side="right")
        for i in np.flatnonzero((last > first) & (cores[:-1] == cores[1:])):
            if np.all(alloc[first[i]:last[i]] == cores[i]):
                unmoved.append(float(start[i + 1] - end[i]))
        in_force = np.searchsorted(t_dec, end[:-1], side="right") - 1
        for i in np.flatnonzero(cores[:-1] != cores[1:]):
            if np.all(alloc[max(in_force[i], 0):last[i]] > 0):
                moved.append(float(start[i + 1] - end[i]))
    return unmoved, moved


def measures(run_dir: Path) -> dict[str, Any]:
    """The benchmark's figures of one run, from its metrics.h5 only."""
    from slaq_mpi.storage.metrics import read_metrics

    run = read_metrics(run_dir)
    jobs = list(run.jobs.values())
    first_arrival = min(j.arrival for j in jobs)
    ends = [j.end if math.isfinite(j.end) else (float(j.time[-1]) if len(j.time) else math.nan)
            for j in jobs]
    last_end = max((e for e in ends if math.isfinite(e)), default=math.nan)
    done = sum(1 for j in jobs if j.status == "done")
    if done < len(jobs) and math.isfinite(run.stopped):
        last_end = max(last_end, run.stopped) if math.isfinite(last_end) else run.stopped
    span = last_end - first_arrival
    busy = sum(float(np.dot(j.cores, j.iter_seconds)) for j in jobs)
    waits = [float(j.time[0] - j.iter_seconds[0]) - j.arrival for j in jobs if len(j.time)]
    never = [last_end - j.arrival for j in jobs if not len(j.time)]
    unmoved, moved = decision_gaps(run)
    return {
        "utilization": round(busy / (run.capacity * span), 4) if span > 0 and run.capacity else None,
        "unmoved_gap_ms": _median_ms(unmoved), "unmoved_gap_p90_ms": _p90_ms(unmoved),
        "unmoved_gap_count": len(unmoved),
        "move_pause_ms": _median_ms(moved), "move_pause_p90_ms": _p90_ms(moved),
        "move_pause_count": len(moved),
        "jobs_done": done, "jobs_total": len(jobs), "jobs_never_started": len(never),
        "first_core_wait_s_max": round(max(waits + never), 3) if waits or never else None,
        "workers": run.capacity, "span_s": round(span, 2), "decisions": len(run.epoch_time),
        "core_seconds_iterating": round(busy, 1),
    }


# --- rank 0's report handling ------------------------------------------------------------------

def _report_fields(cls: type, job: str, epoch: int, iters: int, wall: float) -> dict[str, Any]:
    """Values for every field of the runtime's Report dataclass: a running job's report of
    ``iters`` iterations of 50 ms on 4 cores, ending at ``wall``."""
    ends = [wall - 0.05 * (iters - 1 - k) for k in range(iters)]
    known: dict[str, Any] = {
        "job": job, "epoch": epoch, "cores": 4,
        "losses": [1.0 / (epoch * iters + k + 1) for k in range(iters)],
        "iter_seconds": [0.05] * iters, "end_times": ends, "first_start": ends[0] - 0.05,
        "deadline": wall + 0.01, "status": "running", "reason": "",
    }
    guess = {"float": wall, "int": 0, "str": "", "bool": False}
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in known:
            values[f.name] = known[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kind = str(f.type)
            values[f.name] = guess.get(kind, [] if kind.startswith("list") else {})
    return values


JOURNAL_FLUSH_EVERY = 10  # reports taken per flush of the journal in the microbenchmark


def _absorber(epoch_seconds: float) -> tuple[str, Callable[[Any, Any], object]]:
    """The runtime's code path that adds one report to rank 0's record, and its name."""
    wall0 = time.time()
    try:
        from slaq_mpi.runtime.job_reports import absorb  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        pass
    else:
        try:
            from slaq_mpi.storage.journal import Journal  # type: ignore[import-not-found, unused-ignore]
        except ImportError:  # a runtime that keeps no report journal
            return "job_reports.absorb", lambda record, rep: absorb(record, rep, lambda w: w - wall0)
        journal = Journal(Path(tempfile.mkdtemp(prefix="slaq-journal-")), 0)
        taken = [0]

        def absorb_journaled(record: Any, rep: Any) -> None:
            absorb(record, rep, lambda w: w - wall0, journal)
            taken[0] += 1
            if taken[0] % JOURNAL_FLUSH_EVERY == 0:
                journal.flush()

        return "job_reports.absorb+journal", absorb_journaled
    from slaq_mpi.runtime.coordinator import Coordinator

    # the lock-step runtime's methods (looked up by name: the new runtime has none of them)
    old = {name: getattr(Coordinator, name) for name in ("now", "_wall_to_now", "_absorb_job")}

    class StandIn:  # what _absorb_job uses of a Coordinator, without MPI
        now = old["now"]
        _wall_to_now = old["_wall_to_now"]

        def __init__(self, record: Any) -> None:
            self.record = record
            self.ranks: dict[str, tuple[int, ...]] = {}
            self._warned_slow: set[str] = set()
            self.spec = SimpleNamespace(epoch_seconds=epoch_seconds)
            self._t0 = time.monotonic()

    stand_ins: dict[int, StandIn] = {}

    def absorb_old(record: Any, rep: Any) -> None:
        stand = stand_ins.setdefault(id(record), StandIn(record))
        old["_absorb_job"](stand, rep.job, rep)

    return "Coordinator._absorb_job", absorb_old


def report_rate(n: int, jobs: int = 100, iters: int = 10,
                repeats: int = 3) -> tuple[float, float, str]:
    """Reports per second of this process's CPU time, and per wall second, that rank 0's code
    unpickles and absorbs (the medians of ``repeats`` passes over ``n`` reports of ``jobs``
    jobs, ``iters`` iterations each), and the code path used. CPU time is what a rank 0 with a
    core of its own could handle; the wall rate falls when other work shares the cores."""
    from slaq_mpi.runtime.messages import Report
    from slaq_mpi.storage.metrics import JobRecord, RunRecord

    path, absorb = _absorber(epoch_seconds=1.0)
    wall = time.time()
    blobs = [pickle.dumps(Report(**_report_fields(Report, f"job-{i % jobs:04d}", i // jobs, iters,
                                                  wall + i // jobs)))
             for i in range(n)]
    rates, wall_rates = [], []
    for _ in range(repeats):
        record = RunRecord(attrs={"name": "bench", "capacity": 64, "epoch_seconds": 1.0},
                           jobs={f"job-{j:04d}": JobRecord(f"job-{j:04d}", "sleeper", "sublinear", 0.0, 64)
                                 for j in range(jobs)})
        for job in record.jobs.values():
            job.status = "running"
        t, cpu = time.perf_counter(), time.process_time()
        for blob in blobs:
            absorb(record, pickle.loads(blob))
        rates.append(n / max(time.process_time() - cpu, 1e-9))
        wall_rates.append(n / (time.perf_counter() - t))
    return float(np.median(rates)), float(np.median(wall_rates)), path


# --- main -----------------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workload", default=",".join(WORKLOADS),
                    help="comma-separated of a,b,c,d (default all)")
    ap.add_argument("--policy", default="slaq,fair", help="comma-separated policies (default slaq,fair)")
    ap.add_argument("--seed", type=int, default=0, help="seeds every draw of the sleeping workloads")
    ap.add_argument("--quick", action="store_true", help="smaller workloads (a smoke test)")
    ap.add_argument("--keep", type=Path, help="keep the runs here (DIR/<workload>-<policy>/)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run before it is stopped")
    ap.add_argument("--reports", type=int, default=20000, help="reports in the rank-0 microbenchmark")
    args = ap.parse_args()
    args.workloads = [w for w in args.workload.split(",") if w]
    args.policies = [p for p in args.policy.split(",") if p]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"--workload {','.join(unknown)}: allowed a, b, c, d")
    return args


def code_commit(code: Path) -> str:
    """The git commit of the checkout holding ``code`` ("+edits" if it has uncommitted
    changes), or "unknown" outside git."""
    def git(*cmd: str) -> str:
        out = subprocess.run(["git", "-C", str(code), *cmd], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    return head + ("+edits" if git("status", "--porcelain", "--", ".") else "")


def main() -> None:
    args = parse_args()
    import slaq_mpi

    code = str(Path(slaq_mpi.__file__).resolve().parent)
    commit = code_commit(Path(code))
    say(f"code under test: {code} at {commit} (python {sys.executable}); seed {args.seed}"
        + (", quick" if args.quick else ""))
    if not Path(code).is_relative_to(ROOT):
        say(f"note: the slaq_mpi imported is not this checkout's ({ROOT})")
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="slaq-utilization-") as scratch:
        base = args.keep or Path(scratch)
        for name in args.workloads:
            result[name] = {}
            for policy in args.policies:
                raw = workload_config(name, policy, args.seed, args.quick)
                say(f"workload {name} policy {policy}: {len(raw['jobs'])} jobs on "
                    f"{raw['ranks'] - 1} worker ranks, epoch {raw['epoch_seconds']:g} s ...")
                run_dir, wall, status = run_experiment(raw, base / f"{name}-{policy}", args.timeout)
                figures = measures(run_dir) if (run_dir / "metrics.h5").is_file() else {}
                figures.update(wall_s=round(wall, 1), exit_status=status)
                result[name][policy] = figures
                say(f"  {json.dumps(figures)}")
    rate, wall_rate, path = report_rate(args.reports)
    say(f"rank 0 report handling ({path}): {rate:,.0f} reports per CPU second "
        f"({wall_rate:,.0f} per wall second)")
    result.update(reports_per_s_rank0=round(rate), reports_per_wall_s_rank0=round(wall_rate),
                  report_path=path, seed=args.seed, quick=args.quick, code=code,
                  commit=commit, load_average=[round(x, 2) for x in os.getloadavg()])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
