"""The SLAQ greedy (slaq_mpi.brain.allocate), forecast (slaq_mpi.brain.forecast) and policy
(slaq_mpi.policies.slaq); no MPI."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slaq_mpi.brain.allocate import allocate_by_gain, greedy_allocate, water_fill
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.slaq import SlaqPolicy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def concave_table(rng: np.random.Generator, jobs: int, width: int) -> np.ndarray:
    """Gains with non-increasing non-negative marginals (some exactly tied)."""
    marg = np.sort(rng.choice([0.0, 0.5, 1.0, 1.5, 2.0, 3.0], size=(jobs, width)), axis=1)[:, ::-1]
    return np.cumsum(marg, axis=1)


def brute_force(table: np.ndarray, caps: np.ndarray, capacity: int) -> float:
    best = -np.inf
    for alloc in itertools.product(*[range(1, c + 1) for c in caps]):
        if sum(alloc) <= capacity:
            best = max(best, sum(table[j, a - 1] for j, a in enumerate(alloc)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_greedy_is_optimal_on_concave_gains(seed: int) -> None:
    rng = np.random.default_rng(seed)
    jobs, width = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    table = concave_table(rng, jobs, width)
    caps = rng.integers(1, width + 1, size=jobs)
    capacity = int(rng.integers(jobs, jobs * width + 2))
    alloc = greedy_allocate(table, caps, capacity)
    assert alloc.sum() <= capacity and (alloc >= 1).all() and (alloc <= caps).all()
    value = sum(table[j, a - 1] for j, a in enumerate(alloc))
    assert value == pytest.approx(brute_force(table, caps, capacity))


def heap_greedy(table: np.ndarray, caps: np.ndarray, capacity: int) -> np.ndarray:
    """The textbook greedy: a heap of next marginal gains, ties to the lower job index."""
    alloc = np.ones(len(caps), dtype=int)
    heap = [(-(table[j, 1] - table[j, 0]), j) for j in range(len(caps)) if caps[j] > 1]
    heapq.heapify(heap)
    left = capacity - len(caps)
    while left > 0 and heap:
        neg, j = heapq.heappop(heap)
        if -neg <= 1e-12:
            break
        alloc[j] += 1
        left -= 1
        if alloc[j] < caps[j]:
            heapq.heappush(heap, (-(table[j, alloc[j]] - table[j, alloc[j] - 1]), j))
    return alloc


@pytest.mark.parametrize("seed", range(10))
def test_lazy_selection_matches_heap_greedy_with_large_caps(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    jobs, width = 30, 400
    marg = np.sort(rng.exponential(1.0, size=(jobs, width)) * rng.exponential(1.0, size=(jobs, 1)), axis=1)
    table = np.cumsum(marg[:, ::-1], axis=1)
    caps = rng.integers(1, width + 1, size=jobs)
    capacity = int(rng.integers(jobs, 3000))
    np.testing.assert_array_equal(greedy_allocate(table, caps, capacity), heap_greedy(table, caps, capacity))


def test_fewer_cores_than_jobs_admits_largest_one_core_gains() -> None:
    table = np.array([[1.0, 2.0], [3.0, 3.5], [3.0, 4.0], [0.5, 0.6]])
    np.testing.assert_array_equal(greedy_allocate(table, None, 2), [0, 1, 1, 0])


def test_zero_gains_are_spread_not_idled() -> None:
    alloc = greedy_allocate(np.zeros((3, 10)), np.array([10, 2, 10]), 12)
    np.testing.assert_array_equal(alloc, [5, 2, 5])


def test_water_fill() -> None:
    np.testing.assert_array_equal(water_fill(np.array([1, 5, 1]), np.array([9, 9, 2]), 5), [5, 5, 2])
    np.testing.assert_array_equal(water_fill(np.array([1, 1]), np.array([3, 3]), 3), [3, 2])
    np.testing.assert_array_equal(water_fill(np.array([1, 1]), np.array([2, 2]), 10), [2, 2])


def test_allocate_by_gain_needs_room_for_everyone() -> None:
    with pytest.raises(ValueError):
        allocate_by_gain(lambda r, a: a, np.array([2, 2, 2]), 2)


# --- the policy ------------------------------------------------------------------------------


def sublinear(n: int, speed: float = 0.3) -> tuple[float, ...]:
    k = np.arange(n, dtype=float)
    return tuple((1.0 / (0.002 * k**2 + speed * k + 1.0) + 0.2).tolist())


def job(i: int, n: int, max_cores: int = 64, **kw: object) -> JobSnapshot:
    return JobSnapshot(job_id=f"j{i:03d}", losses=sublinear(n), throughput=((2, 0.05),) if n else (),
                       cores=2 if n else 0, max_cores=max_cores, convergence="sublinear", **kw)


def test_registered_and_named() -> None:
    pol = get_policy("slaq")
    assert isinstance(pol, SlaqPolicy) and pol.name == "slaq"


def test_new_and_young_jobs_get_more_cores_than_converged_ones() -> None:
    snap = ClusterSnapshot(64, 0.0, 10.0, (job(0, 400), job(1, 0), job(2, 8), job(3, 300)))
    alloc = SlaqPolicy().allocate(snap)
    assert sum(alloc.values()) <= 64
    assert alloc["j001"] > alloc["j000"] and alloc["j002"] > alloc["j003"]


def test_iteration_budget_limits_useful_cores() -> None:
    done_soon = job(0, 10, max_iterations=12)
    snap = ClusterSnapshot(32, 0.0, 10.0, (done_soon, job(1, 10)))
    alloc = SlaqPolicy().allocate(snap)
    assert alloc["j001"] > alloc["j000"]


def test_empty_and_no_capacity() -> None:
    assert SlaqPolicy().allocate(ClusterSnapshot(8, 0.0, 10.0, ())) == {}
    assert SlaqPolicy().allocate(ClusterSnapshot(0, 0.0, 10.0, (job(0, 5),))) == {"j000": 0}


def test_no_job_waits_forever_when_jobs_outnumber_cores() -> None:
    pol = SlaqPolicy()
    attained = {f"j{i:03d}": 0.0 for i in range(10)}
    ran = dict.fromkeys(attained, 0)
    for epoch in range(20):
        jobs = tuple(job(i, 200 - 10 * i, attained_core_seconds=attained[f"j{i:03d}"]) for i in range(10))
        alloc = pol.allocate(ClusterSnapshot(3, 10.0 * epoch, 10.0, jobs))
        assert sum(alloc.values()) <= 3 and all(v <= 1 for v in alloc.values())
        for jid, cores in alloc.items():
            attained[jid] += 10.0 * cores
            ran[jid] += cores > 0
    assert min(ran.values()) >= 1


losses_st = st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=30)
job_st = st.tuples(losses_st, st.integers(1, 40), st.sampled_from(["sublinear", "linear", "unknown"]),
                   st.lists(st.tuples(st.integers(1, 16), st.floats(1e-4, 10.0)), max_size=3),
                   st.floats(0.0, 1e4), st.none() | st.integers(0, 60))


def make_snapshot(specs: list, capacity: int) -> ClusterSnapshot:
    jobs = tuple(
        JobSnapshot(job_id=f"job-{i}", losses=tuple(ls), throughput=tuple(tp), cores=0, max_cores=mc,
                    convergence=conv, attained_core_seconds=att, max_iterations=budget)
        for i, (ls, mc, conv, tp, att, budget) in enumerate(specs)
    )
    return ClusterSnapshot(capacity, 0.0, 5.0, jobs)


@settings(max_examples=150, deadline=None)
@given(st.lists(job_st, min_size=1, max_size=8), st.integers(1, 120))
def test_policy_properties(specs: list, capacity: int) -> None:
    snap = make_snapshot(specs, capacity)
    alloc = SlaqPolicy().allocate(snap)
    assert set(alloc) == {j.job_id for j in snap.jobs}
    assert sum(alloc.values()) <= capacity
    for j in snap.jobs:
        assert 0 <= alloc[j.job_id] <= max(1, j.max_cores)
        if capacity >= len(snap.jobs):
            assert alloc[j.job_id] >= 1
    # deterministic: the same snapshot again, on this object and on a fresh one
    assert SlaqPolicy().allocate(snap) == alloc
    pol = SlaqPolicy()
    pol.allocate(make_snapshot(specs[::-1], capacity))
    assert pol.allocate(snap) == alloc


def test_same_snapshot_sequence_same_allocations() -> None:
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 60, size=12)
    seq = [ClusterSnapshot(40, 10.0 * e, 10.0, tuple(job(i, int(n) + 5 * e) for i, n in enumerate(lengths)))
           for e in range(4)]
    a, b = SlaqPolicy(), SlaqPolicy()
    assert [a.allocate(s) for s in seq] == [b.allocate(s) for s in seq]


def _slaq_imports(path: Path) -> tuple[set[str], set[str]]:
    """The slaq_mpi modules and the outside top-level packages a file imports (anywhere in it)."""
    import ast

    ours, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        for name in names:
            (ours if name.split(".")[0] == "slaq_mpi" else outside).add(
                name if name.startswith("slaq_mpi") else name.split(".")[0])
        if isinstance(node, ast.ImportFrom) and node.module == "slaq_mpi":
            ours.update(f"slaq_mpi.{a.name}" for a in node.names)
    return ours, outside


def test_the_brain_imports_no_mpi_and_no_config_loader() -> None:
    """DESIGN.md: the scheduling brain imports no MPI, so the simulator and tests reuse it;
    it depends on neither the run's MPI layer nor the YAML/HDF5 config loader (transitively)."""
    root = Path(__file__).resolve().parents[1]
    todo = ["slaq_mpi.brain", "slaq_mpi.policies"]
    todo += [f"slaq_mpi.brain.{p.stem}" for p in (root / "slaq_mpi/brain").glob("*.py")]
    todo += [f"slaq_mpi.policies.{p.stem}" for p in (root / "slaq_mpi/policies").glob("*.py")]
    seen: set[str] = set()
    outside: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        base = root / Path(*mod.split("."))
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not path.is_file():  # a name imported from a module, not a module
            continue
        ours, other = _slaq_imports(path)
        outside |= other
        todo += sorted(ours - seen)
    runtime_or_loader = {"slaq_mpi.runtime.comm", "slaq_mpi.config.experiment", "slaq_mpi.runtime.launch"}
    assert runtime_or_loader.isdisjoint(seen), sorted(seen)
    assert {"mpi4py", "yaml", "h5py"}.isdisjoint(outside), sorted(outside)


