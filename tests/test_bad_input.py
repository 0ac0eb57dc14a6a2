"""Bad input is refused before any rank starts: exit 2 and one line naming key and value."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slaq_mpi.storage import rundir
from tests.conftest import run_mpi, run_slaq

GOOD = {
    "name": "t",
    "epoch_seconds": 0.5,
    "policy": "fair",
    "ranks": 4,
    "seed": 1,
    "jobs": [
        {"name": "a", "algorithm": "logreg",
         "dataset": {"generator": "classification", "rows": 100, "features": 3}},
        {"name": "b", "algorithm": "kmeans", "hyperparameters": {"k": 2},
         "dataset": {"generator": "blobs", "rows": 100, "features": 3}},
    ],
}


def _with(path: list[object], value: object) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(GOOD))
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return raw


CASES = {
    "unknown top key": (_with(["epochs"], 3), ["epochs", "allowed keys"]),
    "output_dir is a file": (_with(["output_dir"], "c.yaml"), ["output_dir", "'c.yaml'", "not a directory"]),
    "output_dir under a file": (_with(["output_dir"], "c.yaml/run"),
                                ["output_dir", "'c.yaml/run'", "c.yaml is not a writable directory"]),
    "output_dir is the current directory": (_with(["output_dir"], "."),
                                            ["output_dir", "'.'", "not the current directory"]),
    "unknown job key": (_with(["jobs", 0, "speed"], 3), ["jobs[0].speed", "allowed keys"]),
    "wrong type": (_with(["epoch_seconds"], "fast"), ["epoch_seconds", "'fast'", "number"]),
    "zero epoch": (_with(["epoch_seconds"], 0), ["epoch_seconds", "0", ">="]),
    "negative rows": (_with(["jobs", 0, "dataset", "rows"], -5), ["jobs[0].dataset.rows", "-5", ">= 1"]),
    "zero max_iterations": (_with(["jobs", 1, "stop"], {"max_iterations": 0}),
                            ["jobs[1].stop.max_iterations", "0", ">= 1"]),
    "one rank": (_with(["ranks"], 1), ["ranks", "1", "[2, 16777216]"]),
    "ranks beyond any machine": (_with(["ranks"], 2**70), ["ranks", str(2**70), "[2, 16777216]"]),
    "output_dir with a NUL byte": (_with(["output_dir"], "a\0b"), ["output_dir", "no NUL byte"]),
    "output_dir name too long": (_with(["output_dir"], "x" * 300),
                                 ["x" * 300, "the path is too long", "255 bytes"]),
    "duplicate names": (_with(["jobs", 1, "name"], "a"), ["jobs[1].name", "'a'", "unique"]),
    "path and generator": (_with(["jobs", 0, "dataset", "path"], "x.h5"),
                           ["jobs[0].dataset", "either path", "or generator", "not both"]),
    "path is a directory": (_with(["jobs", 0, "dataset"], {"path": "."}),
                            ["jobs[0].dataset.path", "is a directory"]),
    "name ending in a newline": (_with(["jobs", 1, "name"], "b\n"), ["jobs[1].name", "1-64 characters"]),
    "unknown algorithm": (_with(["jobs", 0, "algorithm"], "xgboost"),
                          ["jobs[0].algorithm", "'xgboost'", "logreg"]),
    "unknown policy": (_with(["policy"], "lottery"), ["policy", "'lottery'", "fair"]),
    "zero density": (_with(["jobs", 0, "dataset", "density"], 0), ["jobs[0].dataset.density", "(0, 1]"]),
    "density above one": (_with(["jobs", 0, "dataset", "density"], 1.5),
                          ["jobs[0].dataset.density", "1.5", "(0, 1]"]),
    "bad policy parameter value": (_with(["policy"], {"name": "slaq", "params": {"window": 2}}),
                                   ["policy", "window must be an integer in [3, 1000] (got 2)"]),
    "zero policy decay": (_with(["policy"], {"name": "slaq", "params": {"decay": 0}}),
                          ["policy", "'slaq'", "decay must be > 0 (got 0)"]),
    "policy parameter of the wrong type": (
        _with(["policy"], {"name": "slaq", "params": {"learn_scaling": "false"}}),
        ["policy", "learn_scaling", "'false'", "true or false"]),
    "unknown policy parameter": (_with(["policy"], {"name": "fair", "params": {"share": 2}}),
                                 ["policy", "no parameter 'share'", "allowed: none"]),
    "simulation-only policy": (_with(["policy"], "oracle"), ["policy", "'oracle'", "slaq simulate",
                                                             "fair"]),
    "missing dataset": (_with(["jobs", 0, "dataset"], {"path": "/nonexistent/d.h5"}),
                        ["jobs[0].dataset.path", "/nonexistent/d.h5", "does not exist"]),
    "bad hyperparameter": (_with(["jobs", 1, "hyperparameters"], {"k": "two"}),
                           ["jobs[1].hyperparameters.k", "'two'", "int"]),
    "unknown hyperparameter": (_with(["jobs", 1, "hyperparameters"], {"clusters": 2}),
                               ["jobs[1].hyperparameters.clusters", "allowed keys: k"]),
    "negative k": (_with(["jobs", 1, "hyperparameters"], {"k": -4}),
                   ["jobs[1].hyperparameters.k", "-4", ">= 1"]),
    "zero k": (_with(["jobs", 1, "hyperparameters"], {"k": 0}), ["jobs[1].hyperparameters.k", "0", ">= 1"]),
    "more clusters than rows": (_with(["jobs", 1, "hyperparameters"], {"k": 101}),
                                ["jobs[1].hyperparameters.k", "101", "at most the dataset's 100 rows"]),
    "zero learning rate": (_with(["jobs", 0, "hyperparameters"], {"learning_rate": 0.0}),
                           ["jobs[0].hyperparameters.learning_rate", "0.0", "> 0"]),
    "nan learning rate": (_with(["jobs", 0, "hyperparameters"], {"learning_rate": float("nan")}),
                          ["jobs[0].hyperparameters.learning_rate", "nan", "> 0"]),
    "negative l2": (_with(["jobs", 0, "hyperparameters"], {"l2": -1e-3}),
                    ["jobs[0].hyperparameters.l2", "-0.001", ">= 0"]),
    "svm loss not a choice": (_with(["jobs", 0], {"name": "a", "algorithm": "svm",
                                                  "hyperparameters": {"loss": "hinge"},
                                                  "dataset": GOOD["jobs"][0]["dataset"]}),
                              ["jobs[0].hyperparameters.loss", "'hinge'", "squared_hinge, smoothed_hinge"]),
    "binary classifier on blobs": (_with(["jobs", 0, "dataset"], {"generator": "blobs", "rows": 100,
                                                                  "features": 3, "centers": 4}),
                                   ["jobs[0].dataset.generator", "'blobs'", "class labels 0..3",
                                    "labels must be 0 or 1", "use 'classification'"]),
    "lda on real-valued features": (_with(["jobs", 1], {"name": "b", "algorithm": "lda",
                                                        "dataset": {"generator": "blobs", "rows": 100,
                                                                    "features": 3}}),
                                    ["jobs[1].dataset.generator", "'blobs'", "counts >= 0",
                                     "use 'documents'"]),
    "classifier on regression targets": (_with(["jobs", 0, "dataset"], {"generator": "regression",
                                                                        "rows": 100, "features": 3}),
                                         ["jobs[0].dataset.generator", "real-valued targets"]),
    "supervised job on documents": (_with(["jobs", 0, "dataset"], {"generator": "documents", "rows": 100,
                                                                   "features": 30}),
                                    ["jobs[0].dataset.generator", "writes no labels"]),
    "mlp with fewer classes than the labels": (
        _with(["jobs", 0], {"name": "a", "algorithm": "mlp", "hyperparameters": {"classes": 3},
                            "dataset": {"generator": "blobs", "rows": 100, "features": 3, "centers": 4}}),
        ["jobs[0].hyperparameters.classes", "3", "labels go up to 3", "at least 4", "or 0"]),
    "model larger than any memory": (
        _with(["jobs", 0], {"name": "a", "algorithm": "mlp", "hyperparameters": {"hidden": 10**12},
                            "dataset": {"generator": "blobs", "rows": 100, "features": 3}}),
        ["jobs[0].hyperparameters.hidden", "1000000000000", "job 'a': mlp with hidden",
         "on every rank", "of memory", "hidden must be at most"]),
    "stop budget null": (_with(["jobs", 0, "stop"], {"max_iterations": None}),
                         ["jobs[0].stop.max_iterations", "None", "leave the key out"]),
    "stop tolerance null": (_with(["jobs", 0, "stop"], {"tolerance": None}),
                            ["jobs[0].stop.tolerance", "leave the key out"]),
    "stop not a mapping": (_with(["jobs", 0, "stop"], False), ["jobs[0].stop", "False", "mapping"]),
    "hyperparameters a list": (_with(["jobs", 0, "hyperparameters"], []),
                               ["jobs[0].hyperparameters", "[]", "mapping"]),
    "simulation a list": (_with(["simulation"], []), ["simulation", "[]", "mapping"]),
    "policy params a list": (_with(["policy"], {"name": "fair", "params": []}),
                             ["policy.params", "[]", "mapping"]),
    "seed too large": (_with(["seed"], 10**20), ["seed", "100000000000000000000", "[0, 9007199254740992]"]),
    "job seed too large": (_with(["jobs", 0, "seed"], 2**63), ["jobs[0].seed", "[0, 9223372036854775807]"]),
    "missing name": ({k: v for k, v in GOOD.items() if k != "name"}, ["name", "required"]),
    "jobs not a list": (_with(["jobs"], {"a": 1}), ["jobs", "non-empty list"]),
}


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("slaq: error: ")
    return lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_refused(case: str, tmp_path: Path) -> None:
    raw, needles = CASES[case]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    proc = run_slaq(["run", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_error_line(proc.stderr)
    for needle in needles:
        assert needle in line, (needle, line)
    assert "starting" not in proc.stdout  # no rank was launched
    assert not (tmp_path / "runs").exists()


def test_malformed_yaml(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\njobs: [\n  - {name: a\n")
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    assert "c.yaml:" in line and "YAML" in line


def test_yaml_nested_too_deeply_and_solvers_that_exit_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("seed: " + "[" * 5000 + "]" * 5000 + "\n")
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2
    assert "nested too deeply" in _one_error_line(proc.stderr)
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(3)\n")
    cfg.write_text(yaml.safe_dump(_with(["jobs", 0, "algorithm"], "quits.py:Solver")))
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2
    assert "jobs[0].algorithm" in _one_error_line(proc.stderr) and "SystemExit: 3" in proc.stderr
    proc = run_slaq(["validate", "y" * 300 + ".yaml"], cwd=tmp_path)
    assert proc.returncode == 2
    assert "the path is too long" in _one_error_line(proc.stderr)


def test_validate_counts_jobs_in_words(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    for jobs, words in ((GOOD["jobs"][:1], "'t', 1 job, 4 ranks"),
                        (GOOD["jobs"], f"'t', {len(GOOD['jobs'])} jobs, 4 ranks")):
        cfg.write_text(yaml.safe_dump({**GOOD, "jobs": jobs}))
        proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
        assert proc.returncode == 0 and words in proc.stdout, proc.stdout + proc.stderr


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    text = yaml.safe_dump(GOOD, sort_keys=False)
    cfg.write_text(text.replace("ranks: 4\n", "ranks: 4\nranks: 2\n"))
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    row = text.splitlines().index("ranks: 4") + 1
    assert f"c.yaml:{row + 1}:" in line and f"duplicate key 'ranks' (first at line {row})" in line


def test_binary_config_file(tmp_path: Path) -> None:
    data = tmp_path / "data.h5"
    data.write_bytes(b"\x89HDF\r\n\x1a\n\xff\xfe" * 8)
    proc = run_slaq(["validate", str(data)], cwd=tmp_path)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    assert "data.h5" in line and "YAML text file" in line


def test_missing_config_file(tmp_path: Path) -> None:
    proc = run_slaq(["validate", str(tmp_path / "nope.yaml")], cwd=tmp_path)
    assert proc.returncode == 2
    assert "nope.yaml" in _one_error_line(proc.stderr)


def test_good_config_validates(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "2 jobs" in proc.stdout


@pytest.mark.parametrize("command", [["validate"], ["run"], ["submit", "--dry-run"], ["simulate"]])
@pytest.mark.parametrize(("section", "key"), [("simulation", "bogus"), ("slurm", "partitionn")])
def test_every_command_checks_the_simulation_and_slurm_sections(command: list[str], section: str,
                                                                key: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with([section], {key: 1})))
    proc = run_slaq([*command, str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_error_line(proc.stderr)
    assert f"{section}.{key}" in line or (section in line and key in line), line
    assert not (tmp_path / "runs").exists()  # refused before anything started


def test_a_live_run_is_not_held_to_what_only_submit_or_simulate_need(tmp_path: Path) -> None:
    """No slurm: section: no Slurm default (1 h, a warning 3 epochs ahead) applies to a run;
    a curve library missing here matters to `slaq simulate` only."""
    from slaq_mpi.config import experiment as config

    for changes in ({"epoch_seconds": 1500}, {"simulation": {"curve_file": "libs/mine.npz"}}):
        raw = {**_with(["output_dir"], str(tmp_path / "run")), **changes}
        config.parse(raw)  # as slaq run reads it: both sections validated, no curve file read
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "libs/mine.npz"})))
    _refused(run_slaq(["simulate", str(cfg)], cwd=tmp_path), "simulation.curve_file", "does not exist")


def test_validate_notes_a_simulation_only_policy(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["policy"], "oracle")))
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout and "`slaq simulate` only" in proc.stdout


@pytest.mark.mpi
def test_more_ranks_than_launched(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["ranks"], 6)))
    proc = run_mpi(2, ["-m", "slaq_mpi", "run", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_error_line(proc.stderr)
    assert "ranks" in line and "6" in line and "only 2" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.mpi
def test_a_run_directory_in_use_ends_every_rank(tmp_path: Path) -> None:
    # inside an MPI launch only rank 0 finds out; the other ranks must end too, not wait forever
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["ranks"], 3)))
    lock = rundir.lock_path(tmp_path / "runs" / "t")
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.write("pid 1 on elsewhere\n")
        fh.flush()
        proc = run_mpi(3, ["-m", "slaq_mpi", "run", str(cfg)], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_error_line(proc.stderr)
    assert "another slaq run is using it (pid 1 on elsewhere)" in line
    assert not (tmp_path / "runs" / "t").exists()


def _refused(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _one_error_line(proc.stderr)
    for needle in needles:
        assert needle in line, (needle, line)


def test_report_and_sim_check_refuse_what_is_not_a_run(tmp_path: Path) -> None:
    import h5py

    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("X", data=[[1.0]])
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "metrics.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)  # truncated
    (tmp_path / "empty").mkdir()
    _refused(run_slaq(["report", str(other)], cwd=tmp_path), "other.h5", "not a slaq metrics file")
    _refused(run_slaq(["report", str(fake), "--no-plots"], cwd=tmp_path), "metrics.h5", "damaged")
    _refused(run_slaq(["sim-check", str(tmp_path / "empty")], cwd=tmp_path), "empty/metrics.h5",
             "no such file")
    _refused(run_slaq(["sim-check", str(tmp_path / "missing")], cwd=tmp_path), "missing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "fake", "other.h5"]


def test_missing_curve_file_is_refused_by_validate(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "nope.npz"})))
    for cmd in ("validate", "simulate"):
        _refused(run_slaq([cmd, str(cfg)], cwd=tmp_path), "simulation.curve_file", "'nope.npz'",
                 "does not exist")
    (tmp_path / "bad.npz").write_text("not a zip")
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "bad.npz"})))
    for cmd in ("validate", "simulate"):  # validate checks what simulate will read
        proc = run_slaq([cmd, str(cfg)], cwd=tmp_path)
        _refused(proc, "simulation.curve_file", "'bad.npz'", "not a curve library")
        assert "pickle" not in proc.stderr  # numpy's own words about the bytes are no help
    (tmp_path / "lib").mkdir()
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "lib"})))
    _refused(run_slaq(["validate", str(cfg)], cwd=tmp_path), "simulation.curve_file", "is a directory")


def test_run_refuses_a_missing_mpiexec(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    proc = run_slaq(["run", str(cfg), "--mpiexec", "/nonexistent/mpiexec"], cwd=tmp_path)
    _refused(proc, "--mpiexec", "/nonexistent/mpiexec", "executable")
    assert not (tmp_path / "runs").exists()


def test_data_commands_refuse_outputs_they_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "outdir").mkdir()
    (tmp_path / "in.csv").write_text("a,b,y\n1,2,0\n3,4,1\n")
    make = ["data", "make", "blobs", "--rows", "10", "--features", "2"]
    _refused(run_slaq([*make[:3], "outdir", *make[3:]], cwd=tmp_path), "out", "'outdir'", "directory")
    _refused(run_slaq([*make[:3], "in.csv/x.h5", *make[3:]], cwd=tmp_path), "out", "'in.csv/x.h5'",
             "cannot be written", "in.csv is not a writable directory")
    _refused(run_slaq(["data", "convert", "in.csv", "outdir"], cwd=tmp_path), "'outdir'", "directory")
    _refused(run_slaq(["data", "convert", "in.csv", "o.h5", "--labels", "y.npy"], cwd=tmp_path),
             "--labels", ".npy input only")
    _refused(run_slaq(["data", "make", "documents", "d.h5", "--rows", "5", "--features", "9",
                       "--alpha", "0"], cwd=tmp_path), "--alpha", "> 0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "outdir"]
    assert not any((tmp_path / "outdir").iterdir())


def test_numbers_in_exponent_form_without_a_dot_are_numbers(tmp_path: Path) -> None:
    from slaq_mpi.config.experiment import load
    from slaq_mpi.errors import ConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\nepoch_seconds: 5e-1\njobs:\n  - {name: a, algorithm: logreg, "
                   "hyperparameters: {l2: 1e-4}, stop: {tolerance: 2E-3},\n"
                   "     dataset: {generator: classification, rows: 100, features: 3}}\n")
    spec = load(cfg, check_files=False)
    assert spec.epoch_seconds == 0.5
    assert spec.jobs[0].hyperparameters["l2"] == 1e-4 and spec.jobs[0].stop.tolerance == 2e-3
    cfg.write_text(cfg.read_text().replace("l2: 1e-4", "l2: '1e-4'"))  # quoted: text, refused
    with pytest.raises(ConfigError, match="l2"):
        load(cfg, check_files=False)


def test_yaml_merge_keys_still_work_and_may_be_overridden(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: t\nranks: 4\nseed: 1\npolicy: fair\nepoch_seconds: 0.5\n"
        "jobs:\n"
        "  - &base {name: a, algorithm: logreg,\n"
        "           dataset: {generator: classification, rows: 100, features: 3}}\n"
        "  - <<: *base\n"
        "    name: b\n")
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 jobs" in proc.stdout


@pytest.mark.parametrize(("text", "needles"), [
    ("name: t\n[1, 2]: 3\n", ["c.yaml", "unhashable"]),
    ("name: t\nranks: 4\njobs:\n  - {name: a, algorithm: kmeans, hyperparameters: {k: 1" + "0" * 400
     + "}, dataset: {generator: blobs, rows: 100, features: 3}}\n",
     ["jobs[0].hyperparameters.k", "at most the dataset's 100 rows"]),
    ("name: t\nranks: 4\njobs:\n  - {name: a, algorithm: kmeans,"
     " dataset: {generator: blobs, rows: 5, features: 3}}\n",
     ["jobs[0].hyperparameters.k", "8", "at most the dataset's 5 rows", "the default; set it"]),
])
def test_odd_yaml_is_one_line(text: str, needles: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    _refused(run_slaq(["validate", str(cfg)], cwd=tmp_path), *needles)


def test_a_npy_file_is_not_a_curve_library(tmp_path: Path) -> None:
    import numpy as np

    np.save(tmp_path / "curves.npy", np.arange(3.0))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "curves.npy"})))
    _refused(run_slaq(["simulate", str(cfg)], cwd=tmp_path), "curves.npy", "not a curve library")


def test_a_truncated_curve_library_is_refused_in_one_line(tmp_path: Path) -> None:
    from slaq_mpi.sim.curves import DEFAULT_LIBRARY

    (tmp_path / "cut.npz").write_bytes(DEFAULT_LIBRARY.read_bytes()[:1000])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "cut.npz"})))
    _refused(run_slaq(["simulate", str(cfg)], cwd=tmp_path), "cut.npz", "not a curve library")
    _refused(run_slaq(["curves", "record", "--algorithm", "linreg", "--out", "cut.npz"], cwd=tmp_path),
             "cut.npz", "not a curve library")


@pytest.mark.parametrize(("key", "value"), [("mix", {"a": 1e308, "b": 1e308}), ("mean_gap", 1e308),
                                            ("start", 1e12)])
def test_workload_numbers_beyond_any_experiment_are_refused(key: str, value: object,
                                                            tmp_path: Path) -> None:
    workload = {"jobs": 4, "mean_gap": 1.0, key: value}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["simulation"], {"workload": workload})))
    for cmd in ("validate", "simulate"):
        _refused(run_slaq([cmd, str(cfg)], cwd=tmp_path), f"simulation.workload.{key}", "<= 1e+09")


def test_simulate_out_is_checked_before_anything_moves(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    old = tmp_path / "sim"
    (old / "fair").mkdir(parents=True)
    (old / "fair" / "metrics.h5").write_text("earlier")
    for out in (".", str(tmp_path)):  # the current directory (or above) is never moved
        _refused(run_slaq(["simulate", str(cfg), "--out", out], cwd=tmp_path), "--out",
                 "directory of its own")
    _refused(run_slaq(["simulate", str(cfg), "--out", "c.yaml/sim"], cwd=tmp_path), "--out",
             "'c.yaml/sim'", "c.yaml is not a writable directory")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(["simulation"], {"curve_file": "nope.npz"})))
    _refused(run_slaq(["simulate", str(bad), "--out", "sim"], cwd=tmp_path), "curve_file")
    with open(rundir.lock_path(old), "a+") as fh:  # a run or simulation is writing there
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        _refused(run_slaq(["simulate", str(cfg), "--out", "sim"], cwd=tmp_path),
                 "--out", "another slaq run is using it")
    _refused(run_slaq(["simulate", str(cfg), "--out", "/proc/slaq-sim"], cwd=tmp_path),
             "--out: '/proc/slaq-sim'", "cannot create its lock file")
    assert (old / "fair" / "metrics.h5").read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "bad.yaml", "c.yaml", "sim"]


def test_sim_check_out_never_replaces_the_real_run(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    assert run_slaq(["simulate", str(cfg), "--out", "sim"], cwd=tmp_path).returncode == 0
    import h5py

    with h5py.File(tmp_path / "sim" / "fair" / "metrics.h5", "r+") as f:
        f.attrs["mode"] = "run"  # sim-check refuses a simulated run: this one passes as real
    before = (tmp_path / "sim" / "fair" / "metrics.h5").read_bytes()
    for out in ("sim/fair", "sim"):
        _refused(run_slaq(["sim-check", "sim/fair", "--out", out], cwd=tmp_path), "--out",
                 "must not be the real run's directory")
    assert (tmp_path / "sim" / "fair" / "metrics.h5").read_bytes() == before


def test_resume_refuses_an_edited_config(tmp_path: Path) -> None:
    import json

    import h5py

    run = tmp_path / "runs" / "t"
    run.mkdir(parents=True)
    text = yaml.safe_dump(GOOD, sort_keys=False)
    (run / "state.json").write_text(json.dumps({"epoch": 3, "elapsed": 2.0, "finished": False}))
    with h5py.File(run / "metrics.h5", "w") as f:
        f.attrs["config"] = text
    edited = yaml.safe_load(text)
    edited["jobs"].append({"name": "c", "algorithm": "logreg",
                           "dataset": {"generator": "classification", "rows": 100, "features": 3}})
    (run / "config.yaml").write_text(yaml.safe_dump(edited, sort_keys=False))
    _refused(run_slaq(["run", "--resume", str(run)], cwd=tmp_path), "--resume", "config.yaml differs",
             "restore it")
    assert (run / "state.json").is_file() and not list(tmp_path.glob("runs/t.*"))


SOLVER_FILE = '''
import numpy as np
from jobs.base import Solver, Allowed


class Plain:
    defaults = {}
    convergence = "linear"

    def step(self):
        return 0.0


class Quadratic(Solver):
    convergence = "quadratic"
    defaults = {"step": 0.5}


class Misnamed(Solver):
    defaults = {"step": 0.5}
    allowed = {"stepp": Allowed(lo=0)}


class Miscounted(Solver):
    defaults = {"step": 0.5}
    feature_kind = "count"


class Uncounted(Solver):
    defaults = {"step": 0.5}
    class_count = "classes"
'''


@pytest.mark.parametrize(("ref", "needles"), [
    ("solver.py:Plain", ["not a subclass of jobs.Solver"]),
    ("solver.py:np", ["not a subclass of jobs.Solver"]),
    ("solver.py:Quadratic", ["convergence is 'quadratic'", "sublinear, linear"]),
    ("solver.py:Misnamed", ["allowed names stepp"]),
    ("solver.py:Uncounted", ["class_count names classes"]),
    ("solver.py:Miscounted", ["feature_kind is 'count'", "'counts'"]),
    ("solver.py:Nope", ["solver.py defines no 'Nope'"]),
    ("solver.py:Solver", ["is abstract", "does not define", "step"]),
    ("broken.py:X", ["ZeroDivisionError"]),
])
def test_a_user_solver_that_cannot_work_is_refused(ref: str, needles: list[str], tmp_path: Path) -> None:
    (tmp_path / "solver.py").write_text(SOLVER_FILE)
    (tmp_path / "broken.py").write_text("x = 1 / 0\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["jobs", 1, "algorithm"], ref)))
    _refused(run_slaq(["validate", str(cfg)], cwd=tmp_path), "jobs[1].algorithm", ref,
             "does not load", *needles)


def test_a_run_directory_given_as_the_config_points_to_resume(tmp_path: Path) -> None:
    (tmp_path / "runs" / "t").mkdir(parents=True)
    (tmp_path / "runs" / "t" / "state.json").write_text("{}")
    _refused(run_slaq(["run", "runs/t"], cwd=tmp_path), "config file", "is a run directory",
             "slaq run --resume runs/t")


def test_an_output_dir_holding_the_runs_data_is_refused(tmp_path: Path) -> None:
    from slaq_mpi.data.datasets import DatasetSpec
    from slaq_mpi.data.generators import generate

    generate(DatasetSpec(generator="classification", params={"rows": 50, "features": 3}),
             tmp_path / "exp" / "train.h5", 1)
    raw = _with(["jobs", 0, "dataset"], {"path": "exp/train.h5"})
    raw["output_dir"] = "exp"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    for cmd in (["validate", str(cfg)], ["run", str(cfg)]):
        _refused(run_slaq(cmd, cwd=tmp_path), "output_dir", "exp/train.h5, which this run reads")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "exp"]  # nothing moved


def test_a_user_solver_may_import_modules_beside_it_or_from_the_working_directory(
        tmp_path: Path) -> None:
    (tmp_path / "solvers").mkdir()
    (tmp_path / "solvers" / "helper_beside.py").write_text("STEP = 0.5\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "consts.py").write_text("DEFAULTS = {'step': 0.5}\n")
    (tmp_path / "solvers" / "mine.py").write_text(
        "import helper_beside\nfrom mypkg.consts import DEFAULTS\nfrom jobs.base import Solver\n\n\n"
        "class Mine(Solver):\n    convergence = 'linear'\n    defaults = dict(DEFAULTS)\n"
        "    needs_labels = False\n\n"
        "    def step(self):\n        return helper_beside.STEP\n\n"
        "    def get_state(self):\n        return {}\n\n"
        "    def set_state(self, state):\n        pass\n")
    cfg = tmp_path / "c.yaml"
    raw = _with(["jobs", 1, "algorithm"], "solvers/mine.py:Mine")
    del raw["jobs"][1]["hyperparameters"]
    cfg.write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    slaq = Path(sys.executable).parent / "slaq"  # the console script: no working directory on sys.path
    proc = subprocess.run([str(slaq), "validate", str(cfg)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every rank runs `python -m slaq_mpi`, which puts the working directory first on sys.path:
    # a jobs.py of the user's there must not shadow our jobs package, and the solver still loads
    (tmp_path / "jobs.py").write_text("raise SystemExit('the jobs.py of the working directory')\n")
    for argv in ([sys.executable, "-m", "slaq_mpi"], [str(slaq)]):
        proc = subprocess.run([*argv, "validate", str(cfg)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_data_that_cannot_fit_on_the_disk_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    rows = int(2 * free / (11 * 8))  # 10 features and a label: 88 bytes a row; twice the space
    raw = _with(["jobs", 0, "dataset"], {"generator": "classification", "rows": rows, "features": 10})
    raw["output_dir"] = str(tmp_path / "run")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    _refused(run_slaq(["run", str(cfg)], cwd=tmp_path), "generated datasets", "GB free under")
    valid = run_slaq(["validate", str(cfg)], cwd=tmp_path)  # maybe a config for simulate only
    assert valid.returncode == 0 and "note: slaq run would refuse it here" in valid.stdout, valid.stdout
    _refused(run_slaq(["data", "make", "classification", str(tmp_path / "x.h5"), "--rows", str(rows),
                       "--features", "10"], cwd=tmp_path), "data make OUT", "GB free under")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_dataset_shared_by_jobs_counts_once_against_the_disk(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    from collections import namedtuple

    from slaq_mpi.config.experiment import check_data_space, parse
    from slaq_mpi.errors import ConfigError

    one = {"generator": "classification", "rows": 1000, "features": 9, "seed": 1}  # 80 kB
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 0, 120_000))
    raw = _with(["jobs"], [{"name": n, "algorithm": "logreg", "dataset": one} for n in ("a", "b")])
    raw["output_dir"] = str(tmp_path / "run")
    check_data_space(parse(raw, check_files=False))  # one file of 80 kB: fits in 120 kB
    raw["jobs"][1]["dataset"] = {**one, "seed": 2}  # two files: 160 kB
    with pytest.raises(ConfigError, match="generated datasets"):
        check_data_space(parse(raw, check_files=False))


def test_run_refuses_a_config_and_resume_together(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    _refused(run_slaq(["run", str(cfg), "--resume", str(tmp_path)], cwd=tmp_path), "not both")


@pytest.mark.parametrize(("classes", "ok"), [(2, False), (3, True), (0, True)])
def test_mlp_classes_are_checked_against_a_data_files_labels(classes: int, ok: bool,
                                                              tmp_path: Path) -> None:
    import h5py
    import numpy as np

    with h5py.File(tmp_path / "three.h5", "w") as f:
        f["X"] = np.random.default_rng(0).normal(size=(30, 4))
        f["y"] = np.arange(30) % 3  # labels 0, 1, 2
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "t", "ranks": 2, "output_dir": str(tmp_path / "run"),
        "jobs": [{"name": "m", "algorithm": "mlp", "hyperparameters": {"classes": classes},
                  "dataset": {"path": str(tmp_path / "three.h5")}}]}))
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        _refused(proc, "jobs[0].hyperparameters.classes", "labels go up to 2", "at least 3")


def _finished_run(tmp_path: Path, status: str) -> Path:
    """A finished run of GOOD in tmp_path/runs/t whose job b ended with ``status``."""
    import json

    import h5py
    import numpy as np

    run = tmp_path / "runs" / "t"
    run.mkdir(parents=True)
    text = yaml.safe_dump(GOOD, sort_keys=False)
    (run / "config.yaml").write_text(text)
    (run / "state.json").write_text(json.dumps({"epoch": 9, "elapsed": 15.0, "finished": True}))
    (run / "STOP").touch()  # left over: must not turn the answer into "stopped"
    with h5py.File(run / "metrics.h5", "w") as f:
        f.attrs["config"] = text
        for name in ("a", "b"):
            g = f.create_group(f"jobs/{name}")
            for key in ("loss", "time", "iter_seconds"):
                g[key] = np.zeros(0)
            g["cores"] = np.zeros(0, dtype="i4")
            g.attrs["status"] = status if name == "b" else "done"
        epochs = f.create_group("epochs")
        epochs["time"] = np.zeros(0)
        epochs["alloc"] = np.zeros((0, 2), dtype="i4")
    return run


@pytest.mark.parametrize(("status", "code"), [("done", 0), ("failed", 1)])
def test_resuming_a_finished_run_launches_nothing(status: str, code: int, tmp_path: Path) -> None:
    run = _finished_run(tmp_path, status)
    before = (run / "state.json").read_text()
    proc = run_slaq(["run", "--resume", str(run), "--mpiexec", "/nonexistent"], cwd=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "has finished; nothing to resume" in proc.stdout and "starting" not in proc.stdout
    assert (run / "state.json").read_text() == before


@pytest.mark.mpi
@pytest.mark.parametrize(("status", "code"), [("done", 0), ("failed", 1)])
def test_resuming_a_finished_run_inside_a_launch_ends_every_rank(status: str, code: int,
                                                                 tmp_path: Path) -> None:
    """As the batch script does (srun ... slaq run --resume): the ranks must not run on and
    rewrite the finished run's state.json (a cancel then marked it unfinished)."""
    run = _finished_run(tmp_path, status)
    before = (run / "state.json").read_text(), (run / "metrics.h5").read_bytes()
    proc = run_mpi(GOOD["ranks"], ["-m", "slaq_mpi", "run", "--resume", str(run)], cwd=tmp_path, timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stdout.count("has finished; nothing to resume") == 1, proc.stdout
    assert ((run / "state.json").read_text(), (run / "metrics.h5").read_bytes()) == before


def test_data_make_out_of_range_options_are_one_line(tmp_path: Path) -> None:
    make = ["data", "make", "blobs", "m.h5", "--rows", "10", "--features", "2"]
    _refused(run_slaq([*make, "--centers", "0"], cwd=tmp_path), "--centers", "0", "integer >= 1")
    make[2] = "classification"
    _refused(run_slaq([*make, "--seed", "-1"], cwd=tmp_path), "--seed", "-1", "integer >= 0")
    assert list(tmp_path.iterdir()) == []


def test_validate_names_the_bad_policy_parameter(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_with(["policy"], {"name": "goodput", "params": {"p": 3}})))
    _refused(run_slaq(["validate", str(cfg)], cwd=tmp_path), "policy", "'goodput'",
             "p must be a finite number <= 1 (got 3)")


