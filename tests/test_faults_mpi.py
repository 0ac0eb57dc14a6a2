"""Fault tolerance under real mpiexec: graceful stop and resume, SIGKILL of a worker,
corrupt checkpoints, failing solvers."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from jobs import SerialComm, load_solver
from slaq_mpi.config.experiment import load
from slaq_mpi.data.datasets import read_shard
from slaq_mpi.data.generators import materialize
from tests.conftest import ROOT, ROOT_OK, mpiexec_path, open_mpi, run_slaq

pytestmark = pytest.mark.mpi


def _config(tmp_path: Path, **changes: object) -> Path:
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    raw["output_dir"] = str(tmp_path / "run")
    raw.update(changes)
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _start(cfg: Path, cwd: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, **ROOT_OK, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "slaq_mpi", "run", *extra, str(cfg)], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_epochs(run: Path, proc: subprocess.Popen[str], epochs: int, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = run / "state.json"
        if state.exists():
            try:
                if json.loads(state.read_text())["epoch"] >= epochs:
                    return
            except (json.JSONDecodeError, KeyError):
                pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    pytest.fail("the run did not get going")


def _reference_losses(cfg: Path, job_name: str, n: int, tmp_path: Path) -> np.ndarray:
    """The job's first n losses on one fixed rank, run serially."""
    spec = load(cfg)
    job = next(j for j in spec.jobs if j.name == job_name)
    data = materialize(job.dataset, tmp_path / "refdata", job.seed)
    solver = load_solver(job.algorithm)(SerialComm(), read_shard(data, 0, 1), job.hyperparameters, job.seed)
    return np.array([solver.step() for _ in range(n)])


def _check_equal_to_reference(cfg: Path, run: Path, tmp_path: Path) -> None:
    with h5py.File(run / "metrics.h5") as f:
        for name, g in f["jobs"].items():
            assert g.attrs["status"] == "done", (name, g.attrs["status"], g.attrs["reason"])
            loss = g["loss"][()]
            ref = _reference_losses(cfg, name, len(loss), tmp_path)
            rel = np.max(np.abs(loss - ref) / np.abs(ref))
            assert rel <= 1e-9, f"{name}: relative difference {rel:.2e}"


def _resume_points(stdout: str) -> dict[str, tuple[int, int]]:
    found = re.findall(r"job (\S+): continues from iteration (\d+) \((\d+) recorded", stdout)
    return {name: (int(k), int(redo)) for name, k, redo in found}


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGINT])
def test_signal_stops_then_resume_finishes_exactly(tmp_path: Path, signum: int) -> None:
    cfg = _config(tmp_path)
    run = tmp_path / "run"
    proc = _start(cfg, tmp_path)
    _wait_epochs(run, proc, 4)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, out + err
    # Open MPI's mpiexec kills ranks on SIGINT: slaq run passes the stop on as SIGUSR1
    seen = "SIGUSR1" if open_mpi(mpiexec_path() or "") else signal.Signals(signum).name
    assert f"received {seen}: stopping" in out and "slaq run --resume" in out
    assert not json.loads((run / "state.json").read_text())["finished"]
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    points = _resume_points(res.stdout)
    assert points, res.stdout
    for name, (k, redo) in points.items():
        assert k > 0, f"{name} started again from iteration 0"
        assert redo == 0, f"{name}: a graceful stop must not lose iterations"
    _check_equal_to_reference(cfg, run, tmp_path)


