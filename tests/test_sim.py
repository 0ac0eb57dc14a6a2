"""The simulator engine, workload generation and settings (no MPI)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slaq_mpi.config import experiment as config
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies.snapshot import ClusterSnapshot
from slaq_mpi.report.evaluation import makespan, observed
from slaq_mpi.sim import ScalingModel, SimJob, SimulationError, parse_settings, run_policies, simulate
from slaq_mpi.sim.curves import CurveLibrary, analytic_curve
from slaq_mpi.sim.oracle import _largest_counts
from slaq_mpi.sim.workload import stop_iteration


def make_spec(simulation: dict[str, Any], seed: int = 3, jobs: list[dict[str, Any]] | None = None) -> Any:
    raw = {
        "name": "t", "epoch_seconds": 1.0, "policy": "fair", "ranks": 9, "seed": seed,
        "jobs": jobs or [
            {"name": "lr", "algorithm": "logreg", "stop": {"max_iterations": 300, "tolerance": 1e-6},
             "dataset": {"generator": "classification", "rows": 100000, "features": 50}},
            {"name": "km", "algorithm": "kmeans", "stop": {"max_iterations": 300, "tolerance": 1e-6},
             "dataset": {"generator": "blobs", "rows": 100000, "features": 50}},
        ],
        "simulation": simulation,
    }
    return config.parse(raw, check_files=False)


SMALL = {"capacity": 16, "curves": "analytic", "workload": {"jobs": 12, "mean_gap": 3.0},
         "work_scale": 3.0, "scaling": {"default": {"overhead": 0.01, "comm": 0.002}}}


def linear_job(name: str = "j", arrival: float = 0.0, n: int = 10, work: float = 1.0) -> SimJob:
    curve = 0.5 ** np.arange(n + 1)
    return SimJob(name=name, algorithm="x", convergence="linear", arrival=arrival, curve=curve,
                  l_star=0.0, scaling=ScalingModel(work=work), max_cores=64, stop_iter=n,
                  max_iterations=n)


def test_same_seed_same_result_different_seed_different_workload() -> None:
    a = run_policies(make_spec(SMALL), ["fair", "oracle"])
    b = run_policies(make_spec(SMALL), ["fair", "oracle"])
    for name in ("fair", "oracle"):
        assert np.array_equal(a[name].alloc, b[name].alloc)
        for jn, tr in a[name].jobs.items():
            assert np.array_equal(tr.loss, b[name].jobs[jn].loss)
            assert np.array_equal(tr.time, b[name].jobs[jn].time)
    c = run_policies(make_spec(SMALL, seed=4), ["fair"])
    arr_a = sorted(j.arrival for j in a["fair"].jobs.values())
    arr_c = sorted(j.arrival for j in c["fair"].jobs.values())
    assert arr_a != arr_c


def test_policies_share_the_workload() -> None:
    runs = run_policies(make_spec(SMALL), ["fair", "fifo"])
    f, g = runs["fair"], runs["fifo"]
    assert f.job_names == g.job_names
    for name in f.job_names:
        assert f.jobs[name].arrival == g.jobs[name].arrival
        assert f.jobs[name].l_star == g.jobs[name].l_star
        n = min(len(f.jobs[name].loss), len(g.jobs[name].loss))
        assert np.array_equal(f.jobs[name].loss[:n], g.jobs[name].loss[:n])  # same true curve


def test_poisson_workload_shape() -> None:
    runs = run_policies(make_spec(SMALL), ["fair"])
    run = runs["fair"]
    arrivals = np.array([j.arrival for j in run.jobs.values()])
    assert len(arrivals) == 12 and arrivals.min() == 0.0
    assert all(j.status == "done" for j in run.jobs.values())
    assert {n.rsplit("-", 1)[0] for n in run.job_names} <= {"lr", "km"}


def test_engine_iteration_times_exact() -> None:
    class Four:
        name = "four"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            return {j.job_id: 4 for j in snap.jobs}

    run = simulate([linear_job(n=10)], Four(), capacity=4, epoch_seconds=1.0)
    tr = run.jobs["j"]
    assert tr.time == pytest.approx(np.arange(1, 11) * 0.25)  # 1 s of work on 4 cores each
    assert tr.loss == pytest.approx(0.5 ** np.arange(10))  # the loss before each update
    assert tr.end == pytest.approx(2.5) and tr.status == "done"
    assert tr.cores.tolist() == [4] * 10
    assert run.alloc[:, 0].tolist() == [4, 4, 4]


def test_progress_carries_over_between_epochs() -> None:
    class One:
        name = "one"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            return {j.job_id: 1 for j in snap.jobs}

    run = simulate([linear_job(n=3, work=1.5)], One(), capacity=1, epoch_seconds=1.0)
    assert run.jobs["j"].time == pytest.approx([1.5, 3.0, 4.5])


def test_policy_sees_only_the_past() -> None:
    seen: list[ClusterSnapshot] = []

    class Spy:
        name = "spy"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            seen.append(snap)
            return {j.job_id: 2 for j in snap.jobs}

    jobs = [linear_job("a", 0.0, n=40, work=3.0), linear_job("b", 2.5, n=40, work=3.0)]
    run = simulate(jobs, Spy(), capacity=4, epoch_seconds=1.0)
    for snap in seen:
        for js in snap.jobs:
            tr = run.jobs[js.job_id]
            done = int(np.sum(tr.time <= snap.now + 1e-9))
            assert len(js.losses) == done  # exactly the iterations finished by now
            assert js.arrival <= snap.now
            assert all(c == 2 for c, _ in js.throughput)
    assert seen[0].jobs[0].job_id == "a" and len(seen[0].jobs) == 1
    # b's arrival at 2.5 is decided at once; the next regular decision is an epoch later
    assert [s.now for s in seen[:5]] == [0.0, 1.0, 2.0, 2.5, 3.5]
    assert {s.epoch_seconds for s in seen} == {1.0}
    assert [len(s.jobs) for s in seen[:4]] == [1, 1, 1, 2]
    assert {s.move_seconds for s in seen} == {0.0}  # the simulator's move cost (none given)
    simulate(jobs, Spy(), capacity=4, epoch_seconds=1.0, reconfigure_seconds=0.2, max_epochs=1)
    assert seen[-1].move_seconds == 0.2


@pytest.mark.parametrize("epoch_model", ["fluid", "live"])
def test_a_job_that_ends_frees_its_cores_at_once(epoch_model: str) -> None:
    class Even:
        name = "even"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            return {j.job_id: snap.capacity // len(snap.jobs) for j in snap.jobs}

    long = linear_job("long", n=20, work=1.0)  # 1 s per iteration on 1 core
    for short_work, end in ((0.5, 1.0), (0.9, 1.8)):
        run = simulate([linear_job("short", n=2, work=short_work), long], Even(), capacity=2,
                       epoch_seconds=2.0, epoch_model=epoch_model)
        assert run.jobs["short"].end == pytest.approx(end)
        # the end is decided at once, and the long job gets the freed core then
        assert run.epoch_time[:3].tolist() == pytest.approx([0.0, end, end + 2.0])
        assert run.alloc[:2, 1].tolist() == [1, 2]
    run = simulate([linear_job("short", n=2, work=0.5), long], Even(), capacity=2,
                   epoch_seconds=2.0, epoch_model=epoch_model)
    assert run.jobs["long"].time[:3] == pytest.approx([1.0, 1.5, 2.0])  # at a boundary: no wait
    assert run.jobs["long"].attained_core_seconds == pytest.approx(1.0 + 2 * 9.5)

    class NotC:
        name = "not-c"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            return {j.job_id: int(j.job_id != "c") for j in snap.jobs}

    # each end is decided at once, however close the next: a ends at 1.6 s, b at 1.8 s
    jobs = [linear_job("a", n=2, work=0.8), linear_job("b", n=2, work=0.9), linear_job("c", n=2)]
    run = simulate(jobs, NotC(), capacity=2, epoch_seconds=2.0, max_epochs=3,
                   epoch_model=epoch_model)
    assert run.epoch_time.tolist() == pytest.approx([0.0, 1.6, 1.8])


def test_a_policy_sees_what_the_jobs_have_reported() -> None:
    seen: list[tuple[float, int, int]] = []

    class Spy:
        name = "spy"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            job = snap.jobs[0]
            seen.append((snap.now, len(job.losses), len(job.throughput)))
            return {job.job_id: 1 if snap.now < 3.5 else 2}

    # 0.3 s per iteration on 1 core: it reports at the end of its first iteration at least an
    # epoch after it started (1.2 s), then an epoch after its last report (2.4 s, 3.6 s); moved
    # at 4 s, it reports at its switch (4.2 s) what it did since
    run = simulate([linear_job("a", n=40, work=0.3)], Spy(), capacity=2, epoch_seconds=1.0,
                   max_epochs=6, epoch_model="live")
    assert seen == [(0.0, 0, 0), (1.0, 0, 0), (2.0, 4, 1), (3.0, 8, 2), (4.0, 12, 3), (5.0, 14, 4)]
    assert run.jobs["a"].throughput.tolist()[:3] == [[1, pytest.approx(0.3)]] * 3
    assert len(run.jobs["a"].loss) > 14  # the trace holds every iteration, reported or not


def test_a_burst_of_arrivals_is_decided_together() -> None:
    seen: list[float] = []

    class Spy:
        name = "spy"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            seen.append(snap.now)
            return {j.job_id: 1 for j in snap.jobs}

    jobs = [linear_job("a", 0.0, n=40), linear_job("b", 1.0, n=40), linear_job("c", 1.01, n=40),
            linear_job("d", 1.02, n=40)]
    simulate(jobs, Spy(), capacity=4, epoch_seconds=2.0, max_epochs=4)
    # b is decided at once; c and d arrive within 1/32 epoch of that decision: one for both
    assert seen == pytest.approx([0.0, 1.0, 1.0625, 3.0625])


def test_overallocation_is_an_error() -> None:
    class Greedy:
        name = "greedy"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            return {j.job_id: 5 for j in snap.jobs}

    with pytest.raises(SimulationError, match="capacity is 4"):
        simulate([linear_job()], Greedy(), capacity=4, epoch_seconds=1.0)


@pytest.mark.parametrize("seed", range(8))
def test_the_oracle_counts_each_jobs_share_of_the_largest_marginals_as_argpartition_picks(
        seed: int) -> None:
    rng = np.random.default_rng(seed)
    # non-increasing positive marginals, rounded so that values tie within and across jobs
    margs = [np.round(np.sort(rng.exponential(1.0, int(rng.integers(1, 30))))[::-1] + 0.1, 1)
             for _ in range(int(rng.integers(1, 6)))]
    flat = np.concatenate(margs)
    who = np.repeat(np.arange(len(margs)), [len(m) for m in margs])
    for k in (1, 2, len(flat) // 2 + 1, len(flat) - 1, len(flat), len(flat) + 3):
        if k < 1:
            continue
        top = who if len(flat) <= k else who[np.argpartition(-flat, k - 1)[:k]]
        assert _largest_counts(margs, k) == np.bincount(top, minlength=len(margs)).tolist()


def test_oracle_beats_fair_on_its_objective() -> None:
    from slaq_mpi.report.evaluation import average_normalized_loss, common_l_star

    runs = run_policies(make_spec(SMALL), ["fair", "oracle"])
    ls = common_l_star(runs.values())
    assert average_normalized_loss(runs["oracle"], ls) < average_normalized_loss(runs["fair"], ls)


def test_max_epochs_and_horizon_stop_early() -> None:
    spec = make_spec({**SMALL, "max_epochs": 5})
    run = run_policies(spec, ["fair"])["fair"]
    assert len(run.epoch_time) == 5
    assert any(j.status in ("running", "waiting") for j in run.jobs.values())


def test_horizon_cuts_the_last_epoch() -> None:
    from slaq_mpi.policies import get_policy

    job = linear_job(n=40, work=1.0)  # 0.25 s per iteration on 4 cores
    run = simulate([job], get_policy("fair"), capacity=4, epoch_seconds=2.0, horizon=0.5)
    trace = run.jobs["j"]
    assert list(run.epoch_time) == [0.0]
    assert len(trace.loss) == 2 and trace.time.tolist() == pytest.approx([0.25, 0.5])
    assert trace.attained_core_seconds == pytest.approx(4 * 0.5)  # 4 cores until the horizon
    assert trace.status == "running"
    assert makespan(observed(run)) == pytest.approx(0.5)  # the run ended at the horizon
    # a horizon after several epochs: the epochs before it are whole, the last one is cut
    run = simulate([job], get_policy("fair"), capacity=4, epoch_seconds=2.0, horizon=5.0)
    assert list(run.epoch_time) == [0.0, 2.0, 4.0]
    assert len(run.jobs["j"].loss) == 20 and run.jobs["j"].time.max() == pytest.approx(5.0)


@pytest.mark.parametrize("epoch_model", ["fluid", "live"])
def test_an_arrival_after_the_horizon_is_never_simulated(epoch_model: str) -> None:
    from slaq_mpi.policies import get_policy

    early, late = linear_job("a", 0.0, n=4), linear_job("b", 100.0, n=4)  # a ends at 1 s on 4 cores
    run = simulate([early, late], get_policy("fair"), capacity=4, epoch_seconds=2.0, horizon=50.0,
                   epoch_model=epoch_model)
    assert run.stopped == pytest.approx(50.0)
    assert all(t < 50.0 for t in run.epoch_time)
    b = run.jobs["b"]
    assert b.status == "waiting" and len(b.loss) == 0 and b.attained_core_seconds == 0.0


@pytest.mark.parametrize("epoch_model", ["fluid", "live"])
def test_a_job_back_from_a_pause_pays_the_reconfiguration_as_live(epoch_model: str) -> None:
    class Rotate:
        """2 cores to job a, then none (b runs), then 2 again."""
        name = "rotate"

        def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
            turn = round(snap.now / 2.0) % 3
            return {"a": 0 if turn == 1 else 2, "b": 2 if turn == 1 else 0}

    jobs = [linear_job("a", n=400, work=2.0), linear_job("b", n=400, work=2.0)]  # 1 s/iter on 2
    run = simulate(jobs, Rotate(), capacity=2, epoch_seconds=2.0, max_epochs=3,
                   reconfigure_seconds=0.5, epoch_model=epoch_model)
    a = run.jobs["a"]
    # epoch 0: 2 iterations; epoch 1: paused; epoch 2: back on 2 cores, 0.5 s lost to the restore
    assert len(a.loss) >= 3
    assert a.time[2] == pytest.approx(4.0 + 0.5 + 1.0)


def test_stop_iteration_rules() -> None:
    curve = np.array([8.0, 4.0, 2.0, 1.0, 1.0, 1.0])
    assert stop_iteration(curve, 3, None, 100) == 3
    assert stop_iteration(curve, None, 1e-9, 100) == 5  # reports 1.0 twice after 5 iterations
    assert stop_iteration(curve, 100, None, 50) == 50  # the simulator's cap


@pytest.mark.parametrize("jitter", [400, 5.5, -0.1, math.inf, True])
def test_size_jitter_has_a_bound(jitter: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(make_spec({"workload": {"jobs": 3, "mean_gap": 1.0, "size_jitter": jitter}}))
    assert info.value.where == "simulation.workload.size_jitter"
    assert "[0, 5]" in str(info.value)


def test_size_jitter_up_to_five_is_allowed() -> None:
    settings = parse_settings(make_spec({"workload": {"jobs": 3, "mean_gap": 1.0, "size_jitter": 5}}))
    assert settings.workload is not None and settings.workload.size_jitter == 5.0


def test_overflowing_job_work_names_the_keys_that_set_it() -> None:
    spec = make_spec({"capacity": 4, "curves": "analytic", "work_scale": 1e308,
                      "scaling": {"default": {"cost": 1e-6}}})
    with pytest.raises(ConfigError) as info:
        run_policies(spec, ["fair"])
    assert info.value.where == "simulation.work_scale"
    for key in ("'lr'", "inf", "simulation.scaling.logreg.cost", "simulation.workload.size_jitter"):
        assert key in str(info.value), key


def test_a_job_that_would_run_for_years_is_refused_unless_the_run_is_bounded() -> None:
    huge = {"capacity": 4, "curves": "analytic", "work_scale": 1e300}  # finite, absurd
    with pytest.raises(ConfigError) as info:
        run_policies(make_spec(huge), ["fair"])
    assert info.value.where == "simulation.work_scale"
    assert "simulated seconds alone" in str(info.value) and "simulation.horizon" in str(info.value)
    run = run_policies(make_spec({**huge, "horizon": 10.0}), ["fair"])["fair"]  # asked for: fine
    assert run.epoch_time.max() < 10.0
    run = run_policies(make_spec(huge), ["fair"], max_epochs=3)["fair"]  # as --max-epochs 3
    assert len(run.epoch_time) == 3


@pytest.mark.parametrize(("simulation", "where", "value"), [
    ({"scaling": {"default": {"overhead": 1e6}}}, "simulation.scaling.default.overhead", 1e6),
    ({"scaling": {"logreg": {"overhead": 1e6}}}, "simulation.scaling.logreg.overhead", 1e6),
    ({"scaling": {"default": {"overhead": 1e6}, "logreg": {"cost": 1e-9}}},
     "simulation.scaling.default.overhead", 1e6),
    ({"max_iterations": 3 * 10**9}, "simulation.max_iterations", 3 * 10**9),  # the built-in overhead
    # fine on one core, years on the 4 a policy may give it (fair does): the simulation would
    # run for hours and grow without bound
    ({"scaling": {"logreg": {"comm": 1e6}}}, "simulation.scaling.logreg.comm", 1e6),
])
def test_a_job_made_years_long_by_its_overhead_or_comm_names_the_key_that_set_it(simulation: dict, where: str,
                                                                         value: float) -> None:
    endless = [{"name": "lr", "algorithm": "logreg", "stop": {"max_iterations": 3 * 10**9},  # no tolerance
                "dataset": {"generator": "classification", "rows": 100, "features": 5}}]
    spec = make_spec({"capacity": 4, "curves": "analytic", **simulation}, jobs=endless)
    with pytest.raises(ConfigError) as info:
        run_policies(spec, ["fair"])
    # not work_scale, which the user may not have set
    assert (info.value.where, info.value.value) == (where, value)
    assert "communication" in str(info.value) and "simulation.horizon" in str(info.value)


@pytest.mark.parametrize(("simulation", "where", "needle"), [
    ({"nodes": 20}, "simulation.cores_per_node", "required with simulation.nodes"),
    ({"cores_per_node": 32}, "simulation.nodes", "required with simulation.cores_per_node"),
    ({"capacity": 64, "nodes": 2, "cores_per_node": 32}, "simulation.nodes", "not both"),
    ({"capacity": 64, "cores_per_node": 32}, "simulation.cores_per_node", "not both"),
    ({"capacity": 2**40}, "simulation.capacity", "[1, 16777216]"),
    ({"nodes": 2**14, "cores_per_node": 2**12}, "simulation.nodes", "at most 16777216 cores"),
    ({"workload": {"jobs": 2**70, "mean_gap": 1.0}}, "simulation.workload.jobs", "[1, 1000000]"),
])
def test_capacity_comes_from_capacity_or_nodes_times_cores(simulation: dict[str, Any], where: str,
                                                          needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(make_spec(simulation))
    assert info.value.where == where and needle in str(info.value)
    assert parse_settings(make_spec({"nodes": 3, "cores_per_node": 4})).capacity == 12


def test_a_policy_listed_twice_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(make_spec({"policies": ["slaq", "fair", "slaq"]}))
    assert info.value.where == "simulation.policies" and "listed twice" in str(info.value)


def test_settings_validation_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"simulation\.workload\.mean_gap"):
        parse_settings(make_spec({"workload": {"jobs": 3, "mean_gap": -1}}))
    with pytest.raises(ConfigError, match=r"simulation\.bogus"):
        parse_settings(make_spec({"bogus": 1}))
    with pytest.raises(ConfigError, match=r"simulation\.policies"):
        parse_settings(make_spec({"policies": ["nope"]}))
    with pytest.raises(ConfigError, match=r"simulation\.scaling\.nosuchalg"):
        parse_settings(make_spec({"scaling": {"nosuchalg": {"overhead": 1}}}))
    s = parse_settings(make_spec({"nodes": 2, "cores_per_node": 8,
                                  "scaling": {"default": {"comm": 0.5}, "logreg": {"overhead": 2}}}))
    assert s.capacity == 16
    assert s.scaling_for("logreg").overhead == 2 and s.scaling_for("logreg").comm == 0.5
    assert parse_settings(make_spec({})).capacity == 8  # ranks - 1


def test_analytic_curves_converge_and_library_roundtrip(tmp_path: Any) -> None:
    rng = np.random.default_rng(0)
    for kind in ("sublinear", "linear"):
        c = analytic_curve(kind, rng)
        assert c.losses[0] == pytest.approx(1.0)
        assert np.all(np.diff(c.losses) <= 0) and c.losses[-1] >= c.l_star
        assert (c.losses[-1] - c.l_star) / (1 - c.l_star) < 0.05
    lib = CurveLibrary([analytic_curve("linear", rng, name="a"), analytic_curve("sublinear", rng, name="b")])
    lib.save(tmp_path / "c.npz")
    back = CurveLibrary.load(tmp_path / "c.npz")
    assert [c.name for c in back.curves] == ["a", "b"]
    assert np.array_equal(back.curves[1].losses, lib.curves[1].losses)


def test_packaged_library_is_small_and_sane() -> None:
    from slaq_mpi.sim.curves import DEFAULT_LIBRARY

    assert DEFAULT_LIBRARY.stat().st_size < 2 * 1024 * 1024
    lib = CurveLibrary.load()
    assert {"logreg", "kmeans"} <= set(lib.algorithms())
    for c in lib.curves:
        assert c.l_star <= c.losses.min() + 1e-12
        assert math.isfinite(c.cost_per_cell) and c.cost_per_cell > 0


def test_shipped_configs_describe_the_paper_and_scale_setups() -> None:
    from pathlib import Path

    from slaq_mpi.sim import prepare

    root = Path(__file__).resolve().parent.parent / "configs"
    settings, jobs = prepare(config.load(root / "paper.yaml", check_files=False))
    assert settings.capacity == 640 and len(jobs) == 160
    gaps = np.diff([j.arrival for j in jobs])
    assert 10.0 < gaps.mean() < 20.0  # Poisson, 15 s mean gap
    assert {"fair", "slaq", "oracle"} <= set(settings.policies)
    settings, jobs = prepare(config.load(root / "scale.yaml", check_files=False))
    assert settings.capacity == 16384 and len(jobs) == 4000
    assert max(j.arrival for j in jobs) < 40.0  # all arrive early: thousands active at once


class Fixed:
    """The same cores to each job at every decision (0 to the jobs not named)."""
    name = "fixed"

    def __init__(self, cores: dict[str, int], after: float = math.inf,
                 then: dict[str, int] | None = None) -> None:
        self.cores, self.after, self.then = cores, after, cores if then is None else then

    def allocate(self, snap: ClusterSnapshot) -> dict[str, int]:
        use = self.then if snap.now >= self.after else self.cores
        return {j.job_id: use.get(j.job_id, 0) for j in snap.jobs}


@pytest.mark.parametrize("epoch_model", ["fluid", "live"])
def test_jobs_not_moved_iterate_across_decisions(epoch_model: str) -> None:
    slow = linear_job("slow", n=3, work=1.5)  # 1.5 s per iteration on 1 core
    fast = linear_job("fast", n=8, work=0.25)
    run = simulate([slow, fast], Fixed({"slow": 1, "fast": 1}), capacity=2, epoch_seconds=1.0,
                   epoch_model=epoch_model, reconfigure_seconds=0.3)
    assert run.jobs["slow"].time == pytest.approx([1.5, 3.0, 4.5])  # no pause at any decision
    assert run.jobs["fast"].time == pytest.approx(0.25 * np.arange(1, 9))
    assert run.epoch_time.tolist() == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0])
    assert np.isnan(run.pause_ms).all()  # nobody moved
    with pytest.raises(ValueError, match="epoch_model"):
        simulate([slow], Fixed({}), capacity=1, epoch_seconds=1.0, epoch_model="bogus")


def test_a_moved_job_finishes_its_iteration_on_its_old_cores_then_pauses() -> None:
    job = linear_job("a", n=6, work=1.0)  # 1 s per iteration on 1 core, 0.5 s on 2
    policy = Fixed({"a": 1}, after=0.7, then={"a": 2})
    live = simulate([job], policy, capacity=2, epoch_seconds=0.75, epoch_model="live",
                    reconfigure_seconds=0.25)
    # decided at 0.75 s, mid-iteration: it ends at 1.0 on 1 core, pauses to 1.25, then 2 cores
    assert live.jobs["a"].time == pytest.approx([1.0, 1.75, 2.25, 2.75, 3.25, 3.75])
    assert live.jobs["a"].cores.tolist() == [1, 2, 2, 2, 2, 2]
    assert live.pause_ms.tolist()[:2] == [pytest.approx(np.nan, nan_ok=True), 250.0]
    assert live.jobs["a"].attained_core_seconds == pytest.approx(1.0 + 2 * 2.75)
    fluid = simulate([job], policy, capacity=2, epoch_seconds=0.75, epoch_model="fluid",
                     reconfigure_seconds=0.25)
    # fluid: the move is at the decision; the quarter iteration left runs on 2 cores
    assert fluid.jobs["a"].time == pytest.approx([1.125, 1.625, 2.125, 2.625, 3.125, 3.625])


def test_a_growing_job_waits_for_the_cores_it_gains() -> None:
    big = linear_job("big", n=8, work=1.0)  # 1 s per iteration on 1 core
    slow = linear_job("slow", n=5, work=3.0)  # 3 s per iteration on 1 core
    policy = Fixed({"big": 1, "slow": 1}, after=1.4, then={"big": 2})
    run = simulate([big, slow], policy, capacity=2, epoch_seconds=1.5, epoch_model="live",
                   max_epochs=3)
    # told at 1.5 s; slow frees its core at the end of its iteration (3 s), big moves at its
    # first boundary from then (3 s) and runs on 2 cores (0.5 s per iteration)
    assert run.jobs["slow"].time == pytest.approx([3.0])
    assert run.jobs["big"].time.tolist()[:5] == pytest.approx([1.0, 2.0, 3.0, 3.5, 4.0])
    assert run.jobs["slow"].attained_core_seconds == pytest.approx(3.0)
    fluid = simulate([big, slow], policy, capacity=2, epoch_seconds=1.5, epoch_model="fluid",
                     max_epochs=3)
    assert fluid.jobs["slow"].time.size == 0  # stopped at 1.5 s, half an iteration done
    assert fluid.jobs["big"].time.tolist()[:3] == pytest.approx([1.0, 1.75, 2.25])


def test_a_stopped_job_keeps_its_progress_and_resumes_after_a_pause() -> None:
    job = linear_job("a", n=4, work=1.0)
    policy = Fixed({"a": 1}, after=1.4, then={})
    run = simulate([job], policy, capacity=1, epoch_seconds=1.5, max_epochs=2,
                   reconfigure_seconds=0.5, epoch_model="live")
    assert run.jobs["a"].time == pytest.approx([1.0, 2.0])  # stops at its boundary after 1.5 s
    assert run.jobs["a"].attained_core_seconds == pytest.approx(2.0)
    back = Fixed({"a": 1}, after=1.4, then={})
    back.allocate = lambda snap: {"a": 0 if 1.4 <= snap.now < 2.9 else 1}  # type: ignore[method-assign]
    run = simulate([job], back, capacity=1, epoch_seconds=1.5, reconfigure_seconds=0.5,
                   epoch_model="live")
    assert run.jobs["a"].time == pytest.approx([1.0, 2.0, 4.5, 5.5])  # back at 3.0, 0.5 s restore


def test_a_data_file_unread_here_is_simulated_at_a_stand_in_size_with_a_note(tmp_path: Path) -> None:
    from slaq_mpi.sim import prepare
    from slaq_mpi.sim.workload import UNREAD_CELLS

    raw = {"name": "m", "ranks": 3, "epoch_seconds": 1.0, "jobs": [
        {"name": "far", "algorithm": "logreg", "dataset": {"path": str(tmp_path / "on-the-cluster.h5")}},
        {"name": "here", "algorithm": "logreg",
         "dataset": {"generator": "classification", "rows": 500, "features": 4}}],
        "simulation": {"curves": "analytic", "scaling": {"default": {"cost": 1e-6}}}}
    notes: list[str] = []
    _, jobs = prepare(config.parse(raw, check_files=False), notes=notes)
    work = {j.name: j.scaling.work for j in jobs}
    assert work["far"] == pytest.approx(1e-6 * UNREAD_CELLS)
    assert work["here"] == pytest.approx(1e-6 * 500 * 4)
    assert notes == [f"job far: its data file {tmp_path / 'on-the-cluster.h5'} cannot be read here "
                     "(no such file); its size is taken as 1e+06 rows*features"]


def test_a_budget_above_the_simulation_cap_is_noted_and_capped() -> None:
    from slaq_mpi.sim import prepare

    raw = {"name": "m", "ranks": 3, "epoch_seconds": 1.0, "jobs": [
        {"name": "long", "algorithm": "logreg", "stop": {"max_iterations": 300},
         "dataset": {"generator": "classification", "rows": 50, "features": 4}},
        {"name": "short", "algorithm": "logreg", "stop": {"max_iterations": 100},
         "dataset": {"generator": "classification", "rows": 50, "features": 4}}],
        "simulation": {"curves": "analytic", "max_iterations": 200}}
    notes: list[str] = []
    _, jobs = prepare(config.parse(raw, check_files=False), notes=notes)
    assert notes == ["job long: stop.max_iterations 300 is above simulation.max_iterations 200; "
                     "its simulated copies stop at 200 iterations"]
    assert {j.name: j.stop_iter for j in jobs} == {"long": 200, "short": 100}
    raw["simulation"]["workload"] = {"jobs": 3, "mean_gap": 1.0, "mix": {"short": 1}}
    notes = []
    _, jobs = prepare(config.parse(raw, check_files=False), notes=notes)
    assert notes == [] and {j.template for j in jobs} == {"short"}  # no copy of long: no note


def test_a_failed_metrics_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    from dataclasses import replace

    from slaq_mpi.policies import get_policy
    from slaq_mpi.storage.metrics import read_metrics, write_metrics

    run = simulate([linear_job()], get_policy("fair"), capacity=2, epoch_seconds=1.0)
    path = tmp_path / "metrics.h5"
    write_metrics(path, run)
    bad = replace(run, alloc=np.zeros((len(run.epoch_time) + 1, 3)))  # cannot be reshaped
    with pytest.raises(ValueError):
        write_metrics(path, bad)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.h5"]
    assert np.array_equal(read_metrics(path).alloc, run.alloc)


def test_time_noise_spreads_speeds_without_changing_their_mean() -> None:
    from slaq_mpi.policies import get_policy

    jobs = [linear_job(f"j{i}", n=100000, work=0.01) for i in range(20)]  # 0.01 s/iter on 1 core
    done = {}
    for noise in (0.0, 0.5):
        run = simulate(jobs, get_policy("fair"), capacity=20, epoch_seconds=1.0, max_epochs=200,
                       time_noise=noise, seed=7)
        done[noise] = np.array([len(t.loss) for t in run.jobs.values()], dtype=float)
    assert done[0.0].std() == 0 and done[0.5].std() > 0  # the noise spreads the jobs' progress
    assert abs(done[0.5].mean() / done[0.0].mean() - 1) < 0.03  # ... not its mean


def test_curves_of_a_solver_file_are_found_however_its_path_is_spelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    (tmp_path / "solvers").mkdir()
    curve = replace(analytic_curve("linear", np.random.default_rng(0)),
                    algorithm=f"{tmp_path / 'solvers' / 'lsq.py'}:LeastSquares")  # recorded by absolute path
    lib = CurveLibrary([curve])
    monkeypatch.chdir(tmp_path)
    for spelling in ("solvers/lsq.py:LeastSquares", "./solvers/../solvers/lsq.py:LeastSquares"):
        assert lib.for_algorithm(spelling) == [curve], spelling
    assert lib.for_algorithm("solvers/lsq.py:Other") == []
    assert len(lib.merged([replace(curve, algorithm="solvers/lsq.py:LeastSquares")])) == 1  # replaced
