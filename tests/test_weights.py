"""Job weights: fair gives shares in proportion to them, slaq weighs the predicted reductions
it compares, and the config checks them."""

from __future__ import annotations

import random

import pytest

from slaq_mpi.config.experiment import parse
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def _job(name: str, weight: float, losses: tuple[float, ...] = (), cores: int = 0,
         arrival: float = 0.0) -> JobSnapshot:
    throughput = ((max(cores, 1), 0.1),) if losses else ()
    return JobSnapshot(job_id=name, losses=losses, throughput=throughput, cores=cores,
                       max_cores=64, arrival=arrival, weight=weight, convergence="sublinear")


def _snap(capacity: int, *jobs: JobSnapshot) -> ClusterSnapshot:
    return ClusterSnapshot(capacity=capacity, now=10.0, epoch_seconds=1.0, jobs=jobs)


@pytest.mark.parametrize(("capacity", "expected"), [(4, (1, 3)), (8, (2, 6)), (16, (4, 12))])
def test_fair_gives_two_identical_jobs_weighted_1_and_3_cores_1_to_3(capacity: int,
                                                                     expected: tuple[int, int]) -> None:
    alloc = get_policy("fair").allocate(_snap(capacity, _job("light", 1.0), _job("heavy", 3.0)))
    assert (alloc["light"], alloc["heavy"]) == expected


def test_fair_with_equal_weights_gives_equal_shares() -> None:
    alloc = get_policy("fair").allocate(_snap(9, _job("a", 2.0), _job("b", 2.0), _job("c", 2.0)))
    assert alloc == {"a": 3, "b": 3, "c": 3}


def test_slaq_never_gives_the_heavier_of_two_identical_jobs_fewer_cores() -> None:
    rng = random.Random(5)
    for _ in range(60):
        n = rng.randint(2, 30)
        rate = rng.uniform(0.02, 0.5)
        losses = tuple(1.0 / (1.0 + rate * k) for k in range(n))
        cores = rng.randint(1, 4)
        capacity = rng.randint(2, 24)
        heavy = rng.uniform(1.5, 5.0)
        # a fresh policy per snapshot: its curve memo must not tell the two apart
        alloc = get_policy("slaq").allocate(_snap(
            capacity, _job("light", 1.0, losses, cores), _job("heavy", heavy, losses, cores),
            _job("other", 1.0, tuple(1.0 / (1.0 + 0.1 * k) for k in range(n)), cores, arrival=1.0)))
        assert alloc["heavy"] >= alloc["light"], (alloc, capacity, heavy, n)


@pytest.mark.parametrize("weight", [0, -1, "heavy", float("inf")])
def test_a_weight_that_is_not_a_positive_number_is_refused(weight: object) -> None:
    raw = {"name": "w", "jobs": [{"name": "a", "algorithm": "logreg", "weight": weight,
                                   "dataset": {"generator": "classification", "rows": 100, "features": 3}}]}
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.weight"):
        parse(raw, check_files=False)


def test_weight_defaults_to_one() -> None:
    raw = {"name": "w", "jobs": [{"name": "a", "algorithm": "logreg",
                                   "dataset": {"generator": "classification", "rows": 100, "features": 3}}]}
    assert parse(raw, check_files=False).jobs[0].weight == 1.0
