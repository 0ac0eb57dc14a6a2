"""Time one full SLAQ scheduling decision at cluster scale.

A seeded synthetic workload of ``--jobs`` jobs (50-200 losses each from sublinear and linear
curves with noise, a few throughput observations, mixed max cores) on ``--capacity`` cores.
Successive epochs append ``GROW`` losses and one throughput observation per job; the ``slaq``
policy object persists across them, as in a live run. Every job's history grows every epoch,
so every decision refits every job: the worst case (a policy keeps the fits of histories that
did not change since its previous decision, bit for bit what a refit would give). ``cold_ms``
is the first decision of a fresh policy object. Each decision fits every job, predicts, and
allocates.

The reference is the straightforward implementation, timed in the same run: one
``scipy.optimize.curve_fit`` per job on the same weighted window, then a ``heapq`` greedy.

Prints one JSON line last: ``median_ms``, ``p95_ms`` (steady-state decisions), ``cold_ms``
(a fresh policy object), ``reference_ms``, ``reference_ratio`` and ``policies`` (median ms of
``allocate`` for every registered policy on the same snapshots).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slaq_mpi.brain.predict import DEFAULT_DECAY, DEFAULT_WINDOW  # noqa: E402
from slaq_mpi.brain.throughput import fit_throughput  # noqa: E402
from slaq_mpi.policies import POLICY_NAMES, get_policy  # noqa: E402
from slaq_mpi.policies.slaq import SlaqPolicy  # noqa: E402
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot  # noqa: E402

GROW = 5  # losses each job adds per epoch


def workload(jobs: int, epochs: int, seed: int) -> list[dict]:
    """Per job: full loss curve, class, throughput law and max cores."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(jobs):
        n0 = int(rng.integers(50, 201))
        k = np.arange(n0 + GROW * epochs, dtype=np.float64)
        kind = rng.choice(["sublinear", "linear", "unknown"], p=[0.45, 0.35, 0.2])
        shape = kind if kind != "unknown" else str(rng.choice(["sublinear", "linear"]))
        if shape == "sublinear":
            a, b = 10 ** rng.uniform(-5, -2), 10 ** rng.uniform(-2, 0)
            curve = 1.0 / (a * k**2 + b * k + 1.0) + rng.uniform(0, 2)
        else:
            mu = rng.uniform(0.8, 0.995)
            curve = mu**k + rng.uniform(0, 2)
        scale = 10 ** rng.uniform(-2, 2)
        noise = rng.choice([0.0, 1e-4, 1e-3]) * (curve[0] - curve[-1])
        curve = scale * (curve + noise * rng.standard_normal(k.size))
        alpha = 10 ** rng.uniform(-2, 0)
        law = (alpha, alpha * rng.uniform(0.01, 0.1), alpha * rng.uniform(0, 0.01))
        out.append({
            "id": f"job{j:05d}", "curve": curve, "n0": n0, "kind": str(kind), "law": law,
            "max_cores": int(rng.choice([4, 8, 16, 64, 256, 16384])),
            "cores": [int(c) for c in rng.choice([1, 2, 4, 8], size=int(rng.integers(1, 6)))],
        })
    return out


def snapshot(work: list[dict], epoch: int, capacity: int) -> ClusterSnapshot:
    """The cluster at ``epoch``: every job shows ``n0 + GROW * epoch`` losses and one more
    throughput observation per epoch (on its last core count)."""
    jobs = []
    for w in work:
        n = w["n0"] + GROW * epoch
        al, be, ga = w["law"]
        cores = w["cores"] + [w["cores"][-1]] * epoch
        obs = tuple((c, (al / c + be + ga * math.log2(c)) * (1.0 + 0.01 * (i % 3)))
                    for i, c in enumerate(cores))
        jobs.append(JobSnapshot(
            job_id=w["id"], losses=tuple(w["curve"][:n].tolist()), throughput=obs,
            cores=w["cores"][-1], max_cores=w["max_cores"], convergence=w["kind"],
            attained_core_seconds=float(n),
        ))
    return ClusterSnapshot(capacity=capacity, now=10.0 * epoch, epoch_seconds=10.0, jobs=tuple(jobs))


def _sub(k: np.ndarray, a: float, p1: float, p2: float, d: float) -> np.ndarray:
    return a / (1.0 + p1 * k + p2 * k * k) + d


def _lin(k: np.ndarray, a: float, r: float, d: float) -> np.ndarray:
    return a * np.exp(-r * k) + d


