"""Every registered policy keeps the contract on seeded random snapshots (including jobs whose
iterations do not get faster with cores, where ties in predicted finish times are exact)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from slaq_mpi.policies import POLICY_NAMES, Policy, get_policy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def random_snapshot(seed: int) -> ClusterSnapshot:
    rng = np.random.default_rng([seed, 7])
    capacity = int(rng.integers(1, 40))
    jobs = []
    for i in range(int(rng.integers(1, 12))):
        n = int(rng.integers(0, 60))
        k = np.arange(n, dtype=np.float64)
        losses = 1.0 / (1.0 + rng.uniform(0.01, 1.0) * k) + rng.uniform(0, 1)
        serial = rng.random() < 0.4  # all serial: t(a) is the same on any core count
        alpha, beta = (0.0, 0.1) if serial else (rng.uniform(0.1, 2.0), rng.uniform(0.0, 0.1))
        seen = rng.choice([1, 2, 3, 5], size=int(rng.integers(0, 4)))
        obs = tuple((int(c), alpha / c + beta) for c in seen)
        util: tuple[tuple[str, float], ...] = ()
        if rng.random() < 0.6:
            util = (("deadline", float(rng.uniform(0, 80))), ("decay", float(rng.uniform(0, 30))),
                    ("value", float(rng.uniform(0, 10))))
        jobs.append(JobSnapshot(
            job_id=f"j{i}", losses=tuple(losses.tolist()), throughput=obs, cores=int(rng.integers(0, 4)),
            max_cores=int(rng.integers(1, 20)), arrival=float(rng.uniform(0, 30)),
            attained_core_seconds=float(rng.uniform(0, 50)), utility=util,
            max_iterations=None if rng.random() < 0.3 else n + int(rng.integers(1, 300))))
    return ClusterSnapshot(capacity=capacity, now=30.0, epoch_seconds=2.0, jobs=tuple(jobs))


# Policies that do not promise every job a core when there are enough: why (docs/policies.md).
# Every other registered policy, and any added later, must give one.
SERVES_SOME = {
    "fifo": "jobs in arrival order take all the cores they can use",
    "utility": "serves only the jobs whose marginal utility exceeds the price of a core",
}
# Policies that give out every core some job can use (docs/policies.md, README).
WORK_CONSERVING = ("fair", "fifo", "slaq")


def check_contract(name: str, make: Callable[[], Policy], seeds: range = range(60)) -> None:
    """``make()``'s allocations keep the contract on seeded random snapshots; AssertionError
    naming the policy, the seed and the allocation if not."""
    for seed in seeds:
        snap = random_snapshot(seed)
        alloc = make().allocate(snap)
        caps = {j.job_id: j.max_cores for j in snap.jobs}
        where = (name, seed, alloc)
        assert set(alloc) <= set(caps), where  # only jobs of the snapshot
        assert all(type(v) is int and 0 <= v <= caps[k] for k, v in alloc.items()), where  # max_cores
        assert sum(alloc.values()) <= snap.capacity, where  # no overbooking
        if snap.capacity >= len(snap.jobs) and name not in SERVES_SOME:
            assert all(alloc.get(j.job_id, 0) >= 1 for j in snap.jobs), where  # every job present
        if name in WORK_CONSERVING:
            usable = min(snap.capacity, sum(min(c, snap.capacity) for c in caps.values()))
            assert sum(alloc.values()) == usable, where  # the capacity is used
        policy = make()
        assert policy.allocate(snap) == alloc and policy.allocate(snap) == alloc, where  # deterministic


def test_the_registry_holds_the_papers_policies() -> None:
    assert {"slaq", "fair", "fifo"} <= set(POLICY_NAMES)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_allocations_respect_capacity_and_caps(name: str) -> None:
    check_contract(name, lambda: get_policy(name))


def test_the_contract_check_catches_an_overbooking_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from slaq_mpi.policies import fair

    shares = fair.FairPolicy.allocate

    def overbooks(self: object, snap: ClusterSnapshot) -> dict[str, int]:  # one core too many
        alloc = dict(shares(self, snap))  # type: ignore[arg-type]
        first = snap.jobs[0].job_id
        alloc[first] = alloc.get(first, 0) + 1
        return alloc

    monkeypatch.setattr(fair.FairPolicy, "allocate", overbooks)
    with pytest.raises(AssertionError, match=r"^\('fair', "):
        check_contract("fair", lambda: get_policy("fair"))


def test_finish_time_fair_with_serial_jobs_does_not_overbook() -> None:
    # regression: equal predicted rho on every core count once made the worst job ask for all
    serial = tuple((c, 0.1) for c in (1, 2, 4))
    k = np.arange(150, dtype=np.float64)
    jobs = tuple(JobSnapshot(job_id=f"s{i}", losses=tuple((1.0 / (1.0 + 0.1 * k) + 0.1).tolist()),
                             throughput=serial, cores=1, max_cores=7, arrival=6.0 * i, max_iterations=500)
                 for i in range(3))
    for now in np.linspace(26.0, 31.0, 11):
        alloc = get_policy("finish-time-fair").allocate(ClusterSnapshot(7, float(now), 2.0, jobs))
        assert sum(alloc.values()) <= 7 and min(alloc.values()) >= 1


# every constructor check of every policy: (policy, the one bad parameter, its value, the message)
BAD_PARAMETERS = [
    ("slaq", "window", 2, "window must be an integer in [3, 1000] (got 2)"),
    ("slaq", "window", 10**6, "window must be an integer in [3, 1000] (got 1000000)"),
    ("slaq", "min_gain", -1.0, "min_gain must be a number >= 0 (got -1.0)"),
    ("slaq", "decay", 0, "decay must be > 0 (got 0)"),
    ("slaq", "prior_seconds", -1.0, "prior_seconds must be > 0 (got -1.0)"),
    ("slaq", "reserve_fraction", 1.5, "reserve_fraction must be a fraction in [0, 1] (got 1.5)"),
    ("slaq", "reserve_fraction", -0.1, "reserve_fraction must be a fraction in [0, 1] (got -0.1)"),
    ("slaq", "normalize", "spans", "normalize must be 'span' or 'max_drop' (got 'spans')"),
    ("goodput", "p", 2.0, "p must be a finite number <= 1 (got 2.0)"),
    ("goodput", "window", 1, "window must be an integer in [3, 1000] (got 1)"),
    ("finish-time-fair", "slack", 0.5, "slack must be a finite number >= 1 (got 0.5)"),
    ("finish-time-fair", "decay", -2.0, "decay must be > 0 (got -2.0)"),
    ("utility", "window", 0, "window must be an integer in [3, 1000] (got 0)"),
    ("utility", "decay", 0.0, "decay must be > 0 (got 0.0)"),
]


@pytest.mark.parametrize(("name", "key", "value", "message"), BAD_PARAMETERS)
def test_a_bad_parameter_is_named_with_its_value_and_what_is_allowed(name: str, key: str, value: object,
                                                                   message: str) -> None:
    from slaq_mpi.policies import PolicyError

    with pytest.raises(PolicyError) as info:
        get_policy(name, **{key: value})
    assert str(info.value) == f"bad parameters for policy {name!r}: {message}"


def test_nan_is_refused_by_the_constructor_too() -> None:
    from slaq_mpi.policies.slaq import SlaqPolicy

    with pytest.raises(ValueError, match=r"^decay must be > 0 \(got nan\)$"):
        SlaqPolicy(decay=float("nan"))


@pytest.mark.parametrize(("alloc", "message"), [
    ({"nobody": 1}, "unknown job 'nobody'"),
    ({"a": 1.5}, "gave job 'a' 1.5 cores"),
    ({"a": -1}, "gave job 'a' -1 cores"),
    ({"a": "2"}, "gave job 'a' '2' cores"),
    ({"a": True}, "gave job 'a' True cores"),
    ({"a": 4}, "max_cores, 3"),
    ({"a": 3, "b": 3}, "allocated 6 cores; capacity is 5"),
])
def test_a_broken_allocation_is_refused_alike_live_and_in_simulation(alloc: dict, message: str) -> None:
    from slaq_mpi.errors import ContractError
    from slaq_mpi.policies.snapshot import checked_allocation
    from slaq_mpi.sim import ScalingModel, SimJob, SimulationError, simulate

    snap = ClusterSnapshot(capacity=5, now=0.0, epoch_seconds=1.0, jobs=(
        JobSnapshot(job_id="a", losses=(), throughput=(), cores=0, max_cores=3),
        JobSnapshot(job_id="b", losses=(), throughput=(), cores=0, max_cores=5)))
    with pytest.raises(ContractError, match=message):  # what the live coordinator calls
        checked_allocation(alloc, snap, "mine")

    class Broken:
        name = "mine"

        def allocate(self, _snap: ClusterSnapshot) -> dict:
            return alloc

    jobs = [SimJob(name=n, algorithm="x", convergence="linear", arrival=0.0, curve=0.5 ** np.arange(5),
                   l_star=0.0, scaling=ScalingModel(work=1.0), max_cores=m, stop_iter=4, max_iterations=4)
            for n, m in (("a", 3), ("b", 5))]
    with pytest.raises(SimulationError, match=message):
        simulate(jobs, Broken(), capacity=5, epoch_seconds=1.0)


def test_a_good_allocation_is_kept_without_its_zeros() -> None:
    from slaq_mpi.policies.snapshot import checked_allocation

    snap = ClusterSnapshot(capacity=5, now=0.0, epoch_seconds=1.0, jobs=(
        JobSnapshot(job_id="a", losses=(), throughput=(), cores=0, max_cores=3),
        JobSnapshot(job_id="b", losses=(), throughput=(), cores=0, max_cores=5)))
    assert checked_allocation({"a": np.int64(3), "b": 0}, snap, "mine") == {"a": 3}
    assert checked_allocation({"a": 2.0, "b": 3}, snap, "mine") == {"a": 2, "b": 3}
