"""The simulator with the goodput, finish-time-fair and utility policies and their metrics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from slaq_mpi.config import experiment as config
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies.snapshot import ClusterSnapshot
from slaq_mpi.report.evaluation import common_l_star
from slaq_mpi.report.summary import summarize
from slaq_mpi.sim import run_policies
from slaq_mpi.storage.metrics import read_metrics, write_metrics

URGENT = {"value": 10, "deadline": 30, "decay": 10}


def spec(utility: Any = URGENT, seed: int = 3) -> Any:
    raw = {
        "name": "u", "epoch_seconds": 1.0, "policy": "fair", "ranks": 9, "seed": seed,
        "jobs": [
            {"name": "lr", "algorithm": "logreg", "stop": {"max_iterations": 60}, "utility": utility,
             "dataset": {"generator": "classification", "rows": 100000, "features": 50}},
            {"name": "km", "algorithm": "kmeans", "stop": {"max_iterations": 60},
             "utility": {"value": 1},
             "dataset": {"generator": "blobs", "rows": 100000, "features": 50}},
        ],
        "simulation": {"capacity": 8, "curves": "analytic", "workload": {"jobs": 8, "mean_gap": 4.0},
                       "work_scale": 5.0, "scaling": {"default": {"overhead": 0.01, "comm": 0.002}}},
    }
    return config.parse(raw, check_files=False)


class Recorder:
    """Fair shares, remembering the utility every job showed the policy."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: dict[str, tuple[tuple[str, float], ...]] = {}

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        for j in snapshot.jobs:
            self.seen[j.job_id] = j.utility
        share = max(1, snapshot.capacity // max(len(snapshot.jobs), 1))
        out, left = {}, snapshot.capacity
        for j in snapshot.jobs:
            out[j.job_id] = min(share, left)
            left -= out[j.job_id]
        return out


def test_utility_reaches_snapshots_and_traces(tmp_path: Path) -> None:
    from slaq_mpi.sim import prepare, simulate

    settings, jobs = prepare(spec())
    rec = Recorder()
    run = simulate(jobs, rec, capacity=settings.capacity, epoch_seconds=1.0)
    urgent = [n for n in rec.seen if n.startswith("lr")]
    assert urgent and all(dict(rec.seen[n]) == {"value": 10.0, "deadline": 30.0, "decay": 10.0}
                          for n in urgent)
    trace = run.jobs[urgent[0]]
    assert trace.utility == {"value": 10.0, "deadline": 30.0, "decay": 10.0}
    assert trace.scaling is not None and trace.scaling[0] > 0
    write_metrics(tmp_path / "m.h5", run)
    back = read_metrics(tmp_path / "m.h5").jobs[urgent[0]]
    assert back.utility == trace.utility and back.scaling == pytest.approx(trace.scaling)


@pytest.mark.parametrize(("bad", "where"), [
    ({"value": -3}, "jobs[0].utility.value"),
    ({"value": 1, "when": 3}, "jobs[0].utility.when"),
    ({"deadline": 3}, "jobs[0].utility.value"),
])
def test_bad_utility_is_rejected_naming_the_key(bad: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as info:
        run_policies(spec(bad), ["fair"])
    assert info.value.where == where


def test_new_policies_run_and_report_every_metric() -> None:
    names = ["fair", "goodput", "finish-time-fair", "utility"]
    runs = run_policies(spec(), names)
    l_star = common_l_star(runs.values())
    for name in names:
        run = runs[name]
        assert all(j.status == "done" for j in run.jobs.values()), name
        row = summarize(run, l_star)
        for key in ("total_utility", "max_rho", "mean_rho", "min_speedup", "mean_speedup", "p_mean_speedup"):
            assert math.isfinite(row[key]), (name, key)
        assert 0 <= row["total_utility"] <= 10 * 8
        assert row["max_rho"] >= row["mean_rho"] > 0
        assert row["min_speedup"] <= row["mean_speedup"]


def test_policies_yaml_runs_all_six_and_each_wins_its_metric() -> None:
    """The acceptance workload: each policy best (or within 5%) on what it optimizes."""
    cfg = config.load(Path(__file__).resolve().parents[1] / "configs" / "policies.yaml", check_files=False)
    runs = run_policies(cfg)
    assert list(runs) == ["slaq", "fair", "fifo", "goodput", "finish-time-fair", "utility"]
    l_star = common_l_star(runs.values())
    rows = {n: summarize(r, l_star) for n, r in runs.items()}

    def col(key: str) -> dict[str, float]:
        return {n: r[key] for n, r in rows.items()}

    loss, speed, rho, util = (col(k) for k in ("avg_normalized_loss", "p_mean_speedup", "max_rho",
                                               "total_utility"))
    assert loss["slaq"] <= 1.05 * min(loss.values())
    assert speed["goodput"] >= 0.95 * max(speed.values())
    assert rho["finish-time-fair"] <= 1.05 * min(rho.values())
    assert util["utility"] >= 0.95 * max(util.values())
