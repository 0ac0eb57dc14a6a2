"""The finish-time-fair policy (after Shockwave / Themis) on hand-made snapshots."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from slaq_mpi.brain.forecast import build_forecast
from slaq_mpi.brain.memo import CurveMemo
from slaq_mpi.brain.outlook import Outlook, build_outlook
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.finish_time_fair import FinishTimeFairPolicy, predicted_rho
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def curve(n: int, rate: float = 0.1) -> tuple[float, ...]:
    k = np.arange(n, dtype=np.float64)
    return tuple((1.0 / (1.0 + rate * k) + 0.1).tolist())


def law(alpha: float = 1.0, beta: float = 0.01) -> tuple[tuple[int, float], ...]:
    return tuple((c, alpha / c + beta) for c in (1, 2, 4, 8))


def job(name: str, done: int = 20, budget: int = 200, arrival: float = 0.0, alpha: float = 1.0,
        max_cores: int = 64) -> JobSnapshot:
    return JobSnapshot(job_id=name, losses=curve(done), throughput=law(alpha), cores=1,
                       max_cores=max_cores, arrival=arrival, max_iterations=budget)


def snap(capacity: int, *jobs: JobSnapshot, now: float = 40.0) -> ClusterSnapshot:
    return ClusterSnapshot(capacity=capacity, now=now, epoch_seconds=2.0, jobs=jobs)


def outlook(s: ClusterSnapshot) -> Outlook:
    return build_outlook(s, build_forecast(s, CurveMemo()))


def worst_rho(s: ClusterSnapshot, alloc: dict[str, int]) -> float:
    out = outlook(s)
    return float(predicted_rho(out, np.array([float(alloc[i]) for i in out.ids])).max())


def test_two_identical_jobs_get_equal_cores() -> None:
    assert get_policy("finish-time-fair").allocate(snap(16, job("a"), job("b"))) == {"a": 8, "b": 8}


def test_a_job_that_waited_gets_more_cores() -> None:
    s = snap(16, job("waited", arrival=0.0), job("fresh", arrival=38.0), now=40.0)
    alloc = get_policy("finish-time-fair").allocate(s)
    assert alloc["waited"] > alloc["fresh"] >= 1
    assert sum(alloc.values()) == 16


def test_worst_rho_is_the_least_achievable() -> None:
    s = snap(9, job("a", arrival=0.0, budget=120), job("b", arrival=20.0, done=5, budget=300),
             job("c", arrival=35.0, done=2, budget=60, alpha=2.0))
    alloc = get_policy("finish-time-fair").allocate(s)
    best = min(worst_rho(s, dict(zip("abc", combo, strict=True)))
               for combo in itertools.product(range(1, 8), repeat=3) if sum(combo) <= 9)
    assert worst_rho(s, alloc) == pytest.approx(best, rel=1e-9)
    equal = {"a": 3, "b": 3, "c": 3}
    assert worst_rho(s, alloc) < worst_rho(s, equal)


def test_leftover_cores_are_used() -> None:
    s = snap(40, job("a", max_cores=10), job("b", max_cores=10), job("c", max_cores=10))
    alloc = get_policy("finish-time-fair").allocate(s)
    assert alloc == {"a": 10, "b": 10, "c": 10}


def test_more_jobs_than_cores_serves_the_furthest_behind() -> None:
    s = snap(1, job("ahead", arrival=39.0, done=5), job("behind", arrival=0.0, done=5), now=40.0)
    assert get_policy("finish-time-fair").allocate(s) == {"ahead": 0, "behind": 1}


def test_predicted_rho_is_one_on_the_equal_share_from_arrival() -> None:
    # a job that has just arrived and will keep its equal share finishes as if alone on it
    s = snap(8, job("a", arrival=40.0, done=0, budget=100), job("b", arrival=40.0, done=0, budget=100))
    out = outlook(s)
    assert predicted_rho(out, np.array([4.0, 4.0])) == pytest.approx([1.0, 1.0])
    assert math.isinf(predicted_rho(out, np.array([0.0, 8.0]))[0])


def test_slack_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="slack"):
        FinishTimeFairPolicy(slack=0.5)
