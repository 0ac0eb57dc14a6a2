"""One metrics.h5 file format: what a live run's record and what a simulation write comes back
through the one reader, and ``slaq report --json`` shows the figures of what was written."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from slaq_mpi.cli import build_parser
from slaq_mpi.config import experiment as config
from slaq_mpi.report.summary import json_value, summarize_runs
from slaq_mpi.sim import run_policies
from slaq_mpi.storage.metrics import JobRecord, RunData, RunRecord, read_metrics

CONFIG = """name: two
epoch_seconds: 2.0
policy: fair
jobs:
  - {name: a, algorithm: logreg, utility: {value: 10}}
  - {name: b, algorithm: kmeans, utility: {value: 6, deadline: 4, decay: 2}}
"""


def live_record() -> RunRecord:
    """Two finished jobs as rank 0 records them, with numbers a report can be checked by hand."""
    a = JobRecord(name="a", algorithm="logreg", convergence="sublinear", arrival=0.0, max_cores=4,
                  loss=[4.0, 2.0, 1.0, 0.5], time=[1.0, 2.0, 3.0, 4.0], cores=[2, 2, 3, 3],
                  iter_seconds=[0.5, 0.5, 0.25, 0.25], throughput=[(2, 0.5), (3, 0.25)],
                  attained_core_seconds=5.0, start=0.5, end=4.0, status="done")
    b = JobRecord(name="b", algorithm="kmeans", convergence="linear", arrival=1.0, max_cores=2,
                  loss=[3.0, 1.0, 0.2, 0.1], time=[2.5, 3.5, 4.5, 6.0], cores=[2, 2, 1, 1],
                  iter_seconds=[0.5, 0.5, 1.0, 1.5], throughput=[(2, 0.5), (1, 1.25)],
                  attained_core_seconds=4.5, start=2.0, end=6.0, status="done")
    rec = RunRecord(attrs={"name": "two", "policy": "fair", "seed": 7, "capacity": 4,
                           "epoch_seconds": 2.0, "mode": "run", "config": CONFIG,
                           "workdir": "/somewhere", "data_files": "{}"},
                    jobs={"a": a, "b": b})
    for t, alloc, decision, moved in ((0.0, {"a": 2}, 0.5, True), (2.0, {"a": 2, "b": 2}, 1.5, True),
                                      (4.0, {"b": 1}, 2.5, False)):
        rec.add_epoch(t, alloc, decision, moved)
        if t > 0:
            rec.pause_ms[-1], rec.gap_ms[-1] = 10.0 * t, 5.0 * t
    rec.attrs.update(stopped=6.0, epoch=3, elapsed=6.0)
    return rec


def report_json(*run_dirs: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    args = build_parser().parse_args(["report", *map(str, run_dirs), "--json", "--no-plots"])
    assert args.func(args) == 0
    return dict(json.loads(capsys.readouterr().out.splitlines()[-1])["runs"])


def assert_same_run(got: RunData, want: RunData, skip: tuple[str, ...] = ()) -> None:
    """Every field of two runs equal (NaN equal to NaN); ``skip`` names job fields to leave out."""
    got_fields = {k: v for k, v in vars(got).items() if k != "jobs"}
    want_fields = {k: v for k, v in vars(want).items() if k != "jobs"}
    np.testing.assert_equal(got_fields, want_fields)
    assert list(got.jobs) == sorted(want.jobs)  # a file lists its jobs by name
    for name, job in want.jobs.items():
        wanted = {k: v for k, v in vars(job).items() if k not in skip}
        np.testing.assert_equal({k: v for k, v in vars(got.jobs[name]).items() if k not in skip},
                                wanted, err_msg=name)


def test_a_live_record_comes_back_whole_through_the_one_reader(tmp_path: Path) -> None:
    rec = live_record()
    rec.write(tmp_path / "metrics.h5")
    run = read_metrics(tmp_path)
    assert_same_run(run, rec.run_data())
    assert (run.name, run.policy, run.seed, run.capacity, run.mode) == ("two", "fair", 7, 4, "run")
    assert (run.workdir, run.data_files, run.epoch, run.elapsed) == ("/somewhere", "{}", 3, 6.0)
    assert run.stopped == 6.0
    np.testing.assert_equal(run.gap_ms, [math.nan, 10.0, 20.0])
    np.testing.assert_equal(run.pause_ms, [math.nan, 20.0, 40.0])
    assert run.alloc.tolist() == [[2, 0], [2, 2], [0, 1]] and run.job_names == ["a", "b"]
    assert all(job.l_star is None and job.utility is None and job.scaling is None
               for job in run.jobs.values())  # a live run keeps its utilities in `config`
    back = RunRecord.read(tmp_path / "metrics.h5")  # what --resume reads
    np.testing.assert_equal(dataclasses.asdict(back), dataclasses.asdict(rec))


def test_slaq_report_shows_the_figures_of_a_live_record(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    live_record().write(tmp_path / "run" / "metrics.h5")
    figures = report_json(tmp_path / "run", capsys=capsys)["fair"]
    # a: L* 0.5, normalized 1, 3/7, 1/7, 0 -> 90% and 95% at t=4; b: L* 0.1, 95% at t=4.5 (arrived 1)
    assert figures["jobs"] == 2 and figures["reached_90"] == figures["reached_95"] == 2
    assert figures["mean_time_to_90"] == pytest.approx(3.75)
    assert figures["median_time_to_95"] == pytest.approx(3.75)
    assert figures["mean_completion"] == pytest.approx(4.5) and figures["makespan"] == pytest.approx(6.0)
    assert figures["decision_ms"] == pytest.approx(1.5)
    assert figures["total_utility"] == pytest.approx(10.0 + 3.0)  # b: 1 s late of a 2 s decay


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunData]:
    out = tmp_path_factory.mktemp("sim")
    spec = config.parse({
        "name": "small", "epoch_seconds": 1.0, "policy": "fair", "ranks": 9, "seed": 3,
        "jobs": [{"name": "lr", "algorithm": "logreg", "utility": {"value": 2, "deadline": 30},
                  "dataset": {"generator": "classification", "rows": 10000, "features": 10},
                  "stop": {"max_iterations": 200, "tolerance": 1e-6}}],
        "simulation": {"capacity": 8, "curves": "analytic", "work_scale": 20.0,
                       "workload": {"jobs": 5, "mean_gap": 2.0}},
    }, check_files=False)
    return out / "fair", run_policies(spec, ["fair"], out=out)["fair"]


def test_a_simulation_comes_back_whole_through_the_one_reader(simulated: tuple[Path, RunData]) -> None:
    run_dir, run = simulated
    back = read_metrics(run_dir)
    assert_same_run(back, dataclasses.replace(run, gap_ms=np.full(len(run.epoch_time), np.nan)))
    assert back.mode == "simulate" and back.workdir is None and back.epoch is None
    assert all(j.l_star is not None and j.utility and j.scaling for j in back.jobs.values())
    with h5py.File(run_dir / "metrics.h5") as f:  # the datasets of a live run's file, too
        assert np.isnan(f["epochs/gap_ms"][()]).all() and len(f["epochs/gap_ms"]) == len(run.epoch_time)


def test_slaq_report_shows_the_figures_of_a_simulation(simulated: tuple[Path, RunData],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, run = simulated
    figures = report_json(run_dir, capsys=capsys)["fair"]
    rows, _ = summarize_runs({"fair": run})  # the run as the simulator returned it, unwritten
    assert figures == {m: json_value(m, v) for m, v in rows["fair"].items()}
    assert figures["jobs"] == 5 and figures["total_utility"] > 0


def test_one_schema_a_simulation_read_as_a_live_record_writes_the_same_file(
        simulated: tuple[Path, RunData], tmp_path: Path) -> None:
    run_dir, _ = simulated
    RunRecord.read(run_dir / "metrics.h5").write(tmp_path / "metrics.h5")
    simulator_only = ("l_star", "utility", "scaling")  # job attributes slaq run does not keep
    assert_same_run(read_metrics(tmp_path), read_metrics(run_dir), skip=simulator_only)
