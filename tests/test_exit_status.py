"""The README's exit statuses 130 (Ctrl-C where slaq has no graceful stop of its own: the checks
before a launch, ``data``, ``report``) and 141 (``curves record`` whose reader went away: it
finishes its file first), each caught at a point the test controls: a command waiting to read
a FIFO, or to write into a full pipe."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_slaq
from tests.processes import kill_tree, run_bounded, slaq_env

pytestmark = pytest.mark.slow

WAIT = 120.0  # seconds: the most a command may take to reach the awaited point


def _start(args: list[str], cwd: Path, stdout: int) -> subprocess.Popen[str]:
    # as from a terminal (a background job of a shell ignores SIGINT)
    return subprocess.Popen([sys.executable, "-m", "slaq_mpi", *args], cwd=cwd, env=slaq_env(),
                            stdout=stdout, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _until(what: str, proc: subprocess.Popen[str], ready: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT
    while not ready():
        if proc.poll() is not None or time.monotonic() > end:
            kill_tree(proc.pid)
            _, err = proc.communicate()
            pytest.fail(f"{what}: not reached (status {proc.returncode})\n{err[-3000:]}")
        time.sleep(0.02)


def _interrupted(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C: the command ends with status 130 and one line, no traceback; returns its stdout."""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        pytest.fail(f"no end within {WAIT:g} s of the Ctrl-C\n{proc.communicate()[1][-3000:]}")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "slaq: interrupted", err
    return out or ""


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full: the first write into it waits for a reader."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETFL, os.O_NONBLOCK)
    try:
        while True:
            os.write(write, b"x" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(write, fcntl.F_SETFL, 0)
    return read, write


def _writing(pid: int) -> bool:
    """Whether ``pid`` waits inside a write to a pipe (its kernel wait channel, or else its
    current system call: write(2) to descriptor 1)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        if "pipe" in wchan and "write" in wchan:
            return True
        return Path(f"/proc/{pid}/syscall").read_text().startswith("1 0x1 ")
    except OSError:
        return False


def _interrupted_while_printing(args: list[str], cwd: Path) -> None:
    read, write = _full_pipe()
    try:
        proc = _start(args, cwd, write)
        os.close(write)
        _until("the command printing into a full pipe", proc, lambda: _writing(proc.pid))
        _interrupted(proc)
    finally:
        os.close(read)


def test_ctrl_c_during_the_checks_before_a_launch_exits_130(tmp_path: Path) -> None:
    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)  # `slaq run` waits inside its first check, reading the config
    proc = _start(["run", str(fifo)], tmp_path, subprocess.PIPE)
    writer: list[int] = []

    def reading() -> bool:  # a writer can open a FIFO without waiting once its reader has
        try:
            writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return False
        return True

    try:
        _until("slaq run reading its config", proc, reading)
        out = _interrupted(proc)
    finally:
        for fd in writer:
            os.close(fd)
    assert "starting" not in out  # no rank started


def test_ctrl_c_in_data_exits_130(tmp_path: Path) -> None:
    _interrupted_while_printing(["data", "make", "classification", "d.h5", "--rows", "1000",
                                 "--features", "5"], tmp_path)


def test_ctrl_c_in_report_exits_130(tmp_path: Path) -> None:
    sim = run_slaq(["simulate", str(ROOT / "configs" / "quickstart.yaml"), "--policy", "fair",
                    "--out", "sim"], cwd=tmp_path)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    _interrupted_while_printing(["report", "sim", "--no-plots"], tmp_path)


def test_curves_record_whose_reader_went_away_finishes_its_file_and_exits_141(tmp_path: Path) -> None:
    args = ["curves", "record", "--algorithm", "linreg", "--seed", "3"]
    kept = run_slaq([*args, "--out", "kept.npz"], cwd=tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    read, write = os.pipe()
    os.close(read)  # the reader is gone before a line is written (`| head` that has ended)
    try:
        proc = run_bounded([sys.executable, "-m", "slaq_mpi", *args, "--out", "cut.npz"], WAIT, cwd=tmp_path,
                           env=slaq_env(), stdout=write)
    finally:
        os.close(write)
    assert proc.returncode == 141 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr)
    with np.load(tmp_path / "kept.npz") as want, np.load(tmp_path / "cut.npz") as got:
        assert sorted(got.files) == sorted(want.files)
        timed = want["algorithms"] == "linreg"  # the seconds per cell measured by each recording
        for key in want.files:
            if key == "cost_per_cell":
                assert np.array_equal(got[key][~timed], want[key][~timed]) and np.all(got[key][timed] > 0)
            else:
                assert np.array_equal(got[key], want[key]), key