def test_the_brain_is_a_library_and_no_policy_imports_another() -> None:
    """The brain imports nothing of slaq_mpi outside itself; a policy module imports the brain,
    the snapshot contract and the policies' shared helpers (``_share``, ``_params``), never
    another policy."""
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "slaq_mpi/brain").glob("*.py")):
        ours, _ = _slaq_imports(path)
        assert all(m.startswith("slaq_mpi.brain.") for m in ours), (path.name, sorted(ours))
    shared = {"slaq_mpi.policies._share", "slaq_mpi.policies._params", "slaq_mpi.policies.snapshot"}
    for path in sorted((root / "slaq_mpi/policies").glob("*.py")):
        ours, _ = _slaq_imports(path)
        others = {m for m in ours if m.startswith("slaq_mpi.policies.")} - shared
        assert not others, (path.name, sorted(others))


def _history_snapshot(hist: list[tuple[float, ...]]) -> ClusterSnapshot:
    jobs = tuple(JobSnapshot(job_id=f"j{i:02d}", losses=h, throughput=((1, 1.0),), cores=1, max_cores=8,
                             convergence="unknown") for i, h in enumerate(hist))
    return ClusterSnapshot(capacity=4 * len(hist), now=0.0, epoch_seconds=1.0, jobs=jobs)


