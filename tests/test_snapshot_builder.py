"""The live coordinator and the simulator show a policy the same snapshot of the same jobs:
both build it with :func:`slaq_mpi.policies.snapshot.job_snapshot`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slaq_mpi.config import experiment as config
from slaq_mpi.policies.snapshot import (
    DEFAULT_MOVE_SECONDS,
    ClusterSnapshot,
    JobSnapshot,
    cluster_snapshot,
    job_snapshot,
)
from slaq_mpi.runtime import history
from slaq_mpi.sim import engine
from slaq_mpi.sim.scaling import ScalingModel
from slaq_mpi.sim.timeline import JobRun
from slaq_mpi.sim.workload import SimJob
from slaq_mpi.storage.metrics import RunRecord

CONFIG = """\
name: snapshots
output_dir: runs/snapshots
epoch_seconds: 1.0
policy: utility
ranks: 17
seed: 3
jobs:
  - {name: b, algorithm: logreg, arrival: 0, max_cores: 12, stop: {max_iterations: 50},
     utility: {value: 10, deadline: 60, decay: 30},
     dataset: {generator: classification, rows: 200, features: 4, seed: 1}}
  - {name: a, algorithm: kmeans, arrival: 0, hyperparameters: {k: 3}, stop: {tolerance: 0.0001},
     dataset: {generator: blobs, rows: 200, features: 4, centers: 3, seed: 2}}
  - {name: c, algorithm: logreg, arrival: 2.5, max_cores: 2,
     dataset: {generator: classification, rows: 200, features: 4, seed: 3}}
"""

# What each job ran, epoch by epoch: (cores, seconds per iteration, losses); c has not run yet.
HISTORY: dict[str, list[tuple[int, float, list[float]]]] = {
    "b": [(1, 0.5, [2.0, 1.5]), (4, 0.125, [1.2, 1.0, 0.9, 0.85, 0.8])],
    "a": [(3, 0.25, [9.0, 6.0, 5.0, 4.5])],
    "c": [],
}
HOLDS = {"b": 4, "a": 0, "c": 0}  # cores each job holds at the decision
CAPACITY = 7  # a run started on 16 workers, resumed on 7: b may use 12 of the 16, 7 of these


def _live(spec: config.ExperimentSpec) -> ClusterSnapshot:
    """The coordinator's path: the run's record, filled as rank 0 fills it from reports."""
    record: RunRecord = history.new_record(spec, capacity=16)
    for name, epochs in HISTORY.items():
        job = record.jobs[name]
        for cores, secs, losses in epochs:
            job.loss.extend(losses)
            job.iter_seconds.extend([secs] * len(losses))
            job.cores.extend([cores] * len(losses))
            job.throughput.append((cores, secs))
            job.attained_core_seconds += cores * secs * len(losses)
    ranks = {name: tuple(range(1, 1 + n)) for name, n in HOLDS.items() if n}
    jobs = {j.name: j for j in spec.jobs}
    return history.snapshot(record.jobs.values(), jobs, ranks, CAPACITY, 3.0, 0.75)


def _simulated(spec: config.ExperimentSpec) -> ClusterSnapshot:
    """The simulator's path: its per-job state, filled as the simulator fills it."""
    states = []
    for col, tpl in enumerate(spec.jobs):
        job = SimJob(name=tpl.name, algorithm=tpl.algorithm,
                     convergence="linear" if tpl.algorithm == "kmeans" else "sublinear",
                     arrival=tpl.arrival, curve=np.linspace(2.0, 0.5, 60), l_star=0.5,
                     scaling=ScalingModel(work=1.0), max_cores=min(tpl.max_cores or 16, 16),
                     stop_iter=50, max_iterations=tpl.stop.max_iterations, utility=tpl.utility)
        state = JobRun(job, col, seed=0)
        for cores, secs, losses in HISTORY[tpl.name]:
            state.losses.extend(losses)
            state.throughput.append((cores, secs))
            state.attained += cores * secs * len(losses)
            state.n += len(losses)
        state.shown = state.n  # every iteration reported
        state.cores = HOLDS[tpl.name]
        states.append(state)
    return engine._snapshot(states, CAPACITY, 3.0, 0.75, DEFAULT_MOVE_SECONDS)


def test_the_coordinator_and_the_simulator_build_the_same_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "snapshots.yaml"
    path.write_text(CONFIG)
    spec = config.load(path, check_files=False)
    live, sim = _live(spec), _simulated(spec)
    for field in dataclasses.fields(ClusterSnapshot):
        if field.name != "jobs":
            assert getattr(live, field.name) == getattr(sim, field.name), field.name
    assert [j.job_id for j in live.jobs] == [j.job_id for j in sim.jobs] == ["a", "b", "c"]
    for ours, theirs in zip(live.jobs, sim.jobs, strict=True):
        for field in dataclasses.fields(ours):
            mine, other = getattr(ours, field.name), getattr(theirs, field.name)
            assert mine == other and type(mine) is type(other), (ours.job_id, field.name, mine, other)
    b = next(j for j in live.jobs if j.job_id == "b")
    assert b.max_cores == CAPACITY  # its 12, capped by the 7 cores there are
    assert b.utility == (("deadline", 60.0), ("decay", 30.0), ("value", 10.0))
    assert b.max_iterations == 50 and b.cores == 4 and len(b.losses) == 7
    assert b.attained_core_seconds == pytest.approx(1.0 + 2.5)


def test_a_snapshot_holds_plain_tuples_and_floats() -> None:
    snap = job_snapshot("j", losses=[1.0, 0.5], throughput=[(2, 0.25)], cores=2, max_cores=3,
                        capacity=8, convergence="sublinear", arrival=1.5,
                        attained_core_seconds=0.5, utility={"value": 4, "decay": 0})
    assert snap.losses == (1.0, 0.5) and snap.throughput == ((2, 0.25),)
    assert snap.max_cores == 3 and snap.utility == (("decay", 0.0), ("value", 4.0))
    assert all(type(v) is float for _, v in snap.utility)
    assert job_snapshot("j", losses=(), throughput=(), cores=0, max_cores=3, capacity=8,
                        convergence="unknown", arrival=0.0, attained_core_seconds=0.0).utility == ()


def test_a_built_snapshot_sets_every_field_and_equals_the_constructed_one() -> None:
    snap = job_snapshot("j", losses=[1.0], throughput=[(2, 0.25)], cores=2, max_cores=30,
                        capacity=8, convergence="linear", arrival=1.5, attained_core_seconds=0.5,
                        utility={"value": 4}, max_iterations=9, weight=2)
    assert set(vars(snap)) == {f.name for f in dataclasses.fields(JobSnapshot)}
    assert snap == JobSnapshot("j", (1.0,), ((2, 0.25),), 2, 8, "linear", 1.5, 0.5,
                               (("value", 4.0),), 9, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.cores = 3  # type: ignore[misc]


def test_a_snapshot_carries_the_move_cost_and_a_default_when_none_is_measured() -> None:
    assert cluster_snapshot(4, 0.0, 1.0, ()).move_seconds == DEFAULT_MOVE_SECONDS
    assert cluster_snapshot(4, 0.0, 1.0, (), move_seconds=0.02).move_seconds == 0.02
    assert cluster_snapshot(4, 0.0, 1.0, (), move_seconds=0.0).move_seconds == 0.0
    for unmeasured in (float("nan"), -1.0, float("inf")):  # the median of no pause, or nonsense
        assert cluster_snapshot(4, 0.0, 1.0, (), move_seconds=unmeasured).move_seconds == DEFAULT_MOVE_SECONDS
