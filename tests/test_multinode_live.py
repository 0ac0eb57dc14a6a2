"""Multi-node tier: slaq-mpi on the emulated 3-node Slurm cluster of scripts/slurm-multinode.sh.

Each node of that cluster is one slurmd in its own UTS namespace (hostnames n1, n2, n3, 4 CPUs
each); the cluster has its own slurm.conf (SLURM_CONF), so it runs beside the single-node
cluster of the Slurm tier. The tests run whenever it answers; they skip otherwise, except under
CI (any true value of CI), where a cluster that is not up FAILS them. Jobs are watched by polling
``scontrol show job`` (a safety net of GIVE_UP seconds); no check depends on how long anything
takes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slaq_mpi.slurm import submit as slurm
from slaq_mpi.slurm.submit import SlurmError
from slaq_mpi.storage.metrics import read_metrics
from tests.conftest import ROOT, run_slaq, under_ci
from tests.slurm_jobs import FINAL_STATES, Submitted, submit_config

pytestmark = [pytest.mark.slurm, pytest.mark.multinode]

SCRIPT = ROOT / "scripts" / "slurm-multinode.sh"
CONF = Path(os.environ.get("SLAQ_MN_DIR", "/tmp/slaq-multinode")) / "slurm.conf"
CONFIG = Path(__file__).resolve().parent / "configs" / "multinode.yaml"
NODES = ("n1", "n2", "n3")
PER_NODE = 4  # CPUs each emulated node declares


def _cluster_problem() -> str | None:
    """Why the emulated cluster cannot take jobs, or None when its 3 nodes answer."""
    if not CONF.is_file():
        return f"{CONF} does not exist"
    try:
        proc = slurm.run_cmd(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=20)
    except SlurmError as exc:
        return str(exc)
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip()}"
    states = dict(line.split()[:2] for line in proc.stdout.splitlines() if line.strip())
    missing = [n for n in NODES if n not in states]
    if missing:
        return f"sinfo lists no node {', '.join(missing)} ({proc.stdout.strip()!r})"
    # "*": the node does not answer (e.g. killed by an earlier kill-node and not started again)
    down = [f"{n} {s}" for n, s in states.items() if re.match(r"down|drain|fail", s) or s.endswith("*")]
    return f"nodes not up: {', '.join(down)}" if down else None


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    """Point Slurm's commands at the emulated cluster; skip without it, but fail under CI."""
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(CONF)
    try:
        problem = _cluster_problem()
        if problem is not None:
            if under_ci():
                pytest.fail(f"under CI and the emulated multi-node cluster is not up ({problem}); "
                            f"start it with {SCRIPT} start")
            pytest.skip(f"no emulated multi-node cluster ({problem}); start it with {SCRIPT} start")
        yield
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before


