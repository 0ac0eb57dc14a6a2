"""The step supervisor's decisions (slaq_mpi/slurm/supervise.py), from canned Slurm answers at
the run_cmd boundary: which nodes are lost, whether to resume, and the command that resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slaq_mpi.slurm.outcome import cancelled_by_user, ending
from slaq_mpi.slurm.supervise import (
    SAME_NODES_RESUMES,
    Progress,
    Supervisor,
    expand_tasks,
    lost_nodes,
    relaunch_command,
    should_relaunch,
    start_command,
)
from slaq_mpi.storage.rundir import lock_path

SHOW_NODE = ("NodeName={n} Arch=x86_64 CoresPerSocket=1 CPUAlloc=4 CPUTot=4 CPULoad=0.50 "
             "AvailableFeatures=(null) NodeAddr=127.0.0.1 NodeHostName={n} State={state} "
             "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A Partitions=emu")
SLAQ = ["/venv/bin/python", "/venv/lib/slaq_mpi/__main__.py"]


class FakeSlurm:
    """Answers scontrol and srun as canned; records every command."""

    def __init__(self, states: dict[str, str], probe_fails: Sequence[str] = (),
                 hostnames: str = "n1\nn2\nn3\n") -> None:
        self.states = states
        self.probe_fails = set(probe_fails)
        self.hostnames = hostnames
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        out, code = "", 0
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            out = self.hostnames
        elif argv[:3] == ["scontrol", "show", "node"]:
            node = argv[3]
            out = SHOW_NODE.format(n=node, state=self.states.get(node, "ALLOCATED"))
        elif argv[0] == "srun":
            node = argv[argv.index("-w") + 1]
            code = 1 if node in self.probe_fails else 0
            out = "" if code else ""
        return subprocess.CompletedProcess(argv, code, out, "srun: error: Task launch failed" if code else "")


def test_tasks_per_node_from_slurm() -> None:
    assert expand_tasks("4(x3)", ["n1", "n2", "n3"]) == {"n1": 4, "n2": 4, "n3": 4}
    assert expand_tasks("3,4(x2)", ["a", "b", "c"]) == {"a": 3, "b": 4, "c": 4}
    with pytest.raises(ValueError, match="does not match 2 nodes"):
        expand_tasks("4(x3)", ["a", "b"])
    with pytest.raises(ValueError, match="not a Slurm task count"):
        expand_tasks("four", ["a"])


def test_a_node_slurm_marks_down_is_lost_without_a_probe() -> None:
    slurm = FakeSlurm({"n3": "DOWN+NOT_RESPONDING"})
    assert lost_nodes(["n1", "n2", "n3"], "n1", "7", slurm) == ["n3"]
    probed = [c[c.index("-w") + 1] for c in slurm.calls if c[0] == "srun"]
    assert probed == ["n2"]  # not the batch node, not the node already known down


def test_a_node_slurm_still_lists_as_allocated_is_lost_when_its_probe_fails() -> None:
    slurm = FakeSlurm({}, probe_fails=["n3"])
    assert lost_nodes(["n1", "n2", "n3"], "n1", "7", slurm) == ["n3"]
    probe = next(c for c in slurm.calls if c[0] == "srun")
    assert "--overlap" in probe and "--jobid=7" in probe


def test_every_node_answering_is_no_node_lost() -> None:
    assert lost_nodes(["n1", "n2", "n3"], "n1", "7", FakeSlurm({})) == []


@pytest.mark.parametrize(("status", "stop", "started", "relaunch"), [
    (0, False, True, False),    # every job done
    (1, False, True, False),    # a job failed
    (2, False, True, False),    # bad input
    (75, False, True, False),   # stopped on request
    (137, False, True, True),   # the step was killed: perhaps a node is gone
    (3, False, True, True),     # rank 0 aborted on an error
    (76, False, True, True),    # rank 0 lost ranks (a job stopped reporting, a message failed)
    (137, True, True, False),   # the job was asked to stop (scancel, time limit)
    (137, False, False, False),  # the launch failed before any rank 0 ran
])
def test_when_to_resume(status: int, stop: bool, started: bool, relaunch: bool) -> None:
    assert should_relaunch(status, stop, started) is relaunch


def test_srun_relaunch_leaves_the_lost_nodes_out() -> None:
    cmd = relaunch_command(["srun", "--mpi=pmi2", "--kill-on-bad-exit=1"], "srun", ["n3"],
                           {"n1": 4, "n2": 4}, [*SLAQ, "run", "/c.yaml"], "/runs/x")
    assert cmd == ["srun", "--overlap", "--exclude=n3", "--nodes=2", "--ntasks=8", "--mpi=pmi2",
                   "--kill-on-bad-exit=1", *SLAQ, "run", "--resume", "/runs/x"]


def test_mpiexec_relaunch_names_the_hosts_left() -> None:
    cmd = relaunch_command(["/opt/mpiexec", "-n", "$SLURM_NTASKS", "-bind-to", "core"], "mpiexec",
                           ["n2"], {"n1": 4, "n3": 3}, [*SLAQ, "run", "--resume", "/runs/x"], "/runs/x")
    assert cmd == ["/opt/mpiexec", "-n", "7", "-hosts", "n1:4,n3:3", "-bind-to", "core", *SLAQ,
                   "run", "--resume", "/runs/x"]


class Scripted(Supervisor):
    """A supervisor whose steps end as scripted (no process is started)."""

    def __init__(self, statuses: list[tuple[int, bool]], slurm: FakeSlurm, launcher: str = "srun") -> None:
        launch = ["srun", "--mpi=pmi2"] if launcher == "srun" else ["mpiexec", "-n", "12"]
        super().__init__(Path("/runs/x"), launcher, [*launch, *SLAQ, "run", "/c.yaml"], slurm, {})
        self.statuses = statuses
        self.launched: list[list[str]] = []

    def run_step(self, command: list[str]) -> tuple[int, bool]:
        self.launched.append(command)
        return self.statuses.pop(0)


@pytest.fixture
def allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_JOB_NUM_NODES": "3",
                       "SLURM_TASKS_PER_NODE": "4(x3)"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("socket.gethostname", lambda: "n1")


def test_a_lost_node_is_left_out_and_the_run_resumed(allocation: None) -> None:
    sup = Scripted([(137, True), (0, True)], FakeSlurm({}, probe_fails=["n3"]))
    assert sup.supervise() == 0
    assert sup.launched[1] == ["srun", "--overlap", "--exclude=n3", "--nodes=2", "--ntasks=8",
                               "--mpi=pmi2", *SLAQ, "run", "--resume", "/runs/x"]
    assert sup.env["SLURM_OVERLAP"] == "1"


def test_a_second_lost_node_is_left_out_too(allocation: None) -> None:
    slurm = FakeSlurm({"n3": "DOWN*"}, probe_fails=["n2"])
    sup = Scripted([(137, True), (1, True)], slurm)
    assert sup.supervise() == 1
    # n2 and n3 both gone: only rank 0's node is left, with 4 tasks
    assert sup.launched[1][:5] == ["srun", "--overlap", "--exclude=n2,n3", "--nodes=1", "--ntasks=4"]


def test_no_node_lost_ends_with_the_steps_status(allocation: None) -> None:
    sup = Scripted([(3, True)], FakeSlurm({}))
    assert sup.supervise() == 3 and len(sup.launched) == 1


def test_a_stop_asked_of_the_job_is_not_resumed(allocation: None) -> None:
    slurm = FakeSlurm({}, probe_fails=["n3"])
    sup = Scripted([(137, True)], slurm)
    sup.on_stop(15, None)
    assert sup.supervise() == 137 and slurm.calls == []


def test_fewer_than_two_tasks_left_ends_the_run(allocation: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "1(x3)")
    sup = Scripted([(137, True)], FakeSlurm({}, probe_fails=["n2", "n3"]))
    assert sup.supervise() == 137 and len(sup.launched) == 1


def test_one_node_jobs_are_never_probed(allocation: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    slurm = FakeSlurm({})
    assert Scripted([(137, True)], slurm).supervise() == 137 and slurm.calls == []


def _status(now: float, **iterations: int) -> dict[str, Any]:
    return {"epoch_seconds": 1.0, "updated": now,
            "jobs": [{"name": n, "status": "running", "iterations": i} for n, i in iterations.items()]}


def test_a_job_that_stops_iterating_makes_a_probe_due_once_per_interval() -> None:
    watch = Progress()
    assert not watch.stalled(_status(0.0, a=10, b=5), 0.0)
    assert not watch.stalled(_status(2.0, a=20, b=5), 2.0)  # b: 2 s without an iteration
    assert watch.stalled(_status(3.5, a=30, b=5), 3.5)  # b: 3.5 s > 3 epochs, 3 s
    assert not watch.stalled(_status(4.0, a=40, b=5), 4.0)  # probed 0.5 s ago
    assert watch.stalled(_status(7.0, a=50, b=5), 7.0)


def test_jobs_that_iterate_or_have_ended_make_no_probe_due() -> None:
    watch = Progress()
    done = {"epoch_seconds": 1.0, "jobs": [{"name": "d", "status": "done", "iterations": 9}]}
    for t in range(20):
        assert not watch.stalled(_status(float(t), a=t), float(t))
        assert not watch.stalled(done, float(t))


FAKE_STEP = """\
#!/bin/bash
# A step whose rank 0 ends while the launcher hangs (as srun does, waiting for a dead node).
"$PYTHON" - "$LOCK" <<'PY' &
import os, socket, sys, time
open(sys.argv[1], "w").write(f"pid {os.getpid()} on {socket.gethostname()}, since now\\n")
time.sleep(1.0)
PY
exec sleep 120
"""


@pytest.mark.slow
def test_a_step_hanging_after_its_rank_0_ended_is_ended(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("slaq_mpi.slurm.supervise.STEP_GRACE", 0.5)
    for key in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES"):
        monkeypatch.delenv(key, raising=False)
    run_dir = tmp_path / "run"
    step = tmp_path / "step.sh"
    step.write_text(FAKE_STEP)
    env = {**os.environ, "PYTHON": sys.executable, "LOCK": str(lock_path(run_dir))}
    sup = Supervisor(run_dir, "srun", ["bash", str(step), *SLAQ, "run", "/c.yaml"], FakeSlurm({}), env)
    status, rank0_ran = sup.run_step(["bash", str(step)])  # the step itself would sleep 120 s
    assert rank0_ran and sup.ended
    assert status == 128 + signal.SIGTERM


def test_rank_0_losing_ranks_every_node_answers_resumes_on_the_same_nodes(allocation: None) -> None:
    """Rank 0 ended on silent jobs (exit 76) but no node is gone: the run resumes on all the
    nodes, a bounded number of times, then ends with that status."""

    class LostRanks(Scripted):
        def run_step(self, command: list[str]) -> tuple[int, bool]:
            self.ranks_lost = True
            return super().run_step(command)

    sup = LostRanks([(76, True), (76, True), (76, True)], FakeSlurm({}))
    assert sup.supervise() == 76
    assert len(sup.launched) == 1 + SAME_NODES_RESUMES
    assert sup.launched[1] == ["srun", "--overlap", "--nodes=3", "--ntasks=12", "--mpi=pmi2", *SLAQ,
                               "run", "--resume", "/runs/x"]


def test_the_first_launch_starts_or_resumes(tmp_path: Path) -> None:
    launch = ["srun", "--mpi=pmi2", *SLAQ]
    assert start_command(launch, tmp_path, "/c.yaml") == [*launch, "run", "/c.yaml"]
    (tmp_path / "state.json").write_text("{}")
    assert start_command(launch, tmp_path, "/c.yaml") == [*launch, "run", "--resume", str(tmp_path)]


# --- how the batch job ends (slaq_mpi/slurm/outcome.py) ------------------------------------------

_END = {"run_dir": "/r", "advice": "check slurm.mpi", "requeue": True, "restarts": 0, "max_restarts": 2}
_LINE = "JobId=7 JobName=x JobState={state} Reason={reason} Dependency=(null) Restarts=0"


@pytest.mark.parametrize(("status", "stop", "started", "line", "said", "code", "requeue"), [
    (0, False, True, "", "every job done", 0, False),
    (1, False, True, "", "at least one job failed", 1, False),
    (2, False, False, "", "bad input or run directory in use", 2, False),
    (3, False, True, "", "slaq run exited with status 3; after a crash", 3, False),
    (76, False, True, "", "slaq run exited with status 76", 76, False),
    (1, False, False, "", "the MPI launch failed before the run started (status 1", 3, False),
    (0, False, False, "", "the MPI launch failed before the run started (status 0", 3, False),
    (75, False, True, "", "stopped with checkpoints on request (RUN_DIR/STOP or a signal to rank 0), "
                          "not requeued", 75, False),
    (75, True, True, _LINE.format(state="RUNNING", reason="None"), "requeueing", 0, True),
    (75, True, True, _LINE.format(state="COMPLETING", reason="TimeLimit"), "requeueing", 0, True),
    (75, True, True, _LINE.format(state="COMPLETING", reason="None"), "ended by Slurm (scancel", 75, False),
    (75, True, True, _LINE.format(state="CANCELLED", reason="None"), "ended by Slurm (scancel", 75, False),
    (75, True, False, "", "requeueing", 0, True),  # a stop before the run owned RUN_DIR
])
def test_how_the_batch_job_ends(status: int, stop: bool, started: bool, line: str, said: str,
                                code: int, requeue: bool) -> None:
    end = ending(status, stop, started, job_line=line, **_END)  # type: ignore[arg-type]
    assert said in end.say and (end.status, end.requeue) == (code, requeue), end


def test_no_requeue_when_disabled_or_after_max_restarts() -> None:
    for changed in ({"requeue": False}, {"restarts": 2}):
        end = ending(75, True, True, **{**_END, **changed})  # type: ignore[arg-type]
        assert not end.requeue and end.status == 75
        assert end.say == "stopped with checkpoints; resume with: slaq run --resume /r (or submit again)"
    end = ending(75, True, True, **_END)  # type: ignore[arg-type]
    assert end.fallback == "stopped with checkpoints; resume with: slaq run --resume /r (or submit again)"


def test_a_job_cancelled_by_its_owner_is_told_from_slurms_own_endings() -> None:
    assert cancelled_by_user(_LINE.format(state="COMPLETING", reason="None"))
    assert not cancelled_by_user(_LINE.format(state="COMPLETING", reason="TimeLimit"))
    assert not cancelled_by_user(_LINE.format(state="RUNNING", reason="None"))
    assert not cancelled_by_user("")


def test_a_status_older_than_the_launch_is_no_sign_of_a_stuck_rank_0(tmp_path: Path) -> None:
    # after a requeue the run directory holds the last launch's status.json, minutes old: the
    # new launch's rank 0 is not stuck for it (it writes its own once its data are ready)
    sup = Supervisor(tmp_path / "run", "srun", [*SLAQ, "run", "/c.yaml"], FakeSlurm({}), dict(os.environ))
    now = time.time()
    sup._launched = now - 5.0
    before = {"updated": now - 600.0, "epoch_seconds": 1.0}
    assert not sup._heartbeat_stale(before)
    mine = {"updated": now - 4.0, "epoch_seconds": 1.0}
    assert not sup._heartbeat_stale(mine)
    sup._launched = now - 900.0  # this launch's rank 0 wrote it, then nothing for 10 minutes
    assert sup._heartbeat_stale(before)
    assert not sup._heartbeat_stale({"updated": now - 600.0, "epoch_seconds": 120.0})
