"""Multi-node tier: slaq-mpi on the emulated 3-node Slurm cluster of scripts/slurm-multinode.sh.

Each node of that cluster is one slurmd in its own UTS namespace (hostnames n1, n2, n3, 4 CPUs
each); the cluster has its own slurm.conf (SLURM_CONF), so it runs beside the single-node
cluster of the Slurm tier. The tests run whenever it answers; they skip otherwise, except under
CI (any true value of CI), where a cluster that is not up FAILS them. Jobs are watched by polling
``scontrol show job`` (a safety net of GIVE_UP seconds); no check depends on how long anything
takes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slaq_mpi.slurm import submit as slurm
from slaq_mpi.slurm.submit import SlurmError
from slaq_mpi.storage.metrics import read_metrics
from tests.conftest import ROOT, run_slaq, under_ci
from tests.test_slurm_live import FINAL_STATES, Submitted

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
    down = [f"{n} {s}" for n, s in states.items() if re.match(r"down|drain|fail", s)]
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


def submit(workdir: Path, config: Path = CONFIG, jobs: list[dict[str, Any]] | None = None,
           **slurm_keys: Any) -> Submitted:
    """``slaq submit`` of ``config`` (its jobs replaced by ``jobs`` if given) into ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load(config.read_text())
    raw["output_dir"] = str(workdir / "run")
    if jobs is not None:
        raw["jobs"] = jobs
    raw["slurm"].update({"python": sys.executable, "output": str(workdir / "slurm-%j.out"),
                         **slurm_keys})
    cfg = workdir / "multinode.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = run_slaq(["submit", str(cfg)], cwd=workdir, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"submitted batch job (\d+)", proc.stdout)
    assert found, proc.stdout
    return Submitted(workdir, found.group(1))


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


@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_six_jobs_on_three_nodes_each_packed(tmp_path: Path, launcher: str) -> None:
    extra = {}
    if launcher == "mpiexec":  # Hydra beside this Python (pip's mpich), not a system Open MPI
        extra["mpiexec"] = str(Path(sys.executable).parent / "mpiexec")
    job = submit(tmp_path, launcher=launcher, **extra)
    info = finished(job)
    log = job.log_text()
    assert info["JobState"] == "COMPLETED", f"{info}\n{log[-3000:]}"
    run = read_metrics(job.run_dir)
    assert {n: j.status for n, j in run.jobs.items()} == dict.fromkeys(run.jobs, "done"), log[-3000:]
    assert check_placements(job.run_dir) == set(NODES)
    report = run_slaq(["report", str(job.run_dir), "--no-plots"], timeout=120)
    assert report.returncode == 0, report.stderr
    assert re.search(r"nodes per job \(.*hosts n1, n2, n3\)", report.stdout), report.stdout