def kill_node(name: str) -> str:
    """Kill every process of emulated node ``name`` (as a crash would); returns the script's line."""
    proc = subprocess.run(["bash", str(SCRIPT), "kill-node", name], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


def submit(workdir: Path, **slurm_keys: Any) -> Submitted:
    """``slaq submit`` of tests/configs/multinode.yaml into ``workdir``, with ``slurm_keys``."""
    return submit_config(CONFIG, workdir, **slurm_keys)


def finished(job: Submitted) -> dict[str, str]:
    try:
        return job.wait_for("the end", lambda i: i.get("JobState") in FINAL_STATES)
    finally:
        job.cancel()


def check_placements(run_dir: Path) -> set[str]:
    """Every placement of the run: a job of at most PER_NODE cores on two nodes or more had no
    node that could hold it (that node's free ranks plus the job's own there). Returns the hosts
    the jobs ran on."""
    run = read_metrics(run_dir)
    assert run.placements, "metrics.h5 keeps no placements"
    hosts: set[str] = set()
    for p in run.placements:
        hosts.update(p["hosts"])
        cores = len(p["ranks"])
        if cores <= PER_NODE and len(set(p["hosts"])) > 1:
            room = {h: n + p["hosts"].count(h) for h, n in p["free"].items()}
            assert max(room.values()) < cores, f"{p['job']} spans {sorted(set(p['hosts']))}: {p}"
    return hosts


def test_srun_puts_ranks_on_every_node() -> None:
    proc = slurm.run_cmd(["srun", "-N3", "-n3", "hostname"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == list(NODES)


def check_run(job: Submitted, info: dict[str, str]) -> None:
    """The run ended COMPLETED with every job done, ranks on all three nodes, each job packed
    (:func:`check_placements`), and ``slaq report`` shows the node spans."""
    log = job.log_text()
    assert info["JobState"] == "COMPLETED", f"{info}\n{log[-3000:]}"
    run = read_metrics(job.run_dir)
    assert {n: j.status for n, j in run.jobs.items()} == dict.fromkeys(run.jobs, "done"), log[-3000:]
    assert check_placements(job.run_dir) == set(NODES)
    report = run_slaq(["report", str(job.run_dir), "--no-plots"], timeout=120)
    assert report.returncode == 0, report.stderr
    assert re.search(r"nodes per job \(.*hosts n1, n2, n3\)", report.stdout), report.stdout


# Slurm's pmi2 plugin reads a PMI-1 request in one read of at most 1024 bytes: a longer line is
# cut in two, slurmstepd writes one of these into the batch log, and the launch fails or hangs
# in MPI_Init. pip's MPICH sends such lines now and then on several nodes (its UCX netmod's
# 4096-byte address block, hex-encoded; docs/slurm.md). That is the launcher failing, not the
# scheduler: such a launch is submitted once more (and said so).
PMI2_MISREAD = ("mpi/pmi2: invalid client request", "mpi/pmi2: value not properly terminated")


def _pmi2_misread(job: Submitted, info: dict[str, str]) -> bool:
    """Whether ``job`` failed for slurmstepd's misread (:data:`PMI2_MISREAD`); says so if it did."""
    if info.get("JobState") == "COMPLETED" or not any(m in job.log_text() for m in PMI2_MISREAD):
        return False
    print(f"\nslurmstepd misread a PMI-2 request in job {job.job_id}: submitting it again")
    return True


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Submitted, dict[str, str]]:
    """The 6-job config on 3 nodes with srun, run to its end; the reference of the node-loss test."""
    job = submit(tmp_path_factory.mktemp("uninterrupted"))
    info = finished(job)
    if _pmi2_misread(job, info):
        job = submit(tmp_path_factory.mktemp("uninterrupted"))
        info = finished(job)
    return job, info


def test_six_jobs_on_three_nodes_each_packed(uninterrupted: tuple[Submitted, dict[str, str]]) -> None:
    check_run(*uninterrupted)


# Hydra beside this Python (pip's mpich), not a system Open MPI
MPIEXEC: dict[str, Any] = {"launcher": "mpiexec", "mpiexec": str(Path(sys.executable).parent / "mpiexec")}


def test_mpiexec_launcher_across_the_nodes(tmp_path: Path) -> None:
    job = submit(tmp_path, **MPIEXEC)
    check_run(job, finished(job))


def _status(run_dir: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((run_dir / "status.json").read_text()))
    except (OSError, ValueError):
        return {}


def _per_report(times: np.ndarray, period: float) -> int:
    """The most iterations a job ran within one report period (``period`` seconds)."""
    if len(times) == 0:
        return 0
    t = np.sort(times)
    return int(np.max(np.searchsorted(t, t + period, side="left") - np.arange(len(t))))


@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_losing_a_node_resumes_on_the_others_in_the_same_job(
        tmp_path: Path, uninterrupted: tuple[Submitted, dict[str, str]], launcher: str) -> None:
    ref_job, ref_info = uninterrupted
    assert ref_info["JobState"] == "COMPLETED", "the uninterrupted run failed; see its own test"
    job = submit(tmp_path, **MPIEXEC) if launcher == "mpiexec" else submit(tmp_path)
    try:
        def midway(_info: dict[str, str]) -> bool:
            status = _status(job.run_dir)
            running = [j for j in status.get("jobs", []) if j["status"] == "running" and j["iterations"]]
            return float(status.get("now", 0.0)) > 8.0 and len(running) >= 3
        job.wait_for("the run to be midway", midway)
        killed_at = time.time()
        print(f"{time.strftime('%T')} {kill_node('n3')}")
        # recovery: a launch on n1 and n2 only, then a job iterating beyond where it resumed
        job.wait_for("the resumed launch", lambda _i: (job.run_dir / "hosts.json").stat().st_mtime > killed_at
                     and "n3" not in (job.run_dir / "hosts.json").read_text())
        base: dict[str, int] = {}

        def iterating(_info: dict[str, str]) -> bool:
            status = _status(job.run_dir)
            if float(status.get("updated", 0.0)) <= (job.run_dir / "hosts.json").stat().st_mtime:
                return False
            for j in status.get("jobs", []):
                base.setdefault(j["name"], j["iterations"])
            return any(j["iterations"] > base[j["name"]] for j in status["jobs"])
        job.wait_for("an iteration after the recovery", iterating)
        recovered = time.time() - killed_at
        print(f"{launcher}: kill to first iteration after recovery: {recovered:.1f} s (target <= 30 s)")
        info = job.wait_for("the run to end", lambda _i: "every job done" in job.log_text()
                            or "exited with status" in job.log_text())
        log = job.log_text()
        assert "every job done" in log, log[-4000:]
        assert "lost node(s) n3; resuming on n1, n2 (8 tasks)" in log, log[-4000:]
        assert info.get("Restarts") == "0", info  # the same Slurm job, never requeued
        ref, final = read_metrics(ref_job.run_dir), read_metrics(job.run_dir)
        # where each job resumed, and its newest checkpoint then (iterations past it were lost
        # with the ranks: at most one report period, as a checkpoint follows every report)
        resumed = {}
        for m in re.finditer(r"^job (\S+): continues from iteration (\d+) (.*)$", log, re.M):
            later = re.search(r"newest checkpoint, at iteration (\d+)", m.group(3))
            resumed[m.group(1)] = (int(m.group(2)), int(later.group(1)) if later else int(m.group(2)))
        for name, ref_trace in ref.jobs.items():
            got = final.jobs[name]
            assert got.status == "done", (name, got.status, got.reason)
            np.testing.assert_allclose(got.loss, ref_trace.loss, rtol=1e-9, atol=0, err_msg=name)
            if name in resumed:
                at, newest = resumed[name]
                # the job's pace in either run (the killed one's up to where it resumed)
                period = max(_per_report(np.asarray(ref_trace.time), ref.epoch_seconds),
                             _per_report(np.asarray(got.time[:at]), ref.epoch_seconds))
                print(f"job {name}: resumed at iteration {at}, newest checkpoint {newest}: "
                      f"{newest - at} checkpointed iterations redone (one report period: {period})")
                assert newest - at <= period, (name, newest - at, period)
    finally:
        job.cancel()
        # the lost node comes back, so Slurm can finish the job's clean-up
        subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, timeout=300, check=False)


def _lose_rank_0s_node(workdir: Path) -> tuple[Submitted, dict[str, str]]:
    """Submit, kill node n1 mid-run, wait for the guard's requeue, let Slurm have the node
    down and back, and wait for the restarted job's end."""
    job = submit(workdir)
    try:
        job.wait_for("the run to be midway", lambda _i: float(_status(job.run_dir).get("now", 0.0)) > 6.0)
        print(f"{time.strftime('%T')} {kill_node('n1')}")
        job.wait_for("the guard's requeue", lambda _i: "slaq guard:" in job.log_text())
        down = slurm.run_cmd(["scontrol", "update", "NodeName=n1", "State=DOWN", "Reason=killed-by-test"])
        assert down.returncode == 0, down.stderr
        subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, timeout=300, check=False)
        return job, job.wait_for("the requeued job's end", lambda i: int(i.get("Restarts", "0")) >= 1
                                 and i.get("JobState") in FINAL_STATES)
    finally:
        job.cancel()
        subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, timeout=300, check=False)


