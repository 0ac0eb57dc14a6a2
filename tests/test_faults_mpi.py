"""Fault tolerance under real mpiexec: graceful stop and resume, SIGKILL of a worker,
corrupt checkpoints, failing solvers."""

from __future__ import annotations

import json
import os
import random
import re
import signal
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from slaq_mpi.storage import journal
from slaq_mpi.storage.metrics import RunRecord
from tests.conftest import ROOT, Started, mpiexec_path, open_mpi, run_slaq
from tests.mpi_runs import (
    check_epoch_lines,
    check_equal_to_reference,
    faults_config,
    faults_jobs,
    rank_pids,
    resume_points,
    wait_epochs,
)

pytestmark = pytest.mark.mpi

Launch = Callable[..., Started]


def _stop_then_resume_exactly(cfg: Path, tmp_path: Path, proc: Started) -> None:
    """After a graceful stop (exit 75): the run is resumable, and resumed it continues every
    job where it stopped, losing no iteration, to the serial reference's losses."""
    run = tmp_path / "run"
    assert proc.finish(120) == 75, proc.shown()
    assert "slaq run --resume" in proc.out(), proc.shown()
    assert not json.loads((run / "state.json").read_text())["finished"]
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    points = resume_points(res.stdout)
    assert "good-1" in points, res.stdout  # paced: still training when it was stopped
    for name, (k, redo) in points.items():
        assert k > 0, f"{name} started again from iteration 0"
        assert redo == 0, f"{name}: a graceful stop must not lose iterations"
    check_equal_to_reference(cfg, run, tmp_path)


# SIGHUP: the terminal closed. Open MPI's mpiexec kills ranks on SIGINT and SIGTERM: slaq run
# passes the first stop on as SIGUSR1 there; with MPICH a hangup arrives as SIGTERM.
@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_signal_stops_then_resume_finishes_exactly(tmp_path: Path, signum: int, launch: Launch) -> None:
    cfg = faults_config(tmp_path)
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(tmp_path / "run", proc, 4)
    proc.send(signum)
    name = "SIGTERM" if signum == signal.SIGHUP else signal.Signals(signum).name
    seen = "SIGUSR1" if open_mpi(mpiexec_path() or "") else name
    _stop_then_resume_exactly(cfg, tmp_path, proc)
    assert f"received {seen}: stopping" in proc.out(), proc.shown()


