"""The utility policy (after Bao et al.) and the ``utility:`` schema."""

from __future__ import annotations

import numpy as np
import pytest

from slaq_mpi.errors import ConfigError
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot
from slaq_mpi.policies.utility import utility_at, validate_utility


def curve(n: int = 20) -> tuple[float, ...]:
    k = np.arange(n, dtype=np.float64)
    return tuple((1.0 / (1.0 + 0.1 * k) + 0.1).tolist())


# seconds per iteration: 1/a + 0.01, observed on 1, 2, 4 and 8 cores
LAW = tuple((c, 1.0 / c + 0.01) for c in (1, 2, 4, 8))


def job(name: str, utility: dict[str, float] | None = None, arrival: float = 0.0, budget: int = 120,
        max_cores: int = 64) -> JobSnapshot:
    pairs = tuple(sorted((k, float(v)) for k, v in (utility or {}).items()))
    return JobSnapshot(job_id=name, losses=curve(), throughput=LAW, cores=1, max_cores=max_cores,
                       arrival=arrival, utility=pairs, max_iterations=budget)


def snap(capacity: int, *jobs: JobSnapshot, now: float = 20.0) -> ClusterSnapshot:
    return ClusterSnapshot(capacity=capacity, now=now, epoch_seconds=2.0, jobs=jobs)


# --- the schema ---------------------------------------------------------------------------

def test_validate_accepts_and_normalizes() -> None:
    assert validate_utility({"value": 10, "deadline": 120, "decay": 60}, "w") == {
        "value": 10.0, "deadline": 120.0, "decay": 60.0}
    assert validate_utility({"value": 3}, "w") == {"value": 3.0, "decay": 0.0}


@pytest.mark.parametrize(("raw", "where"), [
    ([1, 2], "jobs[0].utility"),
    ({"value": 1, "bonus": 2}, "jobs[0].utility.bonus"),
    ({"deadline": 5}, "jobs[0].utility.value"),
    ({"value": -1}, "jobs[0].utility.value"),
    ({"value": True}, "jobs[0].utility.value"),
    ({"value": 1, "deadline": float("nan")}, "jobs[0].utility.deadline"),
    ({"value": 1, "decay": 10}, "jobs[0].utility.decay"),
])
def test_validate_rejects_bad_input(raw: object, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_utility(raw, "jobs[0].utility")
    assert info.value.where == where


def test_utility_of_completion_time() -> None:
    spec = {"value": 10.0, "deadline": 100.0, "decay": 50.0}
    got = utility_at(spec, np.array([0.0, 100.0, 125.0, 150.0, 400.0, np.inf]))
    assert got.tolist() == [10.0, 10.0, 5.0, 0.0, 0.0, 0.0]
    assert utility_at({"value": 2.0, "deadline": 10.0, "decay": 0.0}, [10.0, 10.5]).tolist() == [2.0, 0.0]
    assert utility_at({"value": 2.0}, [1e9]).tolist() == [2.0]


# --- the policy ---------------------------------------------------------------------------

def test_job_past_its_value_gets_no_cores_while_others_have_value() -> None:
    s = snap(16, job("late", {"value": 10, "deadline": 5, "decay": 5}),  # arrived at 0, now 20
             job("valuable", {"value": 1, "deadline": 500}))
    alloc = get_policy("utility").allocate(s)
    assert alloc["late"] == 0
    assert alloc["valuable"] == 16


def test_when_nobody_has_value_every_job_runs() -> None:
    s = snap(8, job("a", {"value": 1, "deadline": 1}), job("b", {"value": 1, "deadline": 2}))
    assert get_policy("utility").allocate(s) == {"a": 4, "b": 4}


def test_two_identical_jobs_get_equal_cores() -> None:
    spec = {"value": 5, "deadline": 300, "decay": 100}
    assert get_policy("utility").allocate(snap(10, job("a", spec), job("b", spec))) == {"a": 5, "b": 5}


def test_urgent_valuable_job_gets_enough_cores_for_its_deadline() -> None:
    # 100 iterations left at 1/a + 0.01 s; within 40 s needs 1/a + 0.01 <= 0.4, i.e. a >= 3
    urgent = job("urgent", {"value": 10, "deadline": 40}, arrival=20.0)
    relaxed = job("relaxed", {"value": 1, "deadline": 100000}, arrival=0.0)
    alloc = get_policy("utility").allocate(snap(5, urgent, relaxed, now=20.0))
    assert alloc["urgent"] >= 3
    assert alloc["relaxed"] >= 1 and sum(alloc.values()) == 5


def test_price_keeps_low_value_jobs_out_when_cores_are_scarce() -> None:
    # both need 3 of 5 cores for their deadline: only the more valuable one can have them,
    # even though the other arrived first
    poor = job("poor", {"value": 1, "deadline": 41}, arrival=19.0)
    rich = job("rich", {"value": 10, "deadline": 40}, arrival=20.0)
    alloc = get_policy("utility").allocate(snap(5, poor, rich, now=20.0))
    assert alloc["rich"] >= 3
    assert alloc["poor"] < 3


def test_without_utilities_it_shares_equally() -> None:
    alloc = get_policy("utility").allocate(snap(9, job("a"), job("b"), job("c", max_cores=1)))
    assert alloc == {"a": 4, "b": 4, "c": 1}


def test_best_effort_jobs_get_leftover_cores() -> None:
    s = snap(12, job("valued", {"value": 3, "deadline": 1000}, max_cores=4), job("plain"))
    alloc = get_policy("utility").allocate(s)
    assert alloc["plain"] >= 8 and sum(alloc.values()) == 12