# Opt-in: the resumed launch after node n1 is started again has met slurmstepd's PMI-2 misread
# (PMI2_MISREAD) in 2 of 4 runs here, once hanging inside MPI_Init until the test gave up; and
# the test adds about 2 minutes to the tier.
RANK0_NODE = os.environ.get("SLAQ_MN_RANK0") == "1"


@pytest.mark.skipif(not RANK0_NODE, reason="losing rank 0's node is opt-in: set SLAQ_MN_RANK0=1")
def test_losing_rank_0s_node_requeues_the_job_which_resumes(
        tmp_path: Path, uninterrupted: tuple[Submitted, dict[str, str]]) -> None:
    """Node n1 holds rank 0 and the batch script: both die with it. With --no-kill Slurm would
    keep the job running on the other nodes with nothing in it; the guard step on another
    node sees the batch script's heartbeat stop and requeues the job, whose restart resumes the
    run. Slurm lets go of the dead node at its SlurmdTimeout (minutes); marking the node down
    is that same event now."""
    ref_job, ref_info = uninterrupted
    assert ref_info["JobState"] == "COMPLETED", "the uninterrupted run failed; see its own test"
    job, info = _lose_rank_0s_node(tmp_path / "first")
    if _pmi2_misread(job, info):
        job, info = _lose_rank_0s_node(tmp_path / "again")
    log = job.log_text()
    assert info["JobState"] == "COMPLETED", f"{info}\n{log[-4000:]}"
    assert "its node is lost; requeueing the job" in log, log[-4000:]
    assert f"restart 1: resuming {job.run_dir}" in log, log[-4000:]
    ref, final = read_metrics(ref_job.run_dir), read_metrics(job.run_dir)
    for name, ref_trace in ref.jobs.items():
        got = final.jobs[name]
        assert got.status == "done", (name, got.status, got.reason)
        np.testing.assert_allclose(got.loss, ref_trace.loss, rtol=1e-9, atol=0, err_msg=name)
