"""The goodput policy (after Pollux) on hand-made snapshots with known right answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from slaq_mpi.policies import get_policy
from slaq_mpi.policies.goodput import GoodputPolicy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot
from slaq_mpi.report.fairness import power_mean


def curve(n: int = 30, rate: float = 0.1, floor: float = 0.1) -> tuple[float, ...]:
    k = np.arange(n, dtype=np.float64)
    return tuple((1.0 / (1.0 + rate * k) + floor).tolist())


def law(alpha: float, beta: float, gamma: float = 0.0, cores: tuple[int, ...] = (1, 2, 4, 8)
        ) -> tuple[tuple[int, float], ...]:
    return tuple((c, alpha / c + beta + gamma * math.log2(c)) for c in cores)


Pairs = tuple[tuple[int, float], ...]
CURVE = curve()
LAW = law(1.0, 0.01)


def job(name: str, losses: tuple[float, ...] = CURVE, throughput: Pairs = LAW,
        max_cores: int = 64, arrival: float = 0.0, attained: float = 0.0,
        budget: int | None = 500) -> JobSnapshot:
    return JobSnapshot(job_id=name, losses=losses, throughput=throughput, cores=1, max_cores=max_cores,
                       arrival=arrival, attained_core_seconds=attained, max_iterations=budget)


def snap(capacity: int, *jobs: JobSnapshot) -> ClusterSnapshot:
    return ClusterSnapshot(capacity=capacity, now=50.0, epoch_seconds=2.0, jobs=jobs)


def test_two_identical_jobs_get_equal_cores() -> None:
    alloc = get_policy("goodput").allocate(snap(16, job("a"), job("b")))
    assert alloc == {"a": 8, "b": 8}


def test_a_job_that_cannot_speed_up_keeps_one_core() -> None:
    serial = law(0.001, 1.0)  # all serial: more cores do not make it faster
    alloc = get_policy("goodput").allocate(snap(12, job("scales"), job("serial", throughput=serial)))
    assert alloc["serial"] == 1
    assert alloc["scales"] == 11


def test_equal_share_has_speedup_one() -> None:
    s = snap(16, job("a"), job("b", losses=curve(rate=0.3)))
    speed = GoodputPolicy().speedups(s, {"a": 8, "b": 8})
    assert speed == pytest.approx({"a": 1.0, "b": 1.0})


def _best_objective(policy: GoodputPolicy, s: ClusterSnapshot, p: float) -> float:
    ids = [j.job_id for j in s.jobs]
    best = -math.inf
    for combo in itertools.product(range(1, s.capacity + 1), repeat=len(ids)):
        if sum(combo) != s.capacity:
            continue
        sp = policy.speedups(s, dict(zip(ids, map(float, combo), strict=True)))
        best = max(best, power_mean(np.array(list(sp.values())), p))
    return best


@pytest.mark.parametrize("p", [-1.0, 0.0, 1.0])
def test_allocation_maximizes_the_power_mean(p: float) -> None:
    s = snap(10, job("fast", losses=curve(rate=0.05)), job("slow", losses=curve(rate=0.5)),
             job("serial", throughput=law(0.5, 0.5)))
    policy = GoodputPolicy(p=p)
    alloc = policy.allocate(s)
    assert sum(alloc.values()) == 10
    got = power_mean(np.array(list(policy.speedups(s, {k: float(v) for k, v in alloc.items()}).values())), p)
    assert got == pytest.approx(_best_objective(policy, s, p), rel=1e-9)


def test_exponent_trades_fairness_for_efficiency() -> None:
    # "weak" gains little from cores (mostly serial); p = 1 starves it of extra cores, p = -5
    # gives it more to lift the worst speedup.
    s = snap(12, job("strong"), job("weak", throughput=law(0.3, 0.7)))
    efficient = get_policy("goodput", p=1.0).allocate(s)
    fair = get_policy("goodput", p=-5.0).allocate(s)
    assert fair["weak"] > efficient["weak"]


def test_more_jobs_than_cores_serves_least_attained_first() -> None:
    s = snap(2, job("a", attained=30.0), job("b", attained=5.0), job("c", attained=0.0))
    assert get_policy("goodput").allocate(s) == {"a": 0, "b": 1, "c": 1}


def test_respects_max_cores_and_capacity() -> None:
    s = snap(20, job("a", max_cores=3), job("b", max_cores=5), job("c"))
    alloc = get_policy("goodput").allocate(s)
    assert alloc["a"] <= 3 and alloc["b"] <= 5 and sum(alloc.values()) <= 20
    assert all(v >= 1 for v in alloc.values())


def test_bad_exponent_is_rejected() -> None:
    with pytest.raises(ValueError, match="p must be"):
        get_policy("goodput", p=2.0)


def test_deterministic() -> None:
    s = snap(23, *(job(f"j{i}", losses=curve(rate=0.05 * (i + 1))) for i in range(5)))
    assert GoodputPolicy().allocate(s) == GoodputPolicy().allocate(s)
