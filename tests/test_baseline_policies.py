"""The fair and fifo policies on hand-made snapshots."""

from __future__ import annotations

import pytest

from slaq_mpi.policies import PolicyError, get_policy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def _job(name: str, arrival: float = 0.0, cores: int = 0, max_cores: int = 100,
         attained: float = 0.0) -> JobSnapshot:
    return JobSnapshot(job_id=name, losses=(), throughput=(), cores=cores, max_cores=max_cores,
                       arrival=arrival, attained_core_seconds=attained)


def _snap(capacity: int, *jobs: JobSnapshot) -> ClusterSnapshot:
    return ClusterSnapshot(capacity=capacity, now=10.0, epoch_seconds=1.0, jobs=jobs)


def test_fair_equal_shares_and_work_conserving() -> None:
    alloc = get_policy("fair").allocate(_snap(7, _job("a"), _job("b"), _job("c", max_cores=1)))
    assert alloc == {"a": 3, "b": 3, "c": 1}


def test_fair_odd_core_stays_with_its_holder() -> None:
    snap = _snap(7, _job("a", cores=2), _job("b", cores=3, arrival=1), _job("c", cores=2, arrival=2))
    assert get_policy("fair").allocate(snap) == {"a": 2, "b": 3, "c": 2}


def test_fair_rotates_waiting_jobs_by_attained_service() -> None:
    snap = _snap(2, _job("a", attained=50), _job("b", attained=10), _job("c", attained=0))
    alloc = get_policy("fair").allocate(snap)
    assert alloc.get("a", 0) == 0 and alloc["b"] == 1 and alloc["c"] == 1


def test_fifo_serves_in_arrival_order() -> None:
    snap = _snap(5, _job("late", arrival=5), _job("early", arrival=1, max_cores=3))
    assert get_policy("fifo").allocate(snap) == {"early": 3, "late": 2}


def test_unknown_policy_and_bad_params() -> None:
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(PolicyError, match="policy 'fair' has no parameter 'weight'; allowed: none"):
        get_policy("fair", weight=3)
