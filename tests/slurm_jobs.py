"""One `slaq submit` of a test config on a running Slurm, and watching the job it made: shared
by the Slurm tier (tests/test_slurm_live.py) and the multi-node tier (tests/test_multinode_live.py).
Jobs are watched by polling ``scontrol show job`` (a safety net of GIVE_UP seconds)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from slaq_mpi.slurm import submit as slurm
from tests.conftest import run_slaq

FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
GIVE_UP = 900.0  # seconds: only a safety net so a broken run cannot hang the suite


class Submitted:
    """One `slaq submit` of a test config into a directory of its own."""

    def __init__(self, workdir: Path, job_id: str) -> None:
        self.workdir = workdir
        self.job_id = job_id
        self.run_dir = workdir / "run"
        self.log = workdir / f"slurm-{job_id}.out"

    def info(self) -> dict[str, str]:
        return slurm.job_info(self.job_id)

    def wait_for(self, what: str, ready: Callable[[dict[str, str]], bool]) -> dict[str, str]:
        """Poll scontrol until ``ready(info)``; fail with the log if the safety net runs out."""
        deadline = time.monotonic() + GIVE_UP
        while time.monotonic() < deadline:
            info = self.info()
            if ready(info):
                return info
            if not info:
                pytest.fail(f"job {self.job_id}: Slurm no longer knows it\n{self.log_text()[-3000:]}")
            time.sleep(0.5)
        pytest.fail(f"job {self.job_id}: gave up waiting for {what}; last state {self.info()}\n"
                    f"{self.log_text()[-3000:]}")

    def wait_final(self) -> dict[str, str]:
        return self.wait_for("the end", lambda i: i.get("JobState") in FINAL_STATES)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else "(no log yet)"

    def cancel(self) -> None:
        if self.info().get("JobState") not in FINAL_STATES | {None}:
            slurm.run_cmd(["scancel", self.job_id])



def submit_config(config: Path, workdir: Path, extra_jobs: tuple[dict[str, Any], ...] = (),
                  **slurm_keys: Any) -> Submitted:
    """``slaq submit`` of ``config`` (a YAML of tests/configs) into ``workdir``: its run
    directory ``workdir/run``, its log ``workdir/slurm-JOBID.out``, this Python, the
    ``extra_jobs`` added and the ``slurm_keys`` set in its ``slurm:`` section."""
    workdir.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load(config.read_text())
    raw["output_dir"] = str(workdir / "run")
    raw["jobs"] += list(extra_jobs)
    raw.setdefault("slurm", {})
    raw["slurm"].update({"python": sys.executable, "output": str(workdir / "slurm-%j.out"), **slurm_keys})
    cfg = workdir / config.name
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = run_slaq(["submit", str(cfg)], cwd=workdir, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"submitted batch job (\d+)", proc.stdout)
    assert found, proc.stdout
    return Submitted(workdir, found.group(1))
