"""Shared test fixtures: launching real ``mpiexec`` subprocesses."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mpiexec_path() -> str | None:
    """The mpiexec beside this Python (pip's mpich), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def run_mpi(n: int, args: list[str], cwd: Path | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` on ``n`` ranks under mpiexec; returns the finished process."""
    exe = mpiexec_path()
    if exe is None:
        pytest.fail("mpiexec not found: install the MPI tier with pip install '.[mpich]'")
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), full_env.get("PYTHONPATH", "")])
    cmd = [exe, "-n", str(n)]
    if open_mpi(exe):  # the tier also runs against a site Open MPI (mpi4py built for it)
        cmd += ["--map-by", ":OVERSUBSCRIBE"]
        full_env.update(ROOT_OK)
    return subprocess.run(
        [*cmd, sys.executable, *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


@functools.cache
def open_mpi(exe: str) -> bool:
    """Whether ``exe`` is Open MPI's launcher (cached)."""
    from slaq_mpi.runtime.launch import is_open_mpi

    return is_open_mpi(exe)


# Open MPI's mpiexec refuses to run as root without these (a container or CI machine); MPICH
# ignores them.
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}


def run_slaq(args: list[str], cwd: Path | None = None, timeout: float = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``slaq`` CLI (``python -m slaq_mpi``) as a subprocess."""
    full_env = {**os.environ, **ROOT_OK, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), full_env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "slaq_mpi", *args],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout,
    )