def test_a_decision_depends_on_its_snapshot_only_not_on_earlier_decisions() -> None:
    """A resumed run builds a fresh policy: it must decide as the uninterrupted run would."""
    from slaq_mpi.brain.predict import max_drops

    k = np.arange(200, dtype=np.float64)
    rng = np.random.default_rng(3)
    curves = [3.0 / (1.0 + 0.02 * k + 1e-4 * k * k) + 0.5 + 1e-3 * rng.standard_normal(200)
              for _ in range(6)]
    curves += [2.0 * 0.97**k + 1.0 + 1e-3 * rng.standard_normal(200) for _ in range(6)]
    running = SlaqPolicy()
    for e in range(12):
        # most epochs most jobs finish no iteration: the running policy reuses their fits
        hist = [tuple(c[: 20 + 7 * ((e + i) // 3) + i].tolist()) for i, c in enumerate(curves)]
        if e == 6:
            hist[0] = tuple((np.asarray(hist[0]) * 2.0).tolist())  # a different job under the same id
        if e == 8:
            hist[1] = hist[1][:-1]  # shorter than before under the same id
        snap = replace(_history_snapshot(hist), capacity=30)
        if e == 9:  # a job leaves for one decision: its fit is not kept
            snap = replace(snap, jobs=snap.jobs[1:])
        fc, fresh = running.forecast(snap), SlaqPolicy().forecast(snap)
        for name in ("family", "amp", "p1", "p2", "floor", "rms", "max_drop"):
            np.testing.assert_array_equal(getattr(fc.curves, name), getattr(fresh.curves, name))
        np.testing.assert_array_equal(fc.curves.max_drop, max_drops([j.losses for j in snap.jobs]))
        assert running.allocate(snap) == SlaqPolicy().allocate(snap)


def test_a_window_or_decay_changed_after_a_decision_is_used_by_the_next() -> None:
    k = np.arange(80, dtype=np.float64)
    snap = _history_snapshot([tuple((1.0 / (1.0 + 0.05 * k) + 0.2 + 0.01 * np.sin(k)).tolist())])
    pol = SlaqPolicy()
    pol.forecast(snap)
    pol.window, pol.decay = 40, 20.0
    np.testing.assert_array_equal(pol.forecast(snap).curves.amp,
                                  SlaqPolicy(window=40, decay=20.0).forecast(snap).curves.amp)
    assert pol.forecast(snap).curves.amp[0] != SlaqPolicy().forecast(snap).curves.amp[0]


def test_forecasting_the_same_snapshot_twice_gives_the_same_fit() -> None:
    k = np.arange(80, dtype=np.float64)
    hist = [tuple((1.0 / (1.0 + 0.05 * k) + 0.2).tolist()), tuple((0.9**k + 1.0).tolist())]
    pol = SlaqPolicy()
    first = pol.forecast(_history_snapshot(hist)).curves
    again = pol.forecast(_history_snapshot(hist)).curves
    for name in ("family", "amp", "p1", "p2", "floor", "rms"):
        np.testing.assert_array_equal(getattr(again, name), getattr(first, name))


def test_span_normalization_measures_reductions_in_units_of_the_first_loss_above_the_floor() -> None:
    k = np.arange(60, dtype=np.float64)
    losses = 4.0 * 0.9**k + 1.0  # L0 - L* = 4; the largest one-iteration drop is 0.4
    snap = _history_snapshot([tuple(losses.tolist())])
    span = SlaqPolicy(normalize="span").forecast(snap).curves
    drop = SlaqPolicy(normalize="max_drop").forecast(snap).curves
    assert span.span is not None and span.span[0] == pytest.approx(4.0, rel=1e-3)
    true = (losses[-1] - (4.0 * 0.9 ** (k[-1] + 10) + 1.0)) / 4.0
    assert span.reduction(np.array([10.0]))[0] == pytest.approx(true, rel=0.05)
    assert drop.reduction(np.array([10.0]))[0] == pytest.approx(true * 4.0 / 0.4, rel=0.05)


def test_throughput_prior_learned_from_other_jobs_scaling() -> None:
    """A job seen on one core count is forecast to scale like the jobs whose data show it
    (here near-perfectly), not with the fixed 5% serial share; ``learn_scaling=False`` keeps it."""
    losses = tuple(float(1.0 / (1 + k)) for k in range(12))
    scalers = [JobSnapshot(f"s{i}", losses, tuple((a, 8.0 / a + 1e-4) for a in (1, 4, 16)), 16, 640)
               for i in range(4)]
    lone = JobSnapshot("z", losses, ((1, 8.0),), 1, 640)
    snap = ClusterSnapshot(640, 0.0, 2.0, (*scalers, lone))
    learned = SlaqPolicy().forecast(snap)
    fixed = SlaqPolicy(learn_scaling=False).forecast(snap)
    row = learned.job_ids.index("z")
    t_learned = learned.speed.seconds(np.full(5, 256.0))[row]
    t_fixed = fixed.speed.seconds(np.full(5, 256.0))[row]
    assert t_learned < 0.2 * t_fixed
    assert t_learned == pytest.approx(8.0 / 256, rel=0.1)


def test_span_of_boosted_trees_stays_near_the_true_first_loss_above_the_final_loss() -> None:
    """Recorded gradient-boosting curves (noisy 1/k-like tails): a window fit's asymptote can
    sit far below the final loss (it gave 9-17x the true ``L_0 - L*`` at some lengths); the loss
    left is capped by what a 1/k tail leaves, so the span stays within 30% of the truth."""
    from slaq_mpi.sim.curves import CurveLibrary

    lib = CurveLibrary.load()
    ratios = []
    for algorithm in ("gbt", "gbt_classifier"):
        for curve in lib.for_algorithm(algorithm):
            losses = np.asarray(curve.losses, dtype=np.float64)
            true = losses[0] - min(curve.l_star, float(losses.min()))
            for n in (50, 80, 120, 160, 200):
                snap = ClusterSnapshot(8, 0.0, 2.0, (JobSnapshot(
                    "a", tuple(losses[:n].tolist()), ((1, 1.0),), 1, 8, convergence="sublinear"),))
                ratios.append(float(SlaqPolicy().forecast(snap).curves.span[0]) / true)
    assert len(ratios) >= 20
    assert 0.7 <= min(ratios) and max(ratios) <= 1.3, sorted(ratios)


def test_cached_fit_is_not_reused_for_another_class() -> None:
    losses = tuple(1.0 / (1.0 + 0.3 * k) for k in range(30))

    def snap(conv: str) -> ClusterSnapshot:
        job = JobSnapshot(job_id="a", losses=losses, throughput=((1, 0.5),), cores=1, max_cores=8,
                          convergence=conv, attained_core_seconds=0.0, max_iterations=None)
        return ClusterSnapshot(8, 0.0, 5.0, (job,))

    pol = SlaqPolicy()
    pol.forecast(snap("linear"))
    again, fresh = pol.forecast(snap("sublinear")).curves, SlaqPolicy().forecast(snap("sublinear")).curves
    assert again.family[0] == fresh.family[0] == 1  # FAMILY_SUBLINEAR
    assert again.p1[0] == fresh.p1[0] and again.amp[0] == fresh.amp[0]


def test_forecast_mixes_new_jobs_budgets_and_long_throughput_records() -> None:
    """A job without losses, a budgeted job, one without a budget and one with more throughput
    observations than are fitted: one forecast row each, with the right budgets and spans."""
    curve = tuple(float(1.0 / (1.0 + 0.3 * k) + 0.1) for k in range(40))
    many = tuple((1 + k % 4, 0.2 / (1 + k % 4) + 0.01) for k in range(100))
    jobs = (
        JobSnapshot(job_id="a-new", losses=(), throughput=(), cores=0, max_cores=8),
        JobSnapshot(job_id="b-budget", losses=curve, throughput=((2, 0.1),), cores=2, max_cores=8,
                    max_iterations=50),
        JobSnapshot(job_id="c-open", losses=curve[:10], throughput=((1, 0.2),), cores=1, max_cores=3,
                    max_iterations=None),
        JobSnapshot(job_id="d-many", losses=curve, throughput=many, cores=4, max_cores=64),
    )
    fc = SlaqPolicy().forecast(ClusterSnapshot(now=0.0, jobs=jobs, capacity=16, epoch_seconds=1.0))
    assert fc.job_ids == ("a-new", "b-budget", "c-open", "d-many")
    assert fc.remaining[1] == 10 and np.isinf(fc.remaining[2]) and np.isinf(fc.remaining[0])
    assert list(fc.caps) == [8, 8, 3, 16]
    assert fc.curves.span[0] == 1.0 and 0 < fc.curves.span[1] <= curve[0] - curve[-1] + 1.0
    assert fc.speed.observed[3] == 64  # only the most recent observations are fitted
    assert fc.speed.observed[0] == 0 and fc.speed.observed[1] == 1
