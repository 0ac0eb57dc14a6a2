"""Launching ``slaq`` and ``mpiexec`` from tests, each with a time limit.

A process that outlives its limit is killed with every process it started (mpiexec and the
ranks included), and the test fails showing what it had printed.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Open MPI's mpiexec refuses to run as root without these (a container or CI machine); MPICH
# ignores them.
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if os.geteuid() == 0 else {}

SHOWN = 4000  # characters of each stream shown when a process is stopped for taking too long


def mpiexec_path() -> str | None:
    """The mpiexec beside this Python (pip's mpich), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


@functools.cache
def open_mpi(exe: str) -> bool:
    """Whether ``exe`` is Open MPI's launcher (cached)."""
    from slaq_mpi.runtime.launch import is_open_mpi

    return is_open_mpi(exe)


def slaq_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``slaq`` process started by a test: this checkout first on the path."""
    full = {**os.environ, **ROOT_OK, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    return full


def descendants(pid: int) -> list[int]:
    """Every live process started by ``pid``, directly or not (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process it started (found before any is killed)."""
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _tail(text: str | bytes | None) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-SHOWN:]


def run_bounded(cmd: Sequence[str], timeout: float, cwd: Path | None = None,
                env: dict[str, str] | None = None, stdout: int = subprocess.PIPE
                ) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to its end, capturing its output (``stdout``: a descriptor to write to
    instead); fail the test if it takes over ``timeout`` s."""
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        pytest.fail(f"{shlex.join(cmd)} did not end within {timeout:g} s and was killed.\n"
                    f"--- its stdout ---\n{_tail(out)}\n--- its stderr ---\n{_tail(err)}")
    except BaseException:  # the test was interrupted: leave no process behind
        kill_tree(proc.pid)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def run_mpi(n: int, args: list[str], cwd: Path | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` on ``n`` ranks under mpiexec; returns the finished process."""
    exe = mpiexec_path()
    if exe is None:
        pytest.fail("mpiexec not found: install the MPI tier with pip install '.[mpich]'")
    full_env = slaq_env(env)
    cmd = [exe, "-n", str(n)]
    if open_mpi(exe):  # the tier also runs against a site Open MPI (mpi4py built for it)
        cmd += ["--map-by", ":OVERSUBSCRIBE"]
    return run_bounded([*cmd, sys.executable, *args], timeout, cwd=cwd, env=full_env)


def run_slaq(args: list[str], cwd: Path | None = None, timeout: float = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``slaq`` CLI (``python -m slaq_mpi``) as a subprocess."""
    return run_bounded([sys.executable, "-m", "slaq_mpi", *args], timeout, cwd=cwd, env=slaq_env(env))


class Started:
    """A ``slaq`` CLI process running in the background, its output going to files in ``logs``
    (readable while it runs)."""

    def __init__(self, args: list[str], cwd: Path, logs: Path, env: dict[str, str] | None = None) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        n = len(list(logs.glob("slaq-*.out")))
        self.out_path, self.err_path = logs / f"slaq-{n}.out", logs / f"slaq-{n}.err"
        self.cmd = [sys.executable, "-m", "slaq_mpi", *args]
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(self.cmd, cwd=cwd, env=slaq_env(env), stdout=out, stderr=err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def shown(self) -> str:
        """The output so far, for a failure message."""
        return f"--- stdout ---\n{_tail(self.out())}\n--- stderr ---\n{_tail(self.err())}"

    def send(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait_for(self, what: str, ready: Callable[[], bool], timeout: float = 180) -> None:
        """Poll ``ready()`` until it holds; fail if the process ends first or ``timeout`` passes."""
        end = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                pytest.fail(f"{what}: the process ended first (status {self.proc.returncode})\n"
                            f"{self.shown()}")
            if time.monotonic() > end:
                self.stop()
                pytest.fail(f"{what}: not seen within {timeout:g} s\n{self.shown()}")
            time.sleep(0.05)

    def finish(self, timeout: float = 180) -> int:
        """Wait for the end; returns the exit status. Fails the test (killing the process and
        all it started) after ``timeout`` s."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"{shlex.join(self.cmd)} did not end within {timeout:g} s and was killed.\n"
                        f"{self.shown()}")

    def stop(self) -> None:
        """Kill the process and all it started, if it still runs."""
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait()
