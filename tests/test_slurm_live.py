"""Slurm tier: ``slaq submit`` against a real Slurm (scripts/local-slurm.sh starts one on localhost).

Runs whenever Slurm answers; skips otherwise, except under CI (any true value of CI), where a
silent Slurm FAILS. The runs use tests/configs/slurm-small.yaml (3 jobs, 4 ranks, 1 s epochs,
about 30 s). Jobs are watched by polling ``scontrol show job`` and the job's log until what is
awaited happens (a safety net of GIVE_UP seconds); a job still alive at the end of a test is
cancelled. No check depends on how long anything takes.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import yaml

from slaq_mpi.slurm import submit as slurm
from slaq_mpi.slurm.submit import SlurmError
from tests.conftest import ROOT, run_slaq, under_ci
from tests.slurm_jobs import FINAL_STATES, Submitted, submit_config

pytestmark = pytest.mark.slurm

CONFIG = Path(__file__).resolve().parent / "configs" / "slurm-small.yaml"


def _slurm_problem() -> str | None:
    """Why Slurm cannot take jobs here, or None when sbatch and slurmctld answer."""
    if shutil.which("sbatch") is None:
        return "sbatch is not installed"
    try:
        proc = slurm.run_cmd(["sinfo", "-h", "-o", "%T"], timeout=20)
    except SlurmError as exc:
        return str(exc)
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip()}"
    if not proc.stdout.split():
        return "sinfo lists no nodes"
    return None


@pytest.fixture(scope="module", autouse=True)
def slurm_up() -> None:
    """Skip the module without Slurm, but fail it in CI."""
    problem = _slurm_problem()
    if problem is None:
        return
    if under_ci():
        pytest.fail(f"under CI and Slurm does not answer ({problem}); start it with scripts/ci-slurm.sh")
    pytest.skip(f"no Slurm here ({problem}); start one with scripts/local-slurm.sh")


# A job that takes at least 0.02 s per iteration, 40 s in all, on any machine: a run with it is
# still going after a stop, a requeue and a few epochs more.
PACED_JOB = {"name": "paced", "algorithm": f"{ROOT / 'tests' / 'solvers' / 'paced.py'}:Paced",
             "hyperparameters": {"pace": 0.02}, "stop": {"max_iterations": 2000},
             "dataset": {"generator": "classification", "rows": 2000, "features": 10, "seed": 4}}


def _submit(workdir: Path, extra_jobs: tuple[dict[str, Any], ...] = (), **slurm_keys: Any) -> Submitted:
    return submit_config(CONFIG, workdir, extra_jobs, **slurm_keys)


def _read_metrics(run_dir: Path) -> dict[str, dict[str, Any]]:
    with h5py.File(run_dir / "metrics.h5", "r") as f:
        return {name: {"status": _text(g.attrs["status"]), "loss": np.asarray(g["loss"][()]),
                       "time": np.asarray(g["time"][()])}
                for name, g in f["jobs"].items()}


def _some_job_midway(run_dir: Path) -> bool:
    try:
        metrics = _read_metrics(run_dir)
    except (OSError, KeyError):
        return False
    return any(len(m["loss"]) > 0 and m["status"] != "done" for m in metrics.values())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _epoch_numbers(log: str) -> list[int]:
    return [int(line.split()[1]) for line in log.splitlines()
            if line.startswith("epoch ") and len(line.split()) > 1 and line.split()[1].isdigit()]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Submitted, dict[str, str]]]:
    """An uninterrupted run of the small config; also the reference for the requeue test."""
    job = _submit(tmp_path_factory.mktemp("plain"))
    try:
        yield job, job.wait_final()
    finally:
        job.cancel()


def test_submit_runs_every_job_to_the_end(plain_run: tuple[Submitted, dict[str, str]]) -> None:
    job, info = plain_run
    log = job.log_text()
    assert info["JobState"] == "COMPLETED", f"{info}\n{log[-3000:]}"
    assert info["ExitCode"] == "0:0"
    metrics = _read_metrics(job.run_dir)
    expected = {j["name"] for j in yaml.safe_load(CONFIG.read_text())["jobs"]}
    assert set(metrics) == expected
    assert {name: m["status"] for name, m in metrics.items()} == {name: "done" for name in expected}
    epochs = _epoch_numbers(log)
    assert len(epochs) >= 3, log[-3000:]
    assert epochs == sorted(set(epochs)), "per-epoch progress lines are missing or repeated"
    assert "slaq.sbatch:" in log and "every job done" in log


def test_usr1_requeues_and_resumes_without_losing_work(
        plain_run: tuple[Submitted, dict[str, str]], tmp_path: Path) -> None:
    ref_job, ref_info = plain_run
    assert ref_info["JobState"] == "COMPLETED", "the reference run failed; see the test above"
    reference = _read_metrics(ref_job.run_dir)

    job = _submit(tmp_path / "requeued")
    try:
        # Mid-run: a few epochs logged and some unfinished job with iterations on record.
        job.wait_for("three epochs", lambda i: i.get("JobState") in FINAL_STATES
                     or (len(_epoch_numbers(job.log_text())) >= 3 and _some_job_midway(job.run_dir)))
        seen = _read_metrics(job.run_dir)
        done_before = {name for name, m in seen.items() if m["status"] == "done"}
        assert any(len(m["loss"]) > 0 for name, m in seen.items() if name not in done_before)
        assert job.info().get("JobState") == "RUNNING", "the run ended before it could be signalled"
        proc = slurm.run_cmd(["scancel", "--signal=USR1", "--batch", job.job_id])
        assert proc.returncode == 0, proc.stderr

        info = job.wait_for("requeue and the end", lambda i: int(i.get("Restarts", "0")) >= 1
                            and i.get("JobState") in FINAL_STATES)
        log = job.log_text()
        assert info["JobState"] == "COMPLETED", f"{info}\n{log[-4000:]}"
        assert "got SIGUSR1: asking for a graceful stop" in log
        assert "requeueing" in log and f"resuming {job.run_dir}" in log

        # No job starts again from iteration 0: the history seen before the signal survives as it
        # was, iteration times included (a job run again from the start would have later times).
        final = _read_metrics(job.run_dir)
        for name, before in seen.items():
            k = len(before["loss"])
            if k == 0 or name in done_before:
                continue
            assert np.array_equal(final[name]["time"][:k], before["time"]), \
                f"{name}: its first {k} iterations were run again after the requeue"
            assert np.array_equal(final[name]["loss"][:k], before["loss"]), name

        assert {n: m["status"] for n, m in final.items()} == {n: "done" for n in reference}
        for name, ref in reference.items():
            got = final[name]["loss"]
            assert len(got) == len(ref["loss"]), f"{name}: {len(got)} vs {len(ref['loss'])} iterations"
            np.testing.assert_allclose(got, ref["loss"], rtol=1e-9, atol=0, err_msg=name)
    finally:
        job.cancel()


def test_mpiexec_launcher_inside_the_allocation(plain_run: tuple[Submitted, dict[str, str]],
                                               tmp_path: Path) -> None:
    ref_job, ref_info = plain_run
    assert ref_info["JobState"] == "COMPLETED", "the reference run failed; see the first test"
    mpiexec = Path(sys.executable).parent / "mpiexec"
    job = _submit(tmp_path / "mpiexec", launcher="mpiexec",
                  mpiexec=str(mpiexec) if mpiexec.exists() else "mpiexec")
    try:
        info = job.wait_final()
        log = job.log_text()
        assert info["JobState"] == "COMPLETED", f"{info}\n{log[-3000:]}"
        assert "not inside an MPI launch" not in log, "slaq run started its own mpiexec"
        final = _read_metrics(job.run_dir)
        for name, ref in _read_metrics(ref_job.run_dir).items():
            assert final[name]["status"] == "done"
            np.testing.assert_allclose(final[name]["loss"], ref["loss"], rtol=1e-9, atol=0, err_msg=name)
    finally:
        job.cancel()


def test_scancel_ends_the_job_for_good_and_a_second_run_is_refused(tmp_path: Path) -> None:
    job = _submit(tmp_path / "cancelled")
    try:
        job.wait_for("the run to own its directory", lambda i: i.get("JobState") in FINAL_STATES
                     or (job.run_dir / "state.json").is_file())
        assert job.info().get("JobState") == "RUNNING", "the run ended before it could be cancelled"
        # a second run into the same directory is refused while the first holds it
        again = run_slaq(["run", "--resume", str(job.run_dir)], cwd=tmp_path, timeout=120)
        assert again.returncode == 2, again.stdout + again.stderr
        assert "another slaq run is using it" in again.stderr and f"Slurm job {job.job_id}" in again.stderr
        assert "starting" not in again.stdout  # refused before any rank started

        assert slurm.run_cmd(["scancel", job.job_id]).returncode == 0
        # JobState leaves COMPLETING once every process of the job, the batch script included,
        # has ended: from then on nothing can requeue it (a requeue shows as a restart at once)
        info = job.wait_for("the end of the batch script", lambda i: i.get("JobState") in FINAL_STATES
                            or int(i.get("Restarts", "0")) > 0)
        log = job.log_text()
        assert info.get("JobState") == "CANCELLED", f"{info}\n{log[-3000:]}"
        assert info.get("Restarts") == "0", f"the cancelled job was requeued\n{log[-3000:]}"
        assert "requeueing" not in log
    finally:
        job.cancel()


def test_max_restarts_ends_the_requeues(tmp_path: Path) -> None:
    # slurm.max_restarts: 1 (docs/slurm.md): the first graceful stop requeues the job, the
    # second (its restart count is 1) stops it for good, resumable, with exit status 75
    job = _submit(tmp_path / "limited", extra_jobs=(PACED_JOB,), max_restarts=1)
    try:
        job.wait_for("three epochs", lambda i: i.get("JobState") in FINAL_STATES
                     or len(_epoch_numbers(job.log_text())) >= 3)
        assert slurm.run_cmd(["scancel", "--signal=USR1", "--batch", job.job_id]).returncode == 0
        job.wait_for("the restart and two epochs after it", lambda i: i.get("JobState") in FINAL_STATES
                     or (int(i.get("Restarts", "0")) >= 1 and i.get("JobState") == "RUNNING"
                         and len(_epoch_numbers(_after_resume(job))) >= 2))
        assert job.info().get("JobState") == "RUNNING", f"{job.info()}\n{job.log_text()[-3000:]}"
        assert slurm.run_cmd(["scancel", "--signal=USR1", "--batch", job.job_id]).returncode == 0
        info = job.wait_final()
        log = job.log_text()
        assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0", f"{info}\n{log[-3000:]}"
        assert info["Restarts"] == "1", f"{info}\n{log[-3000:]}"
        assert log.count("requeueing") == 1, log[-3000:]
        last = [ln for ln in log.splitlines() if ln.startswith("slaq.sbatch:")][-1]
        assert "restart 1: stopped with checkpoints; resume with: slaq run --resume" in last, last
        assert not json.loads((job.run_dir / "state.json").read_text())["finished"]
    finally:
        job.cancel()


def _after_resume(job: Submitted) -> str:
    """The job's log from its resumed start on (empty before it)."""
    log = job.log_text()
    at = log.find(f"resuming {job.run_dir}")
    return "" if at < 0 else log[at:]


