"""One code version per run: with slaq-mpi installed as a plain (non-editable) package and
``slaq run`` started from inside a checkout that has been edited since, every rank runs the
installed code, as the command itself does; the edited checkout is never imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from tests.processes import ROOT, ROOT_OK, mpiexec_path, run_bounded

pytestmark = pytest.mark.mpi

POISON = "the edited checkout was imported"


def _copy_checkout(dest: Path) -> None:
    """The project's tracked files (or, outside git, its tree without environments)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
        return
    shutil.copytree(ROOT, dest, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".git", ".venv*", "runs", "__pycache__", "*.egg-info"))


def _install(checkout: Path, venv: Path) -> Path:
    """A new virtual environment with ``checkout`` installed in it non-editably (its
    dependencies taken from this test's environment, its build backend from the package
    index); returns its ``slaq`` command."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for lib in Path(sys.prefix, "lib").iterdir():  # pip's MPI wheel: mpi4py looks in the prefix
        if not (venv / "lib" / lib.name).exists():
            (venv / "lib" / lib.name).symlink_to(lib)
    out = run_bounded([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                       str(checkout)], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return venv / "bin" / "slaq"


def test_an_edited_checkout_cannot_change_the_code_a_plain_install_runs(tmp_path: Path) -> None:
    mpiexec = mpiexec_path()
    if mpiexec is None:
        pytest.fail("mpiexec not found: install the MPI tier with pip install '.[mpich]'")
    checkout = tmp_path / "checkout"
    _copy_checkout(checkout)
    slaq = _install(checkout, tmp_path / "venv")
    # the edit after the install: any rank importing the checkout's worker fails the run
    worker = checkout / "slaq_mpi" / "runtime" / "worker.py"
    worker.write_text(worker.read_text() + f"\nraise RuntimeError({POISON!r})\n")
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "small8.yaml").read_text())
    raw.update(ranks=3, epoch_seconds=0.3, output_dir="runs/version")
    raw["jobs"] = raw["jobs"][:2]
    for job in raw["jobs"]:
        job["stop"]["max_iterations"] = 8
    (checkout / "version.yaml").write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ROOT_OK, PATH=os.pathsep.join([str(Path(mpiexec).parent), env.get("PATH", "")]))

    run = run_bounded([str(slaq), "run", "version.yaml"], timeout=300, cwd=checkout, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert POISON not in run.stdout + run.stderr
    assert "job l1: done" in run.stdout and "job k1: done" in run.stdout

    # the control: the edit is live for whatever imports the checkout (here python -c inside it)
    edited = run_bounded([str(slaq.parent / "python"), "-c", "import slaq_mpi.runtime.worker"],
                         timeout=60, cwd=checkout, env=env)
    assert edited.returncode != 0 and POISON in edited.stderr
    # and a run started from the checkout itself imports it on every rank: the ranks that cannot
    # start end the run at once (exit 3), naming the error, instead of leaving rank 0 waiting
    shadowed = run_bounded([str(slaq.parent / "python"), "-m", "slaq_mpi", "run", "version.yaml"],
                           timeout=180, cwd=checkout, env=env)
    assert shadowed.returncode == 3, shadowed.stdout[-2000:] + shadowed.stderr[-2000:]
    assert "at its start" in shadowed.stderr and POISON in shadowed.stderr
