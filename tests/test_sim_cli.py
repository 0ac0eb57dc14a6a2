"""``slaq simulate`` / ``slaq sim-check`` through their argparse entry points (no MPI)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from slaq_mpi.cli import build_parser
from slaq_mpi.cli.simulate import JSON_KEYS
from slaq_mpi.config.saved import read_run
from slaq_mpi.sim import ScalingModel, compare_with_run, fit_scaling
from slaq_mpi.storage.metrics import read_metrics

CONFIG = {
    "name": "clitest", "epoch_seconds": 1.0, "policy": "fair", "ranks": 9, "seed": 5,
    "jobs": [
        {"name": "lr", "algorithm": "logreg", "arrival": 0.0,
         "dataset": {"generator": "classification", "rows": 10000, "features": 10},
         "stop": {"max_iterations": 150, "tolerance": 1e-5}},
        {"name": "km", "algorithm": "kmeans", "arrival": 3.0,
         "dataset": {"generator": "blobs", "rows": 10000, "features": 10},
         "stop": {"max_iterations": 150, "tolerance": 1e-5}},
        {"name": "lr2", "algorithm": "logreg", "arrival": 6.0,
         "dataset": {"generator": "classification", "rows": 20000, "features": 10},
         "stop": {"max_iterations": 150, "tolerance": 1e-5}},
    ],
    "simulation": {"capacity": 8, "work_scale": 3000.0, "policies": ["fair", "fifo"],
                   "scaling": {"default": {"overhead": 0.01, "comm": 0.005, "cost": 1e-6}}},
}


def parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)  # the `slaq` parser, as the console script builds it


@pytest.fixture()
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def test_simulate_json_is_last_line(config_file: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["simulate", str(config_file), "--out", str(tmp_path / "o"), "--json"])
    assert args.func(args) == 0
    cap = capsys.readouterr()
    data = json.loads(cap.out.strip().splitlines()[-1])
    assert set(data["policies"]) == {"fair", "fifo"}
    for row in data["policies"].values():
        assert set(row) == set(JSON_KEYS)
        assert {"median_time_to_90", "median_time_to_95", "median_completion",
                "mean_completion"} <= set(row)  # the table's columns too
        assert 0 < row["avg_normalized_loss"] <= 1 and row["makespan"] > 0
        assert type(row["reached_90"]) is int and type(row["reached_95"]) is int  # counts: 3, not 3.0
    assert "simulating fair" in cap.err  # progress goes to stderr with --json
    assert (tmp_path / "o" / "fair" / "metrics.h5").is_file()
    with h5py.File(tmp_path / "o" / "fair" / "metrics.h5", "r") as f:  # docs/metrics.md's datasets
        epochs = f["epochs/time"].shape[0]
        assert f["epochs/gap_ms"].shape == (epochs,) and np.isnan(f["epochs/gap_ms"][()]).all()
    run = read_metrics(tmp_path / "o" / "fifo")
    assert run.policy == "fifo" and run.mode == "simulate" and "clitest" in run.config


def test_simulate_policy_flag_and_bad_policy(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.errors import ConfigError

    args = parse(["simulate", str(config_file), "--policy", "oracle", "--json"])
    assert args.func(args) == 0
    assert list(json.loads(capsys.readouterr().out.splitlines()[-1])["policies"]) == ["oracle"]
    with pytest.raises(ConfigError, match="--policy"):
        args = parse(["simulate", str(config_file), "--policy", "nope"])
        args.func(args)


def test_simulate_refuses_an_empty_out_and_a_policy_given_twice(config_file: Path,
                                                               tmp_path: Path) -> None:
    from tests.conftest import run_slaq

    for argv, needles in (
        (["--out", ""], ["--out", "''", "must name a directory"]),
        (["--out", " "], ["--out", "' '", "must name a directory"]),
        (["--policy", "slaq", "--policy", "fair", "--policy", "slaq"],
         ["--policy", "'slaq'", "given twice"]),
    ):
        proc = run_slaq(["simulate", str(config_file), *argv], cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == ""  # refused before anything was simulated
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("slaq: error: "), proc.stderr
        for needle in needles:
            assert needle in lines[0], (needle, lines[0])
    proc = run_slaq(["sim-check", "somewhere", "--out", ""], cwd=tmp_path)
    assert proc.returncode == 2 and "--out: '' is not allowed" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_fit_scaling_recovers_the_model() -> None:
    true = ScalingModel(work=8.0, overhead=0.05, comm=0.01)
    pairs = [(a, true.seconds(a)) for a in (1, 2, 4, 8, 16, 3, 6)]
    got = fit_scaling(pairs)
    assert got.work == pytest.approx(8.0, rel=1e-6)
    assert got.overhead == pytest.approx(0.05, abs=1e-6)
    assert got.comm == pytest.approx(0.01, abs=1e-6)
    single = fit_scaling([(4, 1.0), (4, 1.2)])
    assert single.work == pytest.approx(4.4)
    # slower on more cores (an oversubscribed node): one core must still take time
    slower = fit_scaling([(2, 0.12), (2, 0.11), (3, 0.25), (3, 0.3)])
    assert slower.seconds(1) > 0.1 and slower.comm == 0.0
    assert slower.seconds(2) == pytest.approx(slower.seconds(3))  # the best fit without log2(a)


def as_real_run(run_dir: Path) -> None:
    """Make a simulation's metrics.h5 look like a real run's (mode run, no simulator-only
    job attributes), to check sim-check against a run whose truth is known."""
    with h5py.File(run_dir / "metrics.h5", "r+") as f:
        f.attrs["mode"] = "run"
        for g in f["jobs"].values():
            for key in ("l_star", "utility", "scaling"):
                if key in g.attrs:
                    del g.attrs[key]


def test_sim_check_on_a_simulated_run_agrees_with_itself(config_file: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["simulate", str(config_file), "--policy", "fair", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    as_real_run(tmp_path / "o" / "fair")
    cmp = compare_with_run(tmp_path / "o" / "fair", epoch_model="fluid")
    assert cmp.mean_share_difference < 0.02
    for name, model in cmp.scaling.items():
        assert model.work > 0, name
    real = read_metrics(tmp_path / "o" / "fair")
    assert np.array_equal(cmp.simulated.alloc[: len(real.alloc)], real.alloc)
    args = parse(["sim-check", str(tmp_path / "o" / "fair"), "--json", "--epoch-model", "fluid"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["ok"] is True


def test_sim_check_ends_a_failed_job_where_it_failed(config_file: Path, tmp_path: Path) -> None:
    args = parse(["simulate", str(config_file), "--policy", "fair", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    run = tmp_path / "o" / "fair"
    as_real_run(run)
    with h5py.File(run / "metrics.h5", "r+") as f:  # lr failed halfway: its last loss NaN
        job = f["jobs/lr"]
        k = len(job["loss"]) // 2
        for key in ("loss", "time", "cores", "iter_seconds"):
            kept = job[key][:k]
            del job[key]
            job[key] = kept
        job["loss"][k - 1] = np.nan
        job.attrs["status"] = "failed"
        job.attrs["end"] = float(job["time"][k - 1])
    cmp = compare_with_run(run, epoch_model="fluid")
    sim = cmp.simulated.jobs["lr"]
    assert len(sim.loss) == k and sim.status == "done"  # it stopped there, not at its stop rule
    assert np.all(np.isfinite(sim.loss)) and np.isfinite(sim.l_star)


def test_curves_record_writes_a_loadable_library(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.sim.curves import CurveLibrary

    out = tmp_path / "c.npz"
    args = parse(["curves", "record", "--algorithm", "linreg", "--out", str(out)])
    assert args.func(args) == 0
    lib = CurveLibrary.load(out)
    packaged = CurveLibrary.load()
    # a new file starts as a copy of the packaged library, so it serves whole as a curve_file
    assert lib.algorithms() == packaged.algorithms()
    for alg in packaged.algorithms():
        if alg != "linreg":
            assert [c.name for c in lib.for_algorithm(alg)] == [c.name for c in packaged.for_algorithm(alg)]
    assert len(lib.for_algorithm("linreg")) >= 2
    for c in lib.for_algorithm("linreg"):
        assert c.convergence == "linear" and c.l_star <= c.losses.min()
        assert c.losses[0] > c.losses[-1]
    again = tmp_path / "d.npz"
    args = parse(["curves", "record", "--algorithm", "linreg", "--out", str(again)])
    assert args.func(args) == 0
    for a, b in zip(lib.curves, CurveLibrary.load(again).curves, strict=True):
        assert np.array_equal(a.losses, b.losses)  # curves do not depend on timing


UTILITY_CONFIG = {
    "name": "u", "epoch_seconds": 1.0, "policy": "utility", "ranks": 4, "seed": 3,
    "jobs": [
        {"name": "urgent", "algorithm": "logreg", "stop": {"max_iterations": 60},
         "utility": {"value": 10, "deadline": 8, "decay": 4},
         "dataset": {"generator": "classification", "rows": 100000, "features": 50}},
        {"name": "calm", "algorithm": "kmeans", "stop": {"max_iterations": 60},
         "utility": {"value": 1}, "dataset": {"generator": "blobs", "rows": 100000, "features": 50}},
        {"name": "other", "algorithm": "logreg", "stop": {"max_iterations": 60},
         "dataset": {"generator": "classification", "rows": 100000, "features": 50}},
    ],
    "simulation": {"capacity": 3, "curves": "analytic", "work_scale": 5.0,
                   "scaling": {"default": {"overhead": 0.01, "comm": 0.002}}},
}


def test_sim_check_gives_the_jobs_their_utility_specs(tmp_path: Path) -> None:
    cfg = tmp_path / "u.yaml"
    cfg.write_text(yaml.safe_dump(UTILITY_CONFIG))
    args = parse(["simulate", str(cfg), "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    as_real_run(tmp_path / "o" / "utility")  # a real run's metrics hold no utility attribute
    with h5py.File(tmp_path / "o" / "utility" / "metrics.h5") as f:
        assert "utility" not in f["jobs/urgent"].attrs
    real = read_run(tmp_path / "o" / "utility")  # ... so they come from its config
    assert real.policy == "utility" and real.jobs["urgent"].utility == {"value": 10.0, "deadline": 8.0,
                                                                         "decay": 4.0}
    cmp = compare_with_run(tmp_path / "o" / "utility", epoch_model="fluid")
    assert cmp.simulated.jobs["urgent"].utility == {"value": 10.0, "deadline": 8.0, "decay": 4.0}
    assert cmp.simulated.jobs["calm"].utility == {"value": 1.0, "decay": 0.0}
    assert cmp.simulated.jobs["other"].utility is None
    # the utility policy decides on the same specs, so its allocations are the real ones
    assert np.array_equal(cmp.simulated.alloc[: len(real.alloc)], real.alloc)
    assert cmp.mean_share_difference == 0.0


def test_sim_check_reads_the_run_config_as_slaq_run_did(tmp_path: Path) -> None:
    """A config writing ``1e-4`` (a number to ``slaq run``, text to YAML 1.1) is checked too."""
    text = yaml.safe_dump(UTILITY_CONFIG).replace(
        "- algorithm: logreg\n", "- algorithm: logreg\n  hyperparameters: {l2: 1e-4}\n", 1)
    assert "l2: 1e-4" in text and isinstance(yaml.safe_load(text)["jobs"][0]["hyperparameters"]["l2"], str)
    cfg = tmp_path / "u.yaml"
    cfg.write_text(text)
    args = parse(["simulate", str(cfg), "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    as_real_run(tmp_path / "o" / "utility")
    assert "l2: 1e-4" in read_metrics(tmp_path / "o" / "utility").config
    cmp = compare_with_run(tmp_path / "o" / "utility", epoch_model="fluid")
    assert cmp.mean_share_difference == 0.0


@pytest.mark.parametrize(("damage", "needle"), [
    ("arrival", "job lr's arrival is nan"),
    ("epoch_seconds", "epoch_seconds is nan"),
    ("loss_2d", "job lr's series are loss (2,"),
    ("short_loss", "job lr's series are loss (3,)"),
    ("unknown_name", "/epochs names job zz"),
])
def test_a_damaged_metrics_file_is_refused_in_one_line(config_file: Path, tmp_path: Path,
                                                       damage: str, needle: str) -> None:
    from tests.conftest import run_slaq

    args = parse(["simulate", str(config_file), "--policy", "fair", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    run = tmp_path / "o" / "fair"
    as_real_run(run)
    with h5py.File(run / "metrics.h5", "r+") as f:
        job = f["jobs/lr"]
        if damage == "arrival":
            job.attrs["arrival"] = np.nan
        elif damage == "epoch_seconds":
            f.attrs["epoch_seconds"] = np.nan
        elif damage == "loss_2d":
            loss = job["loss"][()]
            del job["loss"]
            job["loss"] = np.stack([loss, loss])
        elif damage == "short_loss":
            loss = job["loss"][:3]
            del job["loss"]
            job["loss"] = loss
        else:
            names = f["epochs/job_names"][()]
            del f["epochs/job_names"]
            f["epochs/job_names"] = np.array([b"zz", *names[1:]])
    for cmd in (["report", "o/fair"], ["sim-check", "o/fair"]):
        proc = run_slaq(cmd, cwd=tmp_path, timeout=60)  # a NaN arrival made sim-check spin forever
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "damaged metrics file" in lines[0] and needle in lines[0], lines


def test_sim_check_refuses_a_simulated_run(config_file: Path, tmp_path: Path) -> None:
    from tests.conftest import run_slaq

    args = parse(["simulate", str(config_file), "--policy", "fifo", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    before = (tmp_path / "o" / "fifo" / "metrics.h5").read_bytes()
    for extra in ([], ["--out", "check"], ["--json"]):
        proc = run_slaq(["sim-check", "o/fifo", *extra], cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0] == ("slaq: error: o/fifo is a simulated run (its metrics.h5 has mode "
                            "'simulate'); sim-check compares a real run (slaq run) with its simulation")
    assert not (tmp_path / "check").exists()
    assert (tmp_path / "o" / "fifo" / "metrics.h5").read_bytes() == before


def test_curves_record_into_a_new_file_starts_from_the_packaged_library(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.sim import curves

    packaged = curves.DEFAULT_LIBRARY.read_bytes()
    before = curves.CurveLibrary.load(None)
    lib_file = tmp_path / "mine.npz"
    args = parse(["curves", "record", "--algorithm", "linreg", "--seed", "7", "--out", str(lib_file)])
    assert args.func(args) == 0
    after = curves.CurveLibrary.load(lib_file)
    assert after.algorithms() == before.algorithms() and len(before.algorithms()) > 1
    new = after.for_algorithm("linreg")
    assert new and all('"seed": 700' in c.recipe for c in new)  # recorded with --seed 7
    for alg in before.algorithms():
        if alg != "linreg":
            assert [c.name for c in after.for_algorithm(alg)] == [c.name for c in before.for_algorithm(alg)]
            for a, b in zip(after.for_algorithm(alg), before.for_algorithm(alg), strict=True):
                assert np.array_equal(a.losses, b.losses) and a.cost_per_cell == b.cost_per_cell
    n_old = len(before.for_algorithm("linreg"))
    assert len(after) == len(before) - n_old + len(new)
    out = capsys.readouterr().out.splitlines()[-1]
    assert f"{len(new)} curves of linreg recorded (replaced {n_old} old ones)" in out
    assert f"now holds {len(after)} curves of {len(after.algorithms())} algorithms" in out
    assert curves.DEFAULT_LIBRARY.read_bytes() == packaged  # the packaged library is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.npz"]  # no temp file left


def test_curves_record_merges_into_an_existing_out_file(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.sim.curves import CurveLibrary, analytic_curve

    out = tmp_path / "mine"  # written to exactly this name (numpy would add .npz to a path)
    CurveLibrary([analytic_curve("linear", np.random.default_rng(0), name="a1")]).save(out)
    args = parse(["curves", "record", "--algorithm", "linreg", "--out", str(out)])
    assert args.func(args) == 0
    lib = CurveLibrary.load(out)
    assert lib.algorithms() == ["analytic-linear", "linreg"] and lib.curves[0].name == "a1"
    assert "recorded (new); library" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_curves_record_refuses_bad_arguments_before_recording(tmp_path: Path) -> None:
    from tests.conftest import run_slaq

    (tmp_path / "adir").mkdir()
    (tmp_path / "junk.npz").write_text("not a library")
    cases = [
        (["--algorithm", "bogus", "--out", "x.npz"],
         ["--algorithm", "'bogus'", "allowed: gbt, gbt_classifier", "linreg", "svm"]),
        (["--algorithm", "linreg", "--out", "nodir/x.npz"],
         ["--out", "'nodir/x.npz'", "nodir does not exist"]),
        (["--algorithm", "linreg", "--out", "adir"], ["--out", "'adir'", "is a directory"]),
        (["--algorithm", "linreg", "--out", "junk.npz"],
         ["--out", "junk.npz", "not a curve library", "another file"]),
        (["--algorithm", "linreg", "--out", ""], ["--out", "''", "must name a .npz file"]),
        (["--algorithm", "linreg", "--out", "junk.npz/x.npz"],
         ["--out", "'junk.npz/x.npz'", "junk.npz is not a writable directory"]),
        (["--algorithm", "linreg"], ["the following arguments are required: --out"]),
    ]
    for argv, needles in cases:
        proc = run_slaq(["curves", "record", *argv], cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == "" and "Traceback" not in proc.stderr  # nothing was recorded
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("slaq: error: "), proc.stderr
        for needle in needles:
            assert needle in lines[0], (needle, lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "junk.npz"]
    assert (tmp_path / "junk.npz").read_text() == "not a library" and not any((tmp_path / "adir").iterdir())


def test_oracle_needs_the_simulator() -> None:
    from slaq_mpi.policies import get_policy
    from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot

    snap = ClusterSnapshot(capacity=4, now=0.0, epoch_seconds=1.0,
                           jobs=(JobSnapshot("x", (), (), 0, 4),))
    with pytest.raises(KeyError, match="only in the simulator"):
        get_policy("oracle").allocate(snap)


def test_report_table_without_matplotlib(config_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from slaq_mpi.cli.report import add_cli as report_cli

    args = parse(["simulate", str(config_file), "--policy", "fair", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.delitem(sys.modules, "slaq_mpi.report.plots", raising=False)
    parser = argparse.ArgumentParser()
    report_cli(parser.add_subparsers(dest="cmd"))
    rargs = parser.parse_args(["report", str(tmp_path / "o")])
    assert rargs.func(rargs) == 0
    out = capsys.readouterr().out
    assert "fair " in out and "matplotlib is not installed" in out
    assert not list((tmp_path / "o").glob("*.png"))


def test_share_difference_counts_a_simulation_that_ended_early() -> None:
    from slaq_mpi.report.evaluation import JobTrace, RunData
    from slaq_mpi.sim.run import share_difference

    def run(starts: list[float], end: float) -> RunData:
        trace = JobTrace(name="a", algorithm="logreg", arrival=0.0, loss=np.ones(1), time=np.zeros(1),
                         cores=np.ones(1), iter_seconds=np.ones(1), end=end)
        return RunData(name="x", policy="fair", seed=0, capacity=4, epoch_seconds=1.0, mode="sim",
                       config="", jobs={"a": trace}, job_names=["a"], epoch_time=np.array(starts),
                       alloc=np.full((len(starts), 1), 4), decision_ms=np.zeros(len(starts)),
                       pause_ms=np.zeros(len(starts)))

    real = run([0.0, 1.0, 2.0, 3.0], end=4.0)
    assert share_difference(real, run([0.0, 1.0, 2.0, 3.0], end=4.0)) == 0.0
    # the simulated job ended at 2 s: it holds no cores at the real epochs starting at 2 and 3 s
    assert share_difference(real, run([0.0, 1.0], end=2.0)) == 0.25


def test_simulate_out_moves_an_earlier_simulation_aside(config_file: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    args = parse(["simulate", str(config_file), "--policy", "fifo", "--out", str(out)])
    assert args.func(args) == 0
    first = (out / "fifo" / "metrics.h5").read_bytes()
    args = parse(["simulate", str(config_file), "--policy", "fair", "--out", str(out)])
    assert args.func(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fair"]  # no stale fifo run beside it
    asides = [p for p in tmp_path.iterdir() if p.name.startswith("o.")]
    assert len(asides) == 1 and (asides[0] / "fifo" / "metrics.h5").read_bytes() == first
    assert f"moved the previous contents of {out} to {asides[0]}" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--max-epochs", "0"], ["--max-epochs", "-3"]])
def test_simulate_refuses_a_non_positive_epoch_limit(config_file: Path, argv: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["simulate", str(config_file), *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--max-epochs" in err and len(err.splitlines()) == 1 and err.startswith("slaq: error: ")


def test_sim_check_refuses_a_threshold_outside_zero_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["sim-check", "somewhere", "--threshold", "-1"])
    assert exc.value.code == 2
    assert "fraction in [0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize("seed", ["-1", str(10**23), "abc"])
def test_curves_record_refuses_a_seed_it_cannot_use(seed: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["curves", "record", "--out", "c.npz", "--seed", seed])
    assert exc.value.code == 2
    assert "must be an integer from 0 to 9007199254740992" in capsys.readouterr().err


def test_ctrl_c_during_a_simulation_is_one_line_and_status_130(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    paper = str(ROOT / "configs" / "paper.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "slaq_mpi", "simulate", paper,
                             "--policy", "slaq", "--out", "sim"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # as from a terminal (a background job of a shell ignores SIGINT)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    first = proc.stdout.readline()  # "simulating slaq: ...": the simulation has begun
    time.sleep(1.0)  # it takes several seconds
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert first.startswith("simulating slaq"), first
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "slaq: interrupted", err


def test_a_reader_that_goes_away_stops_neither_simulate_nor_report(config_file: Path,
                                                                  tmp_path: Path) -> None:
    """`slaq simulate ... | head -1` still writes every policy; `slaq report | head -1` its PNGs;
    both then exit 141, as a shell reports a command whose reader went away."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    try:
        import matplotlib  # noqa: F401
        plots = True
    except ImportError:  # the report prints its table and a note at once: nothing left to cut
        plots = False
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    for argv in (["simulate", str(config_file), "--out", "sim"], ["report", "sim"]):
        proc = subprocess.Popen([sys.executable, "-m", "slaq_mpi", *argv], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # as `| head -1` does after its line
        err = proc.stderr.read()
        proc.wait(timeout=120)
        assert first.strip(), err
        cut = argv[0] == "simulate" or plots  # lines written after the reader left
        assert "Traceback" not in err and proc.returncode == (141 if cut else 0), (argv, proc.returncode, err)
    assert sorted(p.name for p in (tmp_path / "sim").iterdir() if p.is_dir()) == ["fair", "fifo"]
    assert (tmp_path / "sim" / "avg_normalized_loss.png").is_file() == plots


def test_output_into_a_pipe_closed_from_the_start(config_file: Path, tmp_path: Path) -> None:
    """Every write fails (stdout and stderr: `2>&1 | head` after head has gone): simulate still
    writes every policy; it and a command that only prints exit 141, without a traceback."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["simulate", str(config_file), "--out", "sim", "--json"], ["validate", str(config_file)]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before slaq writes a byte
        try:
            proc = subprocess.run([sys.executable, "-m", "slaq_mpi", *argv], cwd=tmp_path, env=env,
                                  stdout=write, stderr=write, timeout=120, check=False)
        finally:
            os.close(write)
        assert proc.returncode == 141, argv
    # started with stdout closed (>&-): Python has no sys.stdout at all; nothing to lose
    proc = subprocess.run([sys.executable, "-m", "slaq_mpi", "validate", str(config_file)], cwd=tmp_path,
                          env=env, preexec_fn=lambda: os.close(1), capture_output=False,
                          stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in (tmp_path / "sim").iterdir() if p.is_dir()) == ["fair", "fifo"]


def test_with_stderr_closed_errors_stay_off_stdout(tmp_path: Path) -> None:
    """Started with stderr closed (2>&-), Python has no sys.stderr and ``print(file=None)``
    writes to stdout: an error line would land in the `--json` output a script reads."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "slaq_mpi", "report", str(tmp_path / "missing"), "--json"],
                          cwd=tmp_path, env=env, preexec_fn=lambda: os.close(2),
                          stdout=subprocess.PIPE, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stdout == "", proc.stdout
    # and a child process started by slaq (mpiexec, the ranks) gets /dev/null as its stderr,
    # not whatever file it opens first
    code = ("import os, sys; from slaq_mpi import cli; cli.main(['validate', 'missing.yaml']); "
            "import subprocess; print(subprocess.run(['readlink', '/proc/self/fd/2'], "
            "stdout=subprocess.PIPE, text=True).stdout.strip(), file=open('child.txt', 'w'))")
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, preexec_fn=lambda: os.close(2),
                   stdout=subprocess.DEVNULL, timeout=120, check=False)
    assert (tmp_path / "child.txt").read_text().strip() == os.devnull


def test_simulate_reports_the_bound(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The workload's bound on job-seconds is printed and in --json, below every policy."""
    args = parse(["simulate", str(config_file), "--json"])
    assert args.func(args) == 0
    cap = capsys.readouterr()
    data = json.loads(cap.out.strip().splitlines()[-1])
    bound = data["bound"]["normalized_loss_job_s"]
    assert 0 < bound <= min(r["normalized_loss_job_s"] for r in data["policies"].values())
    assert "bound (every job alone on all the cores it may use from its arrival, or the cluster" in cap.err