def test_an_impossible_request_is_refused_not_left_pending(tmp_path: Path) -> None:
    cpus = sum(int(n) for n in slurm.run_cmd(["sinfo", "-h", "-o", "%c"]).stdout.split())
    queued = slurm.run_cmd(["squeue", "-h", "-o", "%i"]).stdout.split()
    raw = yaml.safe_load(CONFIG.read_text())
    raw["output_dir"] = str(tmp_path / "run")
    raw["slurm"] = {"python": sys.executable, "ntasks": cpus + 8}  # more than the cluster has
    cfg = tmp_path / "big.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = run_slaq(["submit", str(cfg)], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Slurm would never start job" in lines[0], proc.stderr
    assert "Reason=PartitionConfig" in lines[0] and "it was cancelled" in lines[0]
    found = re.search(r"never start job (\d+)", lines[0])
    assert found, lines[0]
    assert slurm.job_info(found.group(1)).get("JobState") in (None, "CANCELLED")
    assert slurm.run_cmd(["squeue", "-h", "-o", "%i"]).stdout.split() == queued  # nothing left queued


def test_a_job_waiting_for_drained_nodes_is_submitted(tmp_path: Path) -> None:
    # maintenance: every node drained. The job will run afterwards, so it must be queued.
    nodes = slurm.run_cmd(["sinfo", "-h", "-o", "%n"]).stdout.split()
    for node in nodes:
        assert slurm.run_cmd(["scontrol", "update", f"nodename={node}", "state=drain",
                              "reason=slaq-test"]).returncode == 0
    job = None
    try:
        job = _submit(tmp_path)
        info = job.info()
        assert info.get("JobState") == "PENDING", info
        assert info.get("Reason") not in slurm.NEVER_STARTS, info
    finally:
        if job is not None:
            job.cancel()
        for node in nodes:
            slurm.run_cmd(["scontrol", "update", f"nodename={node}", "state=resume"])