def test_resume_from_another_directory_reads_relative_paths_where_the_run_started(tmp_path: Path) -> None:
    from slaq_mpi.data.datasets import DatasetSpec
    from slaq_mpi.data.generators import generate

    proj, elsewhere = tmp_path / "proj", tmp_path / "else" / "where"
    (proj / "solvers").mkdir(parents=True)
    elsewhere.mkdir(parents=True)
    (proj / "solvers" / "faulty.py").write_text((ROOT / "tests" / "solvers" / "faulty.py").read_text())
    generate(DatasetSpec(generator="classification", params={"rows": 8000, "features": 10}),
             proj / "train.h5", 4)
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    raw["output_dir"] = "run"
    raw["jobs"].append({"name": "mine", "algorithm": "solvers/faulty.py:RaisesAt",
                        "hyperparameters": {"at": 10**6}, "arrival": 0, "dataset": {"path": "train.h5"},
                        "stop": {"max_iterations": 2000}})
    (proj / "exp.yaml").write_text(yaml.safe_dump(raw))
    proc = _start(Path("exp.yaml"), proj)
    _wait_epochs(proj / "run", proc, 3)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, out + err
    res = run_slaq(["run", "--resume", "../../proj/run"], cwd=elsewhere, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"resuming in {proj}" in res.stdout, res.stdout
    assert _resume_points(res.stdout).get("mine", (0, 0))[0] > 0, res.stdout
    with h5py.File(proj / "run" / "metrics.h5") as f:
        assert {n: g.attrs["status"] for n, g in f["jobs"].items()} == dict.fromkeys(f["jobs"], "done")
    assert not (elsewhere / "run").exists() and list(elsewhere.iterdir()) == []


def test_resume_refuses_a_data_file_that_changed_since_the_start(tmp_path: Path) -> None:
    import shutil

    from slaq_mpi.data.datasets import DatasetSpec
    from slaq_mpi.data.generators import generate

    data = tmp_path / "train.h5"
    spec = DatasetSpec(generator="classification", params={"rows": 8000, "features": 10})
    generate(spec, data, 4)
    shutil.copy2(data, tmp_path / "kept.h5")
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    raw["jobs"].append({"name": "mine", "algorithm": "logreg", "arrival": 0, "dataset": {"path": str(data)},
                        "stop": {"max_iterations": 5000}})
    cfg = _config(tmp_path, jobs=raw["jobs"])
    proc = _start(cfg, tmp_path)
    _wait_epochs(tmp_path / "run", proc, 3)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, out + err
    generate(spec, data, 5)  # the same shape, other numbers: `slaq data make` again, say
    res = run_slaq(["run", "--resume", str(tmp_path / "run")], cwd=tmp_path, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "job mine's data file" in res.stderr and "changed since the run started" in res.stderr
    assert "starting" not in res.stdout  # refused before any rank started
    shutil.copy(tmp_path / "kept.h5", data)  # restored (a new modification time is fine)
    res = run_slaq(["run", "--resume", str(tmp_path / "run")], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_sigkill_of_a_worker_then_resume(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    run = tmp_path / "run"
    proc = _start(cfg, tmp_path)
    _wait_epochs(run, proc, 5)
    workers = subprocess.run(["pgrep", "-f", f"slaq_mpi run {cfg}"], capture_output=True, text=True)
    pids = sorted(int(p) for p in workers.stdout.split())
    # The processes are: this test's `slaq run`, mpiexec's python ranks (coordinator first).
    ranks = [p for p in pids if p != proc.pid]
    assert len(ranks) >= 4, workers.stdout
    victim = random.Random(7).choice(ranks[1:])
    os.kill(victim, signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    with h5py.File(run / "metrics.h5") as f:
        recorded = {n: len(g["loss"]) for n, g in f["jobs"].items()}
        per_epoch = {n: max(1, int(np.bincount(np.searchsorted(f["epochs/time"][()], g["time"][()]))
                                   .max())) if len(g["time"]) else 0 for n, g in f["jobs"].items()}
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    for name, (k, redo) in _resume_points(res.stdout).items():
        assert recorded[name] - k == redo
        assert redo <= per_epoch[name], f"{name}: {redo} iterations redone, more than one epoch"
    _check_equal_to_reference(cfg, run, tmp_path)


def test_corrupt_newest_checkpoint_uses_previous(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    run = tmp_path / "run"
    proc = _start(cfg, tmp_path)
    _wait_epochs(run, proc, 4)
    proc.send_signal(signal.SIGUSR1)
    proc.communicate(timeout=120)
    assert proc.returncode == 75
    job_dirs = [d for d in (run / "checkpoints").iterdir() if len(list(d.glob("*.h5"))) == 2]
    assert job_dirs, "no job has two checkpoints yet"
    newest = sorted(job_dirs[0].glob("*.h5"))[-1]
    previous = sorted(job_dirs[0].glob("*.h5"))[0]
    newest.write_bytes(newest.read_bytes()[:200])
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "corrupt checkpoint" in ln]
    assert len(lines) == 1, res.stdout
    assert newest.name in lines[0] and f"resuming from {previous.name}" in lines[0]
    _check_equal_to_reference(cfg, run, tmp_path)


def test_failing_solvers_are_marked_failed_and_others_finish(tmp_path: Path) -> None:
    faulty = ROOT / "tests" / "solvers" / "faulty.py"
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    raw["jobs"] += [
        {"name": "raises", "algorithm": f"{faulty}:RaisesAt", "hyperparameters": {"at": 30},
         "arrival": 0, "stop": {"max_iterations": 200},
         "dataset": {"generator": "classification", "rows": 3000, "features": 10}},
        {"name": "nan", "algorithm": f"{faulty}:NanAt", "hyperparameters": {"at": 40},
         "arrival": 0, "stop": {"max_iterations": 200},
         "dataset": {"generator": "classification", "rows": 3000, "features": 10}},
        {"name": "array", "algorithm": f"{faulty}:ReturnsArrayAt", "hyperparameters": {"at": 20},
         "arrival": 0, "stop": {"max_iterations": 200},
         "dataset": {"generator": "classification", "rows": 3000, "features": 10}},
        {"name": "state", "algorithm": f"{faulty}:ListInState",  # fails alone, not the run
         "arrival": 0, "stop": {"max_iterations": 200},
         "dataset": {"generator": "classification", "rows": 3000, "features": 10}},
    ]
    cfg = _config(tmp_path, jobs=raw["jobs"])
    res = run_slaq(["run", str(cfg)], cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        st = {n: (g.attrs["status"], g.attrs["reason"]) for n, g in f["jobs"].items()}
        assert st["raises"][0] == "failed" and "injected failure at iteration 30" in st["raises"][1]
        assert st["nan"][0] == "failed" and "nan at iteration 40" in st["nan"][1]
        assert len(f["jobs/nan/loss"]) == 40
        assert st["array"][0] == "failed" and "step() must return the global loss as one number, " \
            "not an array of shape (1,)" in st["array"][1]
        assert len(f["jobs/array/loss"]) == 19
        assert st["state"][0] == "failed" and "get_state()['history'] is list" in st["state"][1]
        for name in ("good-1", "good-2", "good-3"):
            assert st[name][0] == "done", st
    assert "job raises failed" in res.stdout and "job nan failed" in res.stdout


def test_a_solver_raising_on_one_rank_of_its_job_ends_the_run_instead_of_hanging(tmp_path: Path) -> None:
    faulty = ROOT / "tests" / "solvers" / "faulty.py"
    cfg = _config(tmp_path, ranks=3, epoch_seconds=0.5, jobs=[
        {"name": "split", "algorithm": f"{faulty}:RaisesOnOneRank", "hyperparameters": {"at": 30},
         "arrival": 0, "stop": {"max_iterations": 100000},
         "dataset": {"generator": "classification", "rows": 20000, "features": 10}}])
    started = time.monotonic()
    res = run_slaq(["run", str(cfg)], cwd=tmp_path, timeout=240)  # it used to hang for good
    assert res.returncode == 3, res.stdout + res.stderr
    assert time.monotonic() - started < 200
    assert "job split: its solver raised on this rank (solver raised ValueError: injected failure at " \
           "iteration 30 on one rank), and the job's other ranks did not come within 30 s" in res.stderr, \
        res.stderr[-3000:]


def test_worker_error_outside_the_solver_ends_the_run_promptly(tmp_path: Path) -> None:
    from slaq_mpi.data.datasets import DatasetSpec
    from slaq_mpi.data.generators import generate

    data = tmp_path / "late.h5"
    generate(DatasetSpec(generator="classification", params={"rows": 2000, "features": 5}), data, 1)
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    raw["jobs"].append({"name": "late", "algorithm": "logreg", "arrival": 2.0,
                        "dataset": {"path": str(data)}, "stop": {"max_iterations": 50}})
    cfg = _config(tmp_path, jobs=raw["jobs"])
    proc = _start(cfg, tmp_path)
    _wait_epochs(tmp_path / "run", proc, 1)
    data.unlink()  # validated at the start, gone when the job is placed
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, out + err  # aborted on an error: fix, then --resume
    assert "error on rank" in err and "late.h5" in err, err[-3000:]
    assert "job late)" in err, err[-3000:]  # the job being placed is named
    # rank 0, waiting for the re-split the failed rank never joined, learns of the error and
    # saves every epoch it finished before the abort
    assert "slaq: error on a worker: rank" in err, err[-3000:]
    last = max(int(e) for e in re.findall(r"^epoch +(\d+) ", out, flags=re.M))
    assert json.loads((tmp_path / "run" / "state.json").read_text())["epoch"] == last + 1
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        assert len(f["epochs/time"]) == last + 1
