"""Stopping a real ``slaq run`` (mpiexec) by hand, beyond the first signal: the RUN_DIR/STOP
file, and a second Ctrl-C (README, "MPI launchers": it aborts at once with MPI's own exit
status; the last epoch's checkpoints still resume). The first stop by each signal is in
test_faults_mpi.py."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Started, mpiexec_path, open_mpi, run_slaq
from tests.mpi_runs import (
    check_equal_to_reference,
    faults_config,
    faults_jobs,
    resume_points,
    wait_epochs,
)

pytestmark = pytest.mark.mpi

Launch = Callable[..., Started]


def _resume_exactly(cfg: Path, tmp_path: Path) -> dict[str, tuple[int, int]]:
    run = tmp_path / "run"
    assert not json.loads((run / "state.json").read_text())["finished"]
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    points = resume_points(res.stdout)
    assert points.get("good-1", (0, 0))[0] > 0, res.stdout  # paced: under way, checkpointed
    check_equal_to_reference(cfg, run, tmp_path)
    return points


def test_a_stop_file_stops_the_run_then_resume_finishes_exactly(tmp_path: Path, launch: Launch) -> None:
    cfg = faults_config(tmp_path)
    run = tmp_path / "run"
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(run, proc, 3)
    (run / "STOP").touch()
    assert proc.finish(120) == 75, proc.shown()
    assert f"found {run / 'STOP'}: stopping after this epoch" in proc.out(), proc.shown()
    assert f"continue with: slaq run --resume {run}" in proc.out(), proc.shown()
    assert not (run / "STOP").exists()  # removed, so that the resume is not stopped by it
    points = _resume_exactly(cfg, tmp_path)
    assert all(redo == 0 for _, redo in points.values()), points  # a graceful stop loses nothing


def test_a_second_ctrl_c_aborts_and_the_checkpoints_still_resume(tmp_path: Path, launch: Launch) -> None:
    # good-1 is held inside an iteration once the test makes the hold file, so the graceful stop
    # asked by the first Ctrl-C cannot end before the second one comes
    hold = tmp_path / "hold"
    cfg = faults_config(tmp_path, jobs=faults_jobs("Held", hold=str(hold)))
    run = tmp_path / "run"
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(run, proc, 3)
    hold.touch()
    waiting = hold.with_name("hold.waiting")
    proc.wait_for("good-1 held in an iteration", waiting.exists)
    proc.send(signal.SIGINT)
    if not open_mpi(mpiexec_path() or ""):  # MPICH's mpiexec says it took the first one
        proc.wait_for("mpiexec's answer to the first Ctrl-C",
                      lambda: "Press Ctrl-C again" in proc.out() + proc.err())
    proc.send(signal.SIGINT)
    status = proc.finish(60)
    assert status not in (0, 1, 2, 75), proc.shown()  # not a run's own status: the abort's
    assert "stopped at t=" not in proc.out(), proc.shown()  # no graceful stop was completed
    hold.unlink()
    _resume_exactly(cfg, tmp_path)


def test_a_job_that_no_longer_fits_a_resumed_run_fails_alone(tmp_path: Path, launch: Launch) -> None:
    """good-1's model fits at the start and no longer when the run resumes (its solver's
    estimate grows): good-1 fails with the reason, the other jobs finish, the run exits 1."""
    swell = tmp_path / "swell"
    cfg = faults_config(tmp_path, jobs=faults_jobs("Swollen", swell=str(swell)))
    run = tmp_path / "run"
    proc = launch(["run", str(cfg)], tmp_path)
    wait_epochs(run, proc, 3)
    (run / "STOP").touch()
    assert proc.finish(120) == 75, proc.shown()
    swell.touch()
    res = run_slaq(["run", "--resume", str(run)], cwd=tmp_path, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "job good-1 failed: its model no longer fits the memory of " in res.stdout, res.stdout
    status = json.loads((run / "status.json").read_text())
    jobs = {j["name"]: (j["status"], j["reason"]) for j in status["jobs"]}
    assert jobs["good-1"][0] == "failed" and "no longer fits" in jobs["good-1"][1], jobs
    assert {n: s for n, (s, _) in jobs.items() if n != "good-1"} == {"good-2": "done", "good-3": "done"}
