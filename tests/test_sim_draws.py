"""``slaq simulate --seed / --draws / --jobs`` and the workload's bound on job-seconds."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slaq_mpi.cli import build_parser
from slaq_mpi.policies import get_policy
from slaq_mpi.report.evaluation import common_l_star, comparison_window
from slaq_mpi.report.summary import summarize_runs
from slaq_mpi.sim import ScalingModel, SimJob, simulate
from slaq_mpi.sim.bound import _blocks, bound_metrics, capacity_job_seconds
from slaq_mpi.sim.oracle import OraclePolicy

CONFIG = {
    "name": "draws", "epoch_seconds": 5.0, "policy": "fair", "ranks": 9, "seed": 3,
    "jobs": [
        {"name": "lr", "algorithm": "logreg",
         "dataset": {"generator": "classification", "rows": 10000, "features": 10},
         "stop": {"max_iterations": 60, "tolerance": 1e-4}},
        {"name": "km", "algorithm": "kmeans",
         "dataset": {"generator": "blobs", "rows": 10000, "features": 10},
         "stop": {"max_iterations": 60, "tolerance": 1e-4}},
    ],
    "simulation": {"capacity": 8, "work_scale": 300.0, "policies": ["fair", "fifo"],
                   "workload": {"jobs": 4, "mean_gap": 5.0},
                   "scaling": {"default": {"overhead": 0.01, "comm": 0.005, "cost": 1e-6}}},
}


@pytest.fixture()
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def _timeless(data: object) -> object:
    """``data`` without ``decision_ms`` (the policies' own wall time, the one measure that is
    not a function of the seed)."""
    if isinstance(data, dict):
        return {k: _timeless(v) for k, v in data.items() if k != "decision_ms"}
    return data


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    args: argparse.Namespace = build_parser().parse_args(["simulate", *argv, "--json"])
    assert args.func(args) == 0
    data = _timeless(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert isinstance(data, dict)
    return data


def test_seed_overrides_the_config_and_repeats(config_file: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    first = run_json(capsys, str(config_file), "--seed", "11")
    again = run_json(capsys, str(config_file), "--seed", "11")
    other = run_json(capsys, str(config_file), "--seed", "12")
    own = run_json(capsys, str(config_file))
    assert first == again
    assert first["policies"] != other["policies"]
    assert own == run_json(capsys, str(config_file), "--seed", "3")  # the config's seed is 3
    assert first["bound"]["normalized_loss_job_s"] > 0


def test_draws_are_the_single_seeds(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, str(config_file), "--seed", "11", "--draws", "3", "--jobs", "1")
    assert data["seeds"] == [11, 12, 13]
    js = data["policies"]["fair"]["normalized_loss_job_s"]
    assert len(set(js)) == 3  # different draws differ
    for i, seed in enumerate(data["seeds"]):
        single = run_json(capsys, str(config_file), "--seed", str(seed))
        for name in ("fair", "fifo"):
            for key, value in single["policies"][name].items():
                assert data["policies"][name][key][i] == value, (seed, name, key)
        assert data["bound"]["normalized_loss_job_s"][i] == single["bound"]["normalized_loss_job_s"]


def test_baseline_is_the_first_policy(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, str(config_file), "--policy", "fifo", "--policy", "fair",
                    "--draws", "2", "--jobs", "1")
    assert data["baseline"] == "fifo"
    change = data["change_vs_baseline_pct"]
    for key in ("avg_normalized_loss", "normalized_loss_job_s", "mean_time_to_90"):
        assert change["fifo"][key] == [0.0, 0.0]
        base, fair = data["policies"]["fifo"][key], data["policies"]["fair"][key]
        assert change["fair"][key] == pytest.approx([(f - b) / b * 100 for f, b in zip(fair, base,
                                                                                      strict=True)])
        assert data["change_summary"]["fair"][key]["median"] == pytest.approx(
            float(np.median(change["fair"][key])))


def test_text_summary_names_the_baseline(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["simulate", str(config_file), "--draws", "2", "--jobs", "1"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "draw 2/2" in out and "2 workload draws (seeds 3-4)" in out
    assert "change against fair per draw" in out
    assert "\nbound " in out and "clairvoyant greedy" in out


def test_jobs_do_not_change_the_result(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = run_json(capsys, str(config_file), "--draws", "3", "--jobs", "1")
    two = run_json(capsys, str(config_file), "--draws", "3", "--jobs", "2")
    assert one == two


def test_draws_refuse_an_out_that_is_a_file(config_file: Path, tmp_path: Path) -> None:
    from slaq_mpi.errors import ConfigError

    taken = tmp_path / "taken"
    taken.write_text("x")
    for out in (str(taken), ""):
        args = build_parser().parse_args(["simulate", str(config_file), "--draws", "2", "--out", out])
        with pytest.raises(ConfigError, match="--out"):
            args.func(args)
    assert taken.read_text() == "x"


# --- the bound ------------------------------------------------------------------------------

@st.composite
def workloads(draw: st.DrawFn) -> list[SimJob]:
    n = draw(st.integers(1, 5))
    jobs = []
    for i in range(n):
        length = draw(st.integers(3, 40))
        rate = draw(st.floats(0.02, 0.5))
        wiggle = draw(st.floats(0.0, 0.3))
        k = np.arange(length + 1, dtype=np.float64)
        curve = 1.0 + np.exp(-rate * k) + wiggle * 0.05 * np.sin(k)  # not always decreasing
        curve[: draw(st.integers(0, 4))] = curve[0]  # a plateau first, as k-means starts
        jobs.append(SimJob(
            name=f"j{i}", algorithm="logreg", convergence="sublinear",
            arrival=draw(st.floats(0.0, 20.0)), curve=curve, l_star=float(curve.min()),
            scaling=ScalingModel(work=draw(st.floats(0.05, 5.0)), overhead=draw(st.floats(0.0, 0.1)),
                                 comm=draw(st.floats(0.0, 0.05))),
            max_cores=draw(st.integers(1, 8)), stop_iter=length, max_iterations=length))
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return jobs


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(jobs=workloads(), capacity=st.integers(1, 8), epoch=st.sampled_from([0.5, 1.0, 3.0]),
       model=st.sampled_from(["fluid", "live"]), reconfigure=st.sampled_from([0.0, 0.2]))
def test_bound_is_below_every_policy(jobs: list[SimJob], capacity: int, epoch: float, model: str,
                                     reconfigure: float) -> None:
    runs = {}
    for name in ("fair", "fifo", "slaq", "oracle"):
        policy = OraclePolicy() if name == "oracle" else get_policy(name)
        runs[name] = simulate(jobs, policy, capacity=capacity, epoch_seconds=epoch,
                              epoch_model=model, reconfigure_seconds=reconfigure)
    rows, _ = summarize_runs(runs)
    l_star, window = common_l_star(runs.values()), comparison_window(runs.values())
    bound = bound_metrics(jobs, capacity, l_star, window)
    capacity_part = capacity_job_seconds(jobs, capacity, l_star, window)
    assert capacity_part <= bound["normalized_loss_job_s"] + 1e-12
    for name, row in rows.items():
        assert capacity_part <= row["normalized_loss_job_s"] * (1 + 1e-9) + 1e-9, name
        assert bound["normalized_loss_job_s"] <= row["normalized_loss_job_s"] * (1 + 1e-9) + 1e-9, name
        for key in ("mean_time_to_90", "mean_time_to_95"):
            if row[f"reached_{key[-2:]}"] == len(jobs):  # every job reached it: each is later
                assert bound[key] <= row[key] * (1 + 1e-9) + 1e-9, (name, key)
        assert math.isfinite(bound["normalized_loss_job_s"])


def _two_step_job(name: str) -> SimJob:
    """A job of two one-second iterations on one core whose loss falls to L* only at its end."""
    curve = np.array([2.0, 1.0, 1.0])
    return SimJob(name=name, algorithm="logreg", convergence="sublinear", arrival=0.0, curve=curve,
                  l_star=1.0, scaling=ScalingModel(work=1.0, overhead=0.0, comm=0.0), max_cores=1,
                  stop_iter=2, max_iterations=2)


def test_capacity_bound_counts_the_queue() -> None:
    # three such jobs on one core: each one's two iterations are one unit (the first drops
    # nothing) of weight 1 and 2 core-seconds, released at 0; served one after the other and
    # counted by the fraction left, they weigh 1, 2 + 1 and 4 + 1 job-seconds (9). Alone, each
    # would end at 2 s (6); any real schedule ends them at 2, 4 and 6 s at the earliest (12).
    jobs = [_two_step_job(name) for name in "abc"]
    l_star = dict.fromkeys("abc", 1.0)
    assert capacity_job_seconds(jobs, 1, l_star, None) == pytest.approx(9.0)
    # in a window to 2.5 s: the second is a quarter served at its end, the third not at all
    assert capacity_job_seconds(jobs, 1, l_star, (0.0, 2.5)) == pytest.approx(1.0 + 2.4375 + 2.5)
    # on two cores each takes 1 s: 0.5 + 1.5 + 2.5, below the alone bound (6)
    assert capacity_job_seconds(jobs, 2, l_star, None) == pytest.approx(4.5)
    assert bound_metrics(jobs, 2, l_star, None)["normalized_loss_job_s"] == pytest.approx(6.0)
    bound = bound_metrics(jobs, 1, l_star, None)["normalized_loss_job_s"]
    assert bound == pytest.approx(9.0)
    run = simulate(jobs, get_policy("fifo"), capacity=1, epoch_seconds=1.0)
    rows, _ = summarize_runs({"fifo": run})
    assert rows["fifo"]["normalized_loss_job_s"] >= bound


def test_capacity_bound_blocks_follow_the_concave_majorant() -> None:
    # summed drops: concave, every iteration its own block
    assert _blocks(np.array([0.0, 0.6, 0.9, 1.0])).tolist() == [1, 2, 3]
    # a first iteration of no drop, then a small drop and the drop to 0 at the end: one block,
    # as the job cannot end without running them all
    assert _blocks(np.array([0.0, 0.0, 0.5, 1.0])).tolist() == [3]
    # a plateau, a steep drop, a slow tail and the end
    assert _blocks(np.array([0.0, 0.0, 0.0, 0.8, 0.85, 0.9, 1.0])).tolist() == [3, 6]


def test_draws_out_is_reported_and_plotted(config_file: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "draws"
    data = run_json(capsys, str(config_file), "--draws", "2", "--jobs", "1", "--out", str(out))
    assert _timeless(json.loads((out / "draws.json").read_text())) == data
    args = build_parser().parse_args(["report", str(out)])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "change against fair per draw" in text and f"wrote {out / 'draws.png'}" in text
    assert (out / "draws.png").stat().st_size > 0