def test_a_job_added_before_a_requeue_runs_after_it(tmp_path: Path) -> None:
    # slaq add into the running allocation, then a graceful stop that requeues it: the requeued
    # run resumes with the added job (kept in RUN_DIR/added.yaml) and finishes it
    job = _submit(tmp_path / "added", extra_jobs=(PACED_JOB,))
    added = {**PACED_JOB, "name": "added-later", "stop": {"max_iterations": 600}}
    try:
        job.wait_for("the run's spool", lambda i: i.get("JobState") in FINAL_STATES
                     or ((job.run_dir / "spool").is_dir() and _some_job_midway(job.run_dir)))
        assert job.info().get("JobState") == "RUNNING", job.log_text()[-3000:]
        jobs_file = tmp_path / "more.yaml"
        jobs_file.write_text(yaml.safe_dump([added]))
        res = run_slaq(["add", str(job.run_dir), str(jobs_file), "--wait"], cwd=tmp_path, timeout=300)
        assert res.returncode == 0 and "job added-later: first assignment" in res.stdout, \
            res.stdout + res.stderr + job.log_text()[-3000:]
        proc = slurm.run_cmd(["scancel", "--signal=USR1", "--batch", job.job_id])
        assert proc.returncode == 0, proc.stderr
        info = job.wait_for("requeue and the end", lambda i: int(i.get("Restarts", "0")) >= 1
                            and i.get("JobState") in FINAL_STATES)
        log = job.log_text()
        assert info["JobState"] == "COMPLETED", f"{info}\n{log[-4000:]}"
        assert "requeueing" in log and f"resuming {job.run_dir}" in log, log[-4000:]
        final = _read_metrics(job.run_dir)
        assert final["added-later"]["status"] == "done", final["added-later"]["status"]
        assert len(final["added-later"]["loss"]) == 600
        assert {m["status"] for m in final.values()} == {"done"}
    finally:
        job.cancel()
