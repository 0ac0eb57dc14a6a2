"""The code stays ruff-clean and passes mypy (pyproject.toml holds both tools' settings)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_finds_nothing() -> None:
    proc = _tool("ruff", "check", "slaq_mpi", "jobs", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing() -> None:
    proc = _tool("mypy", "--cache-dir", "/dev/null")
    assert proc.returncode == 0, proc.stdout + proc.stderr
