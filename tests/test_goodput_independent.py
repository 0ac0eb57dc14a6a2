"""``goodput``'s allocation against one computed here from its definition (docs/policies.md),
with no code of the policy's own speedup model.

The jobs' histories are exact: losses ``L_k = c + A mu^k`` (the linear convergence class) and
seconds per iteration ``t(a) = alpha / a + beta`` observed on 1, 2, 4 and 8 cores. A job's
predicted reduction over an epoch of T seconds on ``a`` cores is then ``L_k - L_(k + n)`` with
``n = T / t(a)`` iterations, and its speedup over its equal share ``f = min(max_cores,
capacity / N)`` is ``s(a) = (1 - mu^n(a)) / (1 - mu^n(f))`` whatever the normalization. The
policy maximizes the power mean of the speedups over integer allocations, every job on at
least one core; here every allocation is tried (the policy's own fit of ``t(a)`` leans slightly on
a prior, so allocations within 0.1% of the best are not told apart).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from slaq_mpi.policies import get_policy
from slaq_mpi.policies.goodput import GoodputPolicy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot

EPOCH = 2.0


def _scenario(seed: int) -> tuple[int, list[tuple[float, float, float, int]]]:
    """Capacity, and per job (mu, alpha, beta, max_cores)."""
    rng = np.random.default_rng([seed, 35])
    capacity = int(rng.integers(3, 11))
    jobs = [(float(rng.uniform(0.95, 0.999)), float(rng.uniform(0.2, 3.0)), float(rng.uniform(0.005, 0.1)),
             int(rng.integers(1, capacity + 1))) for _ in range(int(rng.integers(2, min(capacity, 4) + 1)))]
    return capacity, jobs


def _snapshot(capacity: int, jobs: list[tuple[float, float, float, int]]) -> ClusterSnapshot:
    k = np.arange(300, dtype=np.float64)
    return ClusterSnapshot(capacity=capacity, now=100.0, epoch_seconds=EPOCH, jobs=tuple(
        JobSnapshot(job_id=f"j{i}", losses=tuple((0.1 + 2.0 * mu ** k).tolist()),
                    throughput=tuple((c, alpha / c + beta) for c in (1, 2, 4, 8)), cores=1, max_cores=cap,
                    convergence="linear")
        for i, (mu, alpha, beta, cap) in enumerate(jobs)))


def _speedup(job: tuple[float, float, float, int], cores: float, capacity: int, count: int) -> float:
    mu, alpha, beta, cap = job

    def iterations(a: float) -> float:  # a share below one core is time-slicing: t(1) / a
        return EPOCH / (alpha / a + beta if a >= 1 else (alpha + beta) / a)

    share = min(cap, capacity / count)
    return (1 - mu ** iterations(cores)) / (1 - mu ** iterations(share))


def _power_mean(s: np.ndarray, p: float) -> float:
    return float(np.exp(np.mean(np.log(s)))) if p == 0 else float(np.mean(s ** p) ** (1 / p))


def _ranked(capacity: int, jobs: list[tuple[float, float, float, int]], p: float
            ) -> list[tuple[float, tuple[int, ...]]]:
    """Every allocation that gives out all the cores the jobs can use, best first."""
    total = min(capacity, sum(cap for *_, cap in jobs))
    found = []
    for alloc in itertools.product(*(range(1, cap + 1) for *_, cap in jobs)):
        if sum(alloc) == total:
            s = np.array([_speedup(j, a, capacity, len(jobs)) for j, a in zip(jobs, alloc, strict=True)])
            found.append((_power_mean(s, p), alloc))
    return sorted(found, reverse=True)


@pytest.mark.parametrize("p", [-1.0, 0.0, 0.5, 1.0])
def test_goodput_gives_the_allocation_with_the_best_power_mean_of_speedups(p: float) -> None:
    checked = 0
    for seed in range(40):
        capacity, jobs = _scenario(seed)
        ranked = _ranked(capacity, jobs, p)
        if len(ranked) > 1 and ranked[0][0] - ranked[1][0] < 1e-3 * abs(ranked[0][0]):
            continue  # a near tie: a prediction's last digits may decide it
        policy = get_policy("goodput", p=p)
        snap = _snapshot(capacity, jobs)
        alloc = policy.allocate(snap)
        best = ranked[0][1]
        got = tuple(alloc[f"j{i}"] for i in range(len(jobs)))
        assert got == best, (seed, capacity, jobs, alloc, ranked[:3])
        checked += 1
    assert checked >= 30, checked


def test_goodput_speedups_are_those_of_the_definition() -> None:
    # within 1%: the fitted t(a) leans slightly on a prior (brain/throughput.py), even with
    # exact observations on four core counts
    for seed in range(6):
        capacity, jobs = _scenario(seed)
        policy = get_policy("goodput")
        assert isinstance(policy, GoodputPolicy)  # its speedups() are what is checked here
        snap = _snapshot(capacity, jobs)
        for cores in itertools.product(*(range(1, cap + 1) for *_, cap in jobs)):
            got = policy.speedups(snap, {f"j{i}": c for i, c in enumerate(cores)})
            for i, (job, c) in enumerate(zip(jobs, cores, strict=True)):
                want = _speedup(job, c, capacity, len(jobs))
                assert math.isclose(got[f"j{i}"], want, rel_tol=1e-2), (seed, i, c, got, want)