NODE_LOCAL_SOLVER = '''
import os

from jobs.logreg import LogisticRegression

rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
if rank == "2":  # as if this rank's node had an older copy of the file
    raise ImportError("no module named 'sklearn'" + os.environ.get("PADDING", ""))


class Mine(LogisticRegression):
    pass
'''


@pytest.mark.mpi
@pytest.mark.parametrize("padding", [0, 50_000], ids=["short", "longer than an MPI receive buffer"])
def test_a_config_only_some_ranks_refuse_is_reported_with_their_reason(tmp_path: Path,
                                                                       padding: int) -> None:
    """Rank 0 accepts the config but rank 2 cannot load the job's solver: the one line names
    rank 2, its host and its own reason, and every rank ends with status 2."""
    (tmp_path / "mine.py").write_text(NODE_LOCAL_SOLVER)
    cfg = _with(["jobs", 0, "algorithm"], "mine.py:Mine")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = run_mpi(GOOD["ranks"], ["-m", "slaq_mpi", "run", "c.yaml"], cwd=tmp_path, timeout=120,
                   env={"PADDING": "." * padding})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("slaq: error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("slaq: error: rank 2 on "), errors[0]
    assert "no module named 'sklearn'" in errors[0] and "rank 0 on " in errors[0], errors[0]
    assert not (tmp_path / "runs").exists()


def test_key_and_syntax_errors_read_as_one_exact_line(tmp_path: Path) -> None:
    (tmp_path / "u.yaml").write_text(yaml.safe_dump(_with(["epochs"], 3)))
    proc = run_slaq(["validate", "u.yaml"], cwd=tmp_path)
    assert proc.returncode == 2 and _one_error_line(proc.stderr) == (
        "slaq: error: epochs: unknown key; allowed keys: epoch_seconds, jobs, name, open, output_dir, "
        "policy, ranks, seed, simulation, slurm"), proc.stderr
    (tmp_path / "s.yaml").write_text("name: t\njobs: [\n")
    proc = run_slaq(["validate", "s.yaml"], cwd=tmp_path)
    assert proc.returncode == 2 and _one_error_line(proc.stderr) == (
        "slaq: error: s.yaml:3:1 YAML syntax: expected the node content, but found '<stream end>'; "
        "the file must be valid YAML"), proc.stderr
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(_with(["policy"], {"name": "goodput",
                                                                       "params": {"p": "x"}})))
    _refused(run_slaq(["validate", "p.yaml"], cwd=tmp_path),
             "parameter p is 'x'; it must be a finite number (docs/policies.md gives each "
             "parameter's range)")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_resume_refuses_a_run_whose_history_is_gone_before_any_rank_starts(damage: str,
                                                                          tmp_path: Path) -> None:
    import json

    run = tmp_path / "runs" / "t"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(GOOD, sort_keys=False))
    (run / "state.json").write_text(json.dumps({"epoch": 3, "elapsed": 2.0, "finished": False}))
    if damage == "truncated":
        (run / "metrics.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(600))
    proc = run_slaq(["run", "--resume", str(run)], cwd=tmp_path)
    _refused(proc, "--resume", "its metrics.h5 holds the run's history",
             "missing" if damage == "missing" else "cannot be read")
    assert "rank" not in proc.stdout + proc.stderr  # refused before the launch
    assert sorted(p.name for p in run.iterdir()) == sorted(
        ["config.yaml", "state.json"] + (["metrics.h5"] if damage == "truncated" else []))


def test_validate_accepts_what_run_accepts_and_notes_what_only_submit_refuses(tmp_path: Path) -> None:
    """No slurm: section: Slurm's default 1 h limit (with a warning 3 epochs ahead) leaves no
    room for 1,500 s epochs; run and simulate take the config, so validate does, with a note."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**_with(["epoch_seconds"], 1500)}))
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{cfg}: note: slaq submit would refuse it (no slurm: section" in proc.stdout, proc.stdout
    assert "slurm.time" in proc.stdout, proc.stdout
    with_section = {**_with(["epoch_seconds"], 1500), "slurm": {"time": "00:30:00"}}
    cfg.write_text(yaml.safe_dump(with_section))
    _refused(run_slaq(["validate", str(cfg)], cwd=tmp_path), "slurm.time")  # a section given: checked


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda raw: raw.pop("name"), "name: this key is required"),
    (lambda raw: raw["jobs"][0]["dataset"].pop("rows"), "jobs[0].dataset.rows: is required"),
    (lambda raw: raw["jobs"][0]["dataset"].pop("generator"),
     "jobs[0].dataset.generator: give a generator (blobs, "),
    (lambda raw: raw["jobs"][0].update(utility={"deadline": 5}),
     "jobs[0].utility.value: this key is required"),
    (lambda raw: raw.update(simulation={"workload": {"jobs": 3}}),
     "simulation.workload.mean_gap: this key is required"),
    (lambda raw: raw.update(simulation={"workload": {"mean_gap": 3}}),
     "simulation.workload.jobs: this key is required"),
    (lambda raw: raw.update(simulation={"nodes": 2}), "simulation.cores_per_node: this key is required"),
])
def test_a_missing_key_is_named_without_a_value_the_user_never_wrote(edit, needle: str,
                                                                     tmp_path: Path) -> None:
    from slaq_mpi.config import experiment as config
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.sim.settings import parse_settings

    raw = yaml.safe_load(yaml.safe_dump(GOOD))
    edit(raw)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        spec = config.load(cfg, check_files=False)
        parse_settings(spec)
    assert str(err.value).startswith(needle), str(err.value)
    assert "None" not in str(err.value)


def test_a_launcher_killed_by_a_signal_gives_the_shells_status_and_one_line(tmp_path: Path) -> None:
    """`slaq run cfg | head -1`: mpiexec dies of SIGPIPE once the run has begun; slaq says so
    and exits 141 (128 + SIGPIPE), as a shell would report it."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(GOOD))
    fake = tmp_path / "mpiexec"
    lock = tmp_path / "runs" / ".t.lock"  # output_dir runs/t: rank 0 writes its pid here as it starts
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = -n ] || exit 0\n"  # not asked for its --version
                    f"mkdir -p '{lock.parent}'\necho 'pid 1 on here' > '{lock}'\nkill -PIPE $$\n")
    fake.chmod(0o755)
    proc = run_slaq(["run", str(cfg), "--mpiexec", str(fake)], cwd=tmp_path)
    assert proc.returncode == 141, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"slaq: {fake} was killed by SIGPIPE (the "
                                                           "reader of its output went away)"), proc.stderr
    fake.write_text("#!/bin/sh\nkill -TERM $$\n")  # before any rank started: named, not a number
    proc = run_slaq(["run", str(cfg), "--mpiexec", str(fake)], cwd=tmp_path)
    assert proc.returncode == 3 and f"{fake} was killed by SIGTERM before the run started" in proc.stderr


def test_solver_kinds_give_hints_that_help(tmp_path: Path) -> None:
    """A refused generator is never the one suggested; curves record refuses a dataset_kind it
    has no data for, before recording anything."""
    (tmp_path / "odd.py").write_text(
        "from jobs.logreg import LogisticRegression\n\n"
        "class Binary(LogisticRegression):\n    dataset_kind = 'regression'\n\n"
        "class Images(LogisticRegression):\n    dataset_kind = 'images'\n")
    raw = _with(["jobs", 0, "algorithm"], "odd.py:Binary")
    raw["jobs"][0]["dataset"] = {"generator": "regression", "rows": 100, "features": 3}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    line = _one_error_line(run_slaq(["validate", str(cfg)], cwd=tmp_path).stderr)
    assert "jobs[0].dataset.generator: 'regression'" in line and "use 'regression'" not in line, line
    proc = run_slaq(["curves", "record", "--algorithm", "odd.py:Images", "--out", "lib.npz"], cwd=tmp_path)
    assert proc.returncode == 2 and "dataset_kind 'images'" in _one_error_line(proc.stderr)
    assert not (tmp_path / "lib.npz").exists()