def test_resume_from_another_directory_reads_relative_paths_where_the_run_started(
        tmp_path: Path, launch: Launch) -> None:
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
    raw["jobs"] = faults_jobs() + [
        {"name": "mine", "algorithm": "solvers/faulty.py:RaisesAt", "hyperparameters": {"at": 10**6},
         "arrival": 0, "dataset": {"path": "train.h5"}, "stop": {"max_iterations": 2000}}]
    (proj / "exp.yaml").write_text(yaml.safe_dump(raw))
    proc = launch(["run", "exp.yaml"], proj)
    wait_epochs(proj / "run", proc, 3)
    proc.send(signal.SIGUSR1)
    assert proc.finish(120) == 75, proc.shown()
    res = run_slaq(["run", "--resume", "../../proj/run"], cwd=elsewhere, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"resuming in {proj}" in res.stdout, res.stdout
    assert resume_points(res.stdout).get("mine", (0, 0))[0] > 0, res.stdout
    with h5py.File(proj / "run" / "metrics.h5") as f:
        assert {n: g.attrs["status"] for n, g in f["jobs"].items()} == dict.fromkeys(f["jobs"], "done")
    assert not (elsewhere / "run").exists() and list(elsewhere.iterdir()) == []


def test_resume_refuses_a_data_file_that_changed_since_the_start(tmp_path: Path, launch: Launch) -> None:
    import shutil

    from slaq_mpi.data.datasets import DatasetSpec
    from slaq_mpi.data.generators import generate

    data = tmp_path / "train.h5"
    spec = DatasetSpec(generator="classification", params={"rows": 8000, "features": 10})
    generate(spec, data, 4)
    shutil.copy2(data, tmp_path / "kept.h5")
    jobs = faults_jobs() + [{"name": "mine", "algorithm": "logreg", "arrival": 0,
                             "dataset": {"path": str(data)}, "stop": {"max_iterations": 5000}}]
    cfg = faults_config(tmp_path, jobs=jobs)
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(tmp_path / "run", proc, 3)
    proc.send(signal.SIGUSR1)
    assert proc.finish(120) == 75, proc.shown()
    generate(spec, data, 5)  # the same shape, other numbers: `slaq data make` again, say
    res = run_slaq(["run", "--resume", str(tmp_path / "run")], cwd=tmp_path, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "job mine's data file" in res.stderr and "changed since the run started" in res.stderr
    assert "starting" not in res.stdout  # refused before any rank started
    shutil.copy(tmp_path / "kept.h5", data)  # restored (a new modification time is fine)
    res = run_slaq(["run", "--resume", str(tmp_path / "run")], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("victim", ["worker", "coordinator"])
def test_sigkill_of_a_rank_then_resume(tmp_path: Path, launch: Launch, victim: str) -> None:
    cfg = faults_config(tmp_path)
    run = tmp_path / "run"
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(run, proc, 5)
    ranks = rank_pids(cfg)
    assert sorted(ranks) == [0, 1, 2, 3], ranks
    rank = 0 if victim == "coordinator" else random.Random(7).choice([1, 2, 3])
    os.kill(ranks[rank], signal.SIGKILL)
    assert proc.finish(120) not in (0, 75), proc.shown()
    # what rank 0 had recorded when the rank died: its last save and the reports it journaled since
    saved = RunRecord.read(run / "metrics.h5")
    journal.replay(saved, journal.entries(run, int(saved.attrs.get("journal", 0))))
    recorded = {n: len(j.loss) for n, j in saved.jobs.items()}
    under_way = {n for n, j in saved.jobs.items() if len(j.loss) and j.status not in ("done", "failed")}
    with h5py.File(run / "metrics.h5") as f:
        per_epoch = {n: max(1, int(np.bincount(np.searchsorted(f["epochs/time"][()], g["time"][()]))
                                   .max())) if len(g["time"]) else 0 for n, g in f["jobs"].items()}
    assert "good-1" in under_way, recorded  # paced: it cannot have finished by epoch 5
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    points = resume_points(res.stdout)
    assert set(points) == under_way, res.stdout  # one resume point per job under way
    for name, (k, redo) in points.items():
        assert recorded[name] - k == redo, (name, recorded[name], k, redo)
        assert redo <= per_epoch[name], f"{name}: {redo} iterations redone, more than one epoch"
        if recorded[name] > per_epoch[name]:  # its checkpoint of an earlier epoch is kept
            assert k > 0, f"{name} started again from iteration 0 with {recorded[name]} recorded"
    assert points["good-1"][0] > 0, res.stdout
    check_equal_to_reference(cfg, run, tmp_path)


def _stopped_at_epoch_4(tmp_path: Path, launch: Launch) -> tuple[Path, Path]:
    cfg = faults_config(tmp_path)
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(tmp_path / "run", proc, 4)
    proc.send(signal.SIGUSR1)
    assert proc.finish(120) == 75, proc.shown()
    return cfg, tmp_path / "run"


def test_corrupt_newest_checkpoint_uses_previous(tmp_path: Path, launch: Launch) -> None:
    cfg, run = _stopped_at_epoch_4(tmp_path, launch)
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
    check_equal_to_reference(cfg, run, tmp_path)


def test_every_checkpoint_of_a_job_corrupt_restarts_that_job_alone(tmp_path: Path, launch: Launch) -> None:
    cfg, run = _stopped_at_epoch_4(tmp_path, launch)
    with h5py.File(run / "metrics.h5") as f:
        recorded = len(f["jobs/good-1/loss"])
    damaged = sorted((run / "checkpoints" / "good-1").glob("*.h5"))
    assert damaged and recorded > 0, (damaged, recorded)
    for path in damaged:
        path.write_bytes(path.read_bytes()[:200])
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [ln for ln in res.stdout.splitlines() if "corrupt checkpoint" in ln]
    assert len(lines) == 1 and lines[0].startswith("job good-1: corrupt checkpoint "), res.stdout
    assert all(p.name in lines[0] for p in damaged), lines[0]
    assert lines[0].endswith("no good checkpoint: restarting it at iteration 0"), lines[0]
    points = resume_points(res.stdout)
    assert points["good-1"] == (0, recorded), res.stdout
    assert all(k > 0 for name, (k, _) in points.items() if name != "good-1"), res.stdout
    assert sorted(p.name for p in (run / "checkpoints" / "good-1").glob("*.corrupt")) == \
        sorted(p.name + ".corrupt" for p in damaged)
    check_equal_to_reference(cfg, run, tmp_path)


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
    cfg = faults_config(tmp_path, jobs=raw["jobs"])
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
    check_epoch_lines(res.stdout, tmp_path / "run")
    # each epoch's line counts the jobs failed so far: the "job X failed" lines above it
    failed_so_far, counts = 0, []
    for line in res.stdout.splitlines():
        if re.match(r"job \S+ failed: ", line):
            failed_so_far += 1
        elif line.startswith("epoch "):
            found = re.search(r" failed (\d+) \|", line)
            counts.append((int(found.group(1)) if found else 0, failed_so_far))
    assert all(shown == seen for shown, seen in counts), counts
    assert counts[-1] == (4, 4), counts


def test_a_solver_raising_on_one_rank_of_its_job_ends_the_run_instead_of_hanging(tmp_path: Path) -> None:
    faulty = ROOT / "tests" / "solvers" / "faulty.py"
    cfg = faults_config(tmp_path, ranks=3, epoch_seconds=0.5, jobs=[
        {"name": "split", "algorithm": f"{faulty}:RaisesOnOneRank", "hyperparameters": {"at": 30},
         "arrival": 0, "stop": {"max_iterations": 100000},
         "dataset": {"generator": "classification", "rows": 20000, "features": 10}}])
    res = run_slaq(["run", str(cfg)], cwd=tmp_path, timeout=240)  # a hang fails here, with the output
    assert res.returncode == 3, res.stdout + res.stderr
    assert "job split: its solver raised on this rank (solver raised ValueError: injected failure at " \
           "iteration 30 on one rank), and the job's other ranks did not come within 30 s" in res.stderr, \
        res.stderr[-3000:]


def test_worker_error_outside_the_solver_ends_the_run_promptly(tmp_path: Path, launch: Launch) -> None:
    from slaq_mpi.data.datasets import DatasetSpec
    from slaq_mpi.data.generators import generate

    data = tmp_path / "late.h5"
    generate(DatasetSpec(generator="classification", params={"rows": 2000, "features": 5}), data, 1)
    # late arrives at 5 s: after the first epoch (0.3 s) and while the paced good-1 still trains
    jobs = faults_jobs() + [{"name": "late", "algorithm": "logreg", "arrival": 5.0,
                             "dataset": {"path": str(data)}, "stop": {"max_iterations": 50}}]
    cfg = faults_config(tmp_path, jobs=jobs)
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(tmp_path / "run", proc, 1)
    data.unlink()  # validated at the start, gone when the job is placed
    assert proc.finish(120) == 3, proc.shown()  # aborted on an error: fix, then --resume
    out, err = proc.out(), proc.err()
    assert "error on rank" in err and "late.h5" in err, err[-3000:]
    assert "job late)" in err, err[-3000:]  # the job being placed is named
    # rank 0, waiting for the re-split the failed rank never joined, learns of the error and
    # saves every epoch it finished before the abort
    assert "slaq: error on a worker: rank" in err, err[-3000:]
    last = max(int(e) for e in re.findall(r"^epoch +(\d+) ", out, flags=re.M))
    assert json.loads((tmp_path / "run" / "state.json").read_text())["epoch"] == last + 1
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        assert len(f["epochs/time"]) == last + 1


def test_a_solver_raising_in_init_or_set_state_fails_only_its_job(tmp_path: Path, launch: Launch) -> None:
    faulty = ROOT / "tests" / "solvers" / "faulty.py"
    data = {"generator": "classification", "rows": 3000, "features": 10}
    jobs = [*faults_jobs(),
            {"name": "init", "algorithm": f"{faulty}:RaisesInInit", "stop": {"max_iterations": 50},
             "dataset": data},
            {"name": "restore", "algorithm": f"{faulty}:RaisesInSetState", "hyperparameters": {"pace": 0.01},
             "stop": {"max_iterations": 100000}, "dataset": data}]
    cfg = faults_config(tmp_path, jobs=jobs)
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(tmp_path / "run", proc, 4)
    proc.send(signal.SIGUSR1)
    assert proc.finish(120) == 75, proc.shown()
    res = run_slaq(["run", "--resume", str(tmp_path / "run")], cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr  # a job failed; the run did not abort
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        st = {n: (str(g.attrs["status"]), str(g.attrs["reason"]), len(g["loss"]))
              for n, g in f["jobs"].items()}
    assert st["init"][:2] == ("failed", "solver raised ValueError in __init__: injected failure in __init__")
    assert st["init"][2] == 0
    status, reason, iterations = st["restore"]
    assert status == "failed" and iterations > 0, st["restore"]
    assert reason == (f"solver raised ValueError in set_state() restoring iteration {iterations}: "
                      "injected failure in set_state"), reason
    for name in ("good-1", "good-2", "good-3"):
        assert st[name][0] == "done", st
    assert f"job restore: failed after {iterations} iterations" in res.stdout, res.stdout
