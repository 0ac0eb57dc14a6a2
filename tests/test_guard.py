"""The guard of a batch job on several nodes (slaq_mpi/slurm/guard.py): it acts only when the
batch script's heartbeat stops changing, and then requeues or cancels the job."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slaq_mpi.slurm.guard import (
    DONE,
    GUARD_SECONDS,
    GUARD_STEP,
    Heartbeat,
    Watch,
    alive_path,
    guard,
    guard_command,
)


def test_the_heartbeat_lives_beside_the_run_directory(tmp_path: Path) -> None:
    assert alive_path(tmp_path / "runs" / "x") == (tmp_path / "runs" / ".x.alive").resolve()
    (tmp_path / "runs").mkdir()
    beat = Heartbeat(tmp_path / "runs" / "x").start()
    assert alive_path(tmp_path / "runs" / "x").read_text() == "0"
    beat.stop()
    assert alive_path(tmp_path / "runs" / "x").read_text() == DONE


def test_a_beating_or_slow_to_start_batch_script_is_alive_a_silent_one_gone() -> None:
    watch = Watch(0.0)
    for t in range(100):  # a beat every second
        assert watch.see(str(t), float(t)) == "alive"
    assert watch.see("99", 99.0 + GUARD_SECONDS) == "alive"
    assert watch.see("99", 99.0 + GUARD_SECONDS + 0.5) == "gone"
    late = Watch(0.0)
    assert late.see(None, GUARD_SECONDS - 1) == "alive"  # no file yet
    assert late.see("0", GUARD_SECONDS + 1) == "alive"  # its first beat
    assert Watch(0.0).see(DONE + "\n", 1e6) == "done"


class Slurm:
    """Slurm as the guard sees it: the job's batch node and log, a probe of the node that
    answers or not, and the requeue or cancel that works or not."""

    def __init__(self, log: Path, probe: int = 1, act: int = 0) -> None:
        self.log, self.probe, self.act = log, probe, act
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        out, code = "", self.act
        if argv[:3] == ["scontrol", "show", "job"]:
            out, code = f"JobId=7 JobState=RUNNING BatchHost=n1 StdOut={self.log} Restarts=0", 0
        elif argv[:3] == ["scontrol", "show", "node"]:
            out, code = "NodeName=n1 State=ALLOCATED", 0
        elif argv[0] == "srun":
            code = self.probe
        return subprocess.CompletedProcess(argv, code, out, "")

    def acts(self) -> list[list[str]]:
        return [c for c in self.calls if c[:2] in (["scontrol", "requeue"], ["scancel", "7"])]


def _run_guard(tmp_path: Path, requeue: bool, beats: int, slurm: Slurm, done_at: float = 1e9) -> int:
    """The guard against a batch script that beats ``beats`` times, then stops, and says
    ``done`` at ``done_at`` (a fake clock)."""
    run_dir = tmp_path / "run"
    t = [0.0]

    def sleep(seconds: float) -> None:
        t[0] += seconds
        if t[0] >= done_at:
            alive_path(run_dir).write_text(DONE)
        elif t[0] < beats:
            alive_path(run_dir).write_text(str(int(t[0])))

    alive_path(run_dir).write_text("0")
    return guard(run_dir, requeue, slurm, "7", clock=lambda: t[0], sleep=sleep)


def test_the_guard_requeues_or_cancels_the_job_once_the_batch_node_is_lost(tmp_path: Path) -> None:
    slurm = Slurm(tmp_path / "job.log")
    assert _run_guard(tmp_path, True, 30, slurm) == 0
    assert slurm.acts() == [["scontrol", "requeue", "7"]]
    assert "its node is lost; requeueing the job" in (tmp_path / "job.log").read_text()
    probe = next(c for c in slurm.calls if c[0] == "srun")
    assert probe[probe.index("-w") + 1] == "n1"  # the batch node, probed before acting
    slurm = Slurm(tmp_path / "job.log")
    assert _run_guard(tmp_path, False, 5, slurm) == 0
    assert slurm.acts() == [["scancel", "7"]]
    assert _run_guard(tmp_path, True, 5, Slurm(tmp_path / "job.log", act=1)) == 1


def test_a_silent_heartbeat_on_a_node_that_answers_is_no_reason_to_act(tmp_path: Path) -> None:
    slurm = Slurm(tmp_path / "job.log", probe=0)
    assert _run_guard(tmp_path, True, 5, slurm, done_at=5 + 3 * GUARD_SECONDS) == 0
    assert slurm.acts() == [] and len([c for c in slurm.calls if c[0] == "srun"]) >= 2


def test_the_guard_leaves_a_job_whose_batch_script_ended_alone(tmp_path: Path) -> None:
    alive_path(tmp_path / "run").write_text(DONE)
    slurm = Slurm(tmp_path / "job.log")
    assert guard(tmp_path / "run", True, slurm, "7", sleep=lambda _s: None) == 0 and slurm.calls == []


def test_the_guard_step_is_named_so_it_is_never_cancelled_as_stuck() -> None:
    cmd = guard_command("/venv/bin/python", "/runs/x", True, "n3", "7")
    assert cmd[:8] == ["srun", "--overlap", "--jobid=7", f"--job-name={GUARD_STEP}", "-w", "n3", "-N1", "-n1"]
    assert cmd[-4:] == ["--run-dir", "/runs/x", "--requeue", "1"]