def reference_decision(snap: ClusterSnapshot) -> dict[str, int]:
    """Straightforward SLAQ: curve_fit per job (same window and weights), heapq greedy."""
    jobs = sorted(snap.jobs, key=lambda j: j.job_id)
    speed = fit_throughput([j.throughput for j in jobs])
    caps = [max(1, min(j.max_cores, snap.capacity)) for j in jobs]
    preds = []
    for j in jobs:
        y = np.asarray(j.losses[-DEFAULT_WINDOW:])
        u = np.arange(-(y.size - 1), 1, dtype=np.float64)
        sigma = np.exp(-u / (2 * DEFAULT_DECAY))  # weight exp(-age / decay)
        span = max(float(y.max() - y.min()), 1e-300)
        yn = (y - y[-1]) / span
        drops = -np.diff(np.asarray(j.losses))
        max_drop = max(float(drops.max()), 1e-300) if drops.size else 1e-300
        best = None
        families = ["sublinear", "linear"] if j.convergence == "unknown" else [j.convergence]
        for fam in families:
            f, p0 = (_sub, [1.0, 0.05, 0.0, 0.0]) if fam == "sublinear" else (_lin, [1.0, 0.05, 0.0])
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    par, _ = curve_fit(f, u, yn, p0=p0, sigma=sigma, maxfev=2000)
                sse = float(np.sum(((f(u, *par) - yn) / sigma) ** 2))
            except (RuntimeError, ValueError):
                continue
            if best is None or sse < best[0]:
                best = (sse, f, par)
        preds.append((best, span / max_drop))
    heap: list[tuple[float, int, int]] = []
    alloc = [1] * len(jobs)

    def gain(i: int, a: int) -> float:
        best, scale = preds[i]
        if best is None:
            return 0.0
        _, f, par = best
        m = snap.epoch_seconds / (speed.alpha[i] / a + speed.beta[i] + speed.gamma[i] * math.log2(a))
        return max(0.0, float(f(np.array([0.0]), *par)[0] - f(np.array([m]), *par)[0]) * scale)

    for i in range(len(jobs)):
        if caps[i] > 1:
            heapq.heappush(heap, (-(gain(i, 2) - gain(i, 1)), i, 2))
    left = snap.capacity - len(jobs)
    while left > 0 and heap:
        neg, i, a = heapq.heappop(heap)
        if -neg <= 0:
            break
        alloc[i] = a
        left -= 1
        if a < caps[i]:
            heapq.heappush(heap, (-(gain(i, a + 1) - gain(i, a)), i, a + 1))
    return {j.job_id: a for j, a in zip(jobs, alloc, strict=True)}


def timed(fn, *args) -> tuple[float, object]:  # noqa: ANN001
    """Wall milliseconds of one call, and its result."""
    t0 = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - t0) * 1e3, out


def main(argv: list[str] | None = None) -> int:
    """Run and print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4000)
    ap.add_argument("--capacity", type=int, default=16384)
    ap.add_argument("--epochs", type=int, default=12, help="steady-state decisions timed")
    ap.add_argument("--reference-runs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2017)
    args = ap.parse_args(argv)

    work = workload(args.jobs, args.epochs + 1, args.seed)
    snaps = [snapshot(work, e, args.capacity) for e in range(args.epochs + 1)]
    cold_ms, _ = timed(SlaqPolicy().allocate, snaps[0])
    policy = SlaqPolicy()
    policy.allocate(snaps[0])
    steady = []
    for snap in snaps[1:]:
        ms, alloc = timed(policy.allocate, snap)
        steady.append(ms)
        assert sum(alloc.values()) <= snap.capacity
    ref = [timed(reference_decision, snaps[1 + i])[0] for i in range(args.reference_runs)]
    policies = {}
    for name in POLICY_NAMES:
        pol = get_policy(name)
        pol.allocate(snaps[0])
        policies[name] = round(float(np.median([timed(pol.allocate, s)[0] for s in snaps[1:]])), 2)
    median = float(np.median(steady))
    out = {
        "median_ms": round(median, 2),
        "p95_ms": round(float(np.percentile(steady, 95)), 2),
        "cold_ms": round(cold_ms, 2),
        "reference_ms": round(float(np.median(ref)), 1),
        "reference_ratio": round(float(np.median(ref)) / median, 1),
        "jobs": args.jobs,
        "capacity": args.capacity,
        "policies": policies,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
