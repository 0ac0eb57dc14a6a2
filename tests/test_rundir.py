"""One run at a time per run directory (slaq_mpi.storage.rundir), as `slaq run` and `slaq submit` use it."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slaq_mpi import cli
from slaq_mpi.config import experiment as config
from slaq_mpi.errors import ConfigError
from slaq_mpi.storage import rundir


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """A run directory whose lock another holder has (released at the end of the test)."""
    run_dir = tmp_path / "runs" / "tiny"
    path = rundir.lock_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.write("pid 123 on node7, Slurm job 35\n")
        fh.flush()
        yield run_dir


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: tiny
        output_dir: {tmp_path / 'runs' / 'tiny'}
        ranks: 3
        jobs:
          - name: a
            algorithm: logreg
            dataset: {{generator: classification, rows: 100, features: 3}}
        """))
    return path


def test_lock_file_sits_beside_the_run_directory(tmp_path: Path) -> None:
    assert rundir.lock_path(tmp_path / "runs" / "q") == tmp_path / "runs" / ".q.lock"


def test_a_held_run_directory_is_refused_naming_the_holder(held: Path) -> None:
    with pytest.raises(ConfigError, match="another slaq run is using it.*pid 123 on node7, Slurm job 35"):
        rundir.check_free(held)


def test_lock_is_released_when_its_holder_ends(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    code = ("import sys, time; from slaq_mpi.storage import rundir; rundir.hold(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {proc.pid} on "):
            rundir.check_free(run_dir)
    finally:
        proc.kill()  # no clean exit: the kernel releases the lock
        proc.wait()
    rundir.check_free(run_dir)  # free again
    rundir.check_free(run_dir)  # checking takes no lock
    rundir.check_free(tmp_path / "deep" / "runs" / "x")
    assert not (tmp_path / "deep").exists()  # and creates nothing (slaq submit --dry-run)


def test_only_a_stop_file_older_than_the_start_is_removed(tmp_path: Path) -> None:
    stop = tmp_path / rundir.STOP_FILE
    assert not rundir.clear_stale_stop(tmp_path, time.time())  # none there
    stop.touch()
    os.utime(stop, (time.time() - 100, time.time() - 100))
    started = time.time() - 10
    assert rundir.clear_stale_stop(tmp_path, started) and not stop.exists()
    stop.touch()  # made after the start: a real stop request
    assert not rundir.clear_stale_stop(tmp_path, started) and stop.exists()


def test_slaq_run_refuses_a_held_run_directory_before_any_rank(held: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def no_launch(*args: object, **kwargs: object) -> None:
        raise AssertionError("mpiexec started")

    monkeypatch.setattr(subprocess, "Popen", no_launch)
    for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    (held / "state.json").parent.mkdir(parents=True, exist_ok=True)
    (held / "metrics.h5").write_bytes(b"keep")
    assert cli.main(["run", str(_config(tmp_path))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another slaq run is using it" in err[0]
    assert (held / "metrics.h5").read_bytes() == b"keep"  # not moved aside, not touched


def test_more_ranks_than_this_machine_can_hold_are_refused_before_any_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.config import memory
    from slaq_mpi.runtime import launch

    def no_launch(*args: object, **kwargs: object) -> None:
        raise AssertionError("mpiexec started")

    monkeypatch.setattr(subprocess, "Popen", no_launch)
    for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
                *launch._ALLOCATION_VARS):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(memory, "cgroup_limit", lambda: None)
    monkeypatch.setattr(memory, "physical_memory", lambda: 2 * launch.RANK_BYTES)  # room for 2 ranks
    cfg = _config(tmp_path)  # 3 ranks
    assert cli.main(["run", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ranks: 3 is not allowed; 3 ranks on this machine need at least 192 MiB" \
        in err[0]
    assert "lower ranks to at most 2" in err[0]
    assert not (tmp_path / "runs").exists()
    assert cli.main(["validate", str(cfg)]) == 0  # a config for a cluster is not wrong
    assert "note: slaq run would refuse it here: ranks: 3" in capsys.readouterr().out
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # in an allocation mpiexec may use several machines
    launch.check_local_ranks(3)
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setattr(memory, "physical_memory", lambda: None)  # unknown: not checked
    launch.check_local_ranks(3)


def test_validate_notes_a_run_in_progress(held: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    held.mkdir(parents=True)
    (held / "config.yaml").write_text("name: tiny\n")
    assert cli.main(["validate", str(_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "note: slaq run would refuse it now" in out and "pid 123 on node7" in out, out


def test_slaq_submit_refuses_a_held_run_directory(held: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.slurm import submit as slurm

    calls: list[object] = []
    monkeypatch.setattr(slurm, "run_cmd", lambda *a, **k: calls.append(a))
    assert cli.main(["submit", str(_config(tmp_path))]) == 2
    assert calls == []  # nothing submitted
    assert "another slaq run is using it" in capsys.readouterr().err


def test_move_aside_never_overwrites(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert rundir.move_aside(run) is None  # nothing there
    run.mkdir()
    assert rundir.move_aside(run) is None  # empty: nothing to keep
    names = []
    for i in range(3):  # within one second the stamp repeats; each keeps its own name
        run.mkdir(exist_ok=True)
        (run / "f").write_text(str(i))
        aside = rundir.move_aside(run)
        assert aside is not None and not run.exists()
        names.append(aside)
    assert len(set(names)) == 3
    assert sorted((p / "f").read_text() for p in names) == ["0", "1", "2"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        rundir.move_aside(tmp_path / "file")


def test_a_run_dir_that_is_a_link_stays_one_and_stays_locked(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch" / "exp"
    scratch.mkdir(parents=True)
    (scratch / "metrics.h5").write_text("earlier run")
    (tmp_path / "runs").mkdir()
    link = tmp_path / "runs" / "exp"
    link.symlink_to(scratch)
    rundir.hold(link)
    try:
        aside = rundir.move_aside(link)
        assert aside is not None and aside.parent == scratch.parent  # moved on scratch
        assert (aside / "metrics.h5").read_text() == "earlier run"
        assert link.is_symlink() and link.resolve() == scratch and scratch.is_dir()
        assert not any(scratch.iterdir())
        assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["exp"]
        assert rundir.holder_of(link) is not None  # the lock taken through the link still holds
    finally:
        rundir._held.pop().close()


def test_the_start_is_when_slaq_run_launched_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    from slaq_mpi.runtime.launch import start_time

    monkeypatch.delenv("SLAQ_LAUNCHED_AT", raising=False)
    assert start_time(100.0) == 100.0
    monkeypatch.setenv("SLAQ_LAUNCHED_AT", "96.5")  # the ranks took 3.5 s to start
    assert start_time(100.0) == 96.5
    monkeypatch.setenv("SLAQ_LAUNCHED_AT", "not a time")
    assert start_time(100.0) == 100.0


def _fake_launch(monkeypatch: pytest.MonkeyPatch, run_dir: Path, open_mpi: bool, status: int,
                 rank0_starts: bool, signals: tuple[int, ...] = (), env: dict[str, str] | None = None,
                 started: float = 1.0, early: tuple[int, ...] = ()) -> tuple[int, list[str], list[int]]:
    """_relaunch with a fake launcher: its status, the command it got, the signals it was sent
    (and the launcher's environment in ``env``). ``early`` signals come while the ranks start,
    ``signals`` once rank 0 has begun (if it does)."""
    import argparse

    from slaq_mpi.runtime import launch

    handlers: dict[int, object] = {}
    seen = env if env is not None else {}
    polls: list[int] = []
    cmds: list[str] = []
    sent: list[int] = []

    class FakeChild:
        def __init__(self, cmd: list[str], start_new_session: bool, env: dict[str, str]) -> None:
            cmds.extend(cmd)
            seen.update(env)

        def send_signal(self, signum: int) -> None:
            sent.append(signum)

        def poll(self) -> int | None:
            polls.append(1)
            if len(polls) == 1:  # the ranks are starting
                for sig in early:
                    handlers[sig](sig, None)  # type: ignore[operator]
                return None
            if len(polls) == 2:  # rank 0 has begun
                if rank0_starts:
                    rundir.hold(run_dir)  # what rank 0 does first
                    rundir._held.pop().close()
                for sig in signals:
                    handlers[sig](sig, None)  # type: ignore[operator]
                return None
            return status

    monkeypatch.setattr(launch.subprocess, "Popen", FakeChild)
    monkeypatch.setattr(launch, "is_open_mpi", lambda exe: open_mpi)
    real_signal = signal.signal

    def fake_signal(sig: int, handler: Any) -> Any:
        """Record the handlers of the stops the launcher relays; any other signal (the test
        time limit's SIGALRM of tests/conftest.py) is set for real."""
        if sig not in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            return real_signal(sig, handler)
        handlers[sig] = handler
        return None

    monkeypatch.setattr(signal, "signal", fake_signal)
    args = argparse.Namespace(resume=None, config="c.yaml")
    got = launch._relaunch(args, argparse.Namespace(ranks=8), "mpiexec", run_dir,  # type: ignore[arg-type]
                           started)
    return got, cmds, sent


def test_the_launcher_passes_its_start_and_its_signals_to_the_ranks(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """slaq run passes when it started to mpiexec's environment, not to its own (a second
    run from the same Python process must not inherit the first one's start)."""
    monkeypatch.delenv("SLAQ_LAUNCHED_AT", raising=False)
    env: dict[str, str] = {}
    status, _, sent = _fake_launch(monkeypatch, tmp_path / "run", False, 0, True,
                                   (signal.SIGINT, signal.SIGHUP), env, 123.25)  # Ctrl-C; hangup
    assert status == 0
    assert float(env["SLAQ_LAUNCHED_AT"]) == 123.25
    assert "SLAQ_LAUNCHED_AT" not in os.environ
    assert sent == [signal.SIGINT, signal.SIGTERM]  # a hangup stops the ranks gracefully


def test_open_mpi_may_oversubscribe_and_is_stopped_with_usr1(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    # (each launch its own run directory: rank 0's lock text names its pid and the second)
    # Open MPI's launcher kills its ranks on SIGINT/SIGTERM but passes SIGUSR1 on: the first
    # stop (Ctrl-C, a hangup, kill) reaches the ranks as USR1, a second Ctrl-C aborts
    status, cmd, sent = _fake_launch(monkeypatch, tmp_path / "run1", True, 75, True, (signal.SIGINT,))
    assert status == 75
    assert cmd[:5] == ["mpiexec", "-n", "8", "--map-by", ":OVERSUBSCRIBE"]
    assert sent == [signal.SIGUSR1]
    _, _, sent = _fake_launch(monkeypatch, tmp_path / "run2", True, 75, True, (signal.SIGINT, signal.SIGINT))
    assert sent == [signal.SIGINT]  # Ctrl-C twice: abort
    _, _, sent = _fake_launch(monkeypatch, tmp_path / "run3", True, 75, True, (signal.SIGHUP,))
    assert sent == [signal.SIGUSR1]
    status, cmd, sent = _fake_launch(monkeypatch, tmp_path / "run4", False, 75, True, (signal.SIGINT,))
    assert "--map-by" not in cmd and sent == [signal.SIGINT]  # MPICH passes SIGINT on
    # a stop while the ranks start waits for rank 0: SIGUSR1 would kill a rank still starting
    status, _, sent = _fake_launch(monkeypatch, tmp_path / "run5", True, 75, True, early=(signal.SIGINT,))
    assert status == 75 and sent == [signal.SIGUSR1]
    # a kill -USR1 counts as the first stop: the next Ctrl-C aborts
    _, _, sent = _fake_launch(monkeypatch, tmp_path / "run6", True, 75, True, (signal.SIGUSR1, signal.SIGINT))
    assert sent == [signal.SIGINT]


@pytest.mark.parametrize(("rank0_starts", "status", "early", "want"), [
    (False, 1, (), 3),  # the launcher failed (too few slots, no PMI, ...): no rank 0 ever ran
    (False, 0, (), 3),  # a launcher that ran nothing and said all was well
    (True, 0, (), 0),   # every job done
    (True, 1, (), 1),   # the run started and a job failed
    (False, 2, (), 2),  # bad input found by the ranks
    (False, 130, (signal.SIGINT,), 130),  # stopped by hand while starting: not a failed launch
])
def test_a_launch_that_never_started_the_run_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str], rank0_starts: bool,
                                                     status: int, early: tuple[int, ...], want: int) -> None:
    run_dir = tmp_path / "run"
    rundir.check_free(run_dir)  # as slaq run does before the launch (creates nothing)
    got, _, _ = _fake_launch(monkeypatch, run_dir, False, status, rank0_starts, early=early)
    assert got == want
    said = f"mpiexec exited with status {status} before the run started" in capsys.readouterr().err
    assert said == (want == 3)


def test_open_mpi_is_recognized_by_its_version_line(tmp_path: Path) -> None:
    from slaq_mpi.runtime.launch import is_open_mpi

    for name, line, want in (("ompi4", "mpiexec (OpenRTE) 4.1.4", True),
                             ("ompi5", "mpirun (Open MPI) 5.0.7", True),
                             ("hydra", "HYDRA build details:", False)):
        exe = tmp_path / name
        exe.write_text(f'#!/bin/sh\necho "{line}"\n')
        exe.chmod(0o755)
        assert is_open_mpi(str(exe)) is want
    assert is_open_mpi(str(tmp_path / "missing")) is False


@pytest.mark.parametrize(("argv", "env", "kept"), [
    (["run", "c.yaml"], {"PMI_RANK": "0"}, True),     # a rank of slaq run: the signal is kept
    (["validate", "c.yaml"], {"PMI_RANK": "0"}, False),  # any other command: Python's default
    (["run", "c.yaml"], {}, False),                   # the launcher itself forwards signals
])
def test_a_stop_signal_while_a_rank_starts_is_kept(argv: list[str], env: dict[str, str], kept: bool) -> None:
    code = textwrap.dedent("""
        import os, signal, sys
        sys.argv[1:] = ARGV
        import slaq_mpi.runtime.signals as early
        early.install()  # what both entry points do first
        os.kill(os.getpid(), signal.SIGTERM)
        print("alive", early.received)
    """).replace("ARGV", repr(argv))
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")}
    proc = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)
    if kept:
        assert proc.returncode == 0 and f"alive [{int(signal.SIGTERM)}]" in proc.stdout, proc.stderr
    else:
        assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stdout)


def test_a_fresh_run_never_moves_a_live_run_or_its_own_inputs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    live = runs / "med"
    live.mkdir(parents=True)
    data = tmp_path / "exp" / "train.h5"
    data.parent.mkdir()
    data.write_text("x")
    held = rundir._take(live, "output_dir")  # a running slaq run holds runs/med
    try:
        with pytest.raises(ConfigError, match="holds .*med, the directory of a running slaq run"):
            rundir.check_fresh(runs, "output_dir")  # moving runs/ aside would take med along
        with pytest.raises(ConfigError, match="is inside .*med, the directory of a running"):
            rundir.check_fresh(live / "sub", "output_dir")
        with pytest.raises(ConfigError, match="already runs in it|holds .*med"):
            rundir.check_fresh(tmp_path, "output_dir")
    finally:
        held.close()
    with pytest.raises(ConfigError, match=r"holds files that are not a slaq run \(med, \.med\.lock\)"):
        rundir.check_fresh(runs, "output_dir")  # no longer running, but runs/ is not itself a run
    (live / "config.yaml").write_text("name: med\n")
    rundir.check_fresh(live, "output_dir")  # an old run moves aside as usual
    with pytest.raises(ConfigError, match="holds .*train.h5, which this run reads"):
        rundir.check_fresh(tmp_path / "exp", "output_dir", [data])
    rundir.check_fresh(tmp_path / "out", "output_dir", [data])


def test_a_fresh_run_moves_aside_only_an_earlier_run_or_simulation(tmp_path: Path) -> None:
    own = tmp_path / "thesis"
    own.mkdir()
    (own / "thesis.tex").write_text("x")
    (own / "figs").mkdir()
    with pytest.raises(ConfigError, match=r"holds files that are not a slaq run \(figs, thesis.tex\); "
                       "an earlier run is moved aside, other files never"):
        rundir.check_fresh(own, "output_dir")
    with pytest.raises(ConfigError, match="not a slaq run"), rundir.fresh_output(own, "--out"):
        pass
    assert sorted(p.name for p in own.iterdir()) == ["figs", "thesis.tex"]
    (tmp_path / "empty").mkdir()
    for name in rundir.RUN_FILES:  # a real run (config.yaml is written first)
        run = tmp_path / name
        run.mkdir()
        (run / name).write_text("x")
        (run / "notes.txt").write_text("mine, inside the run")
        rundir.check_fresh(run, "output_dir")
    sim = tmp_path / "sim"
    (sim / "slaq").mkdir(parents=True)
    (sim / "slaq" / "metrics.h5").write_text("x")
    (sim / "avg_normalized_loss.png").write_text("x")
    (sim / "slaq" / "fairness.png").write_text("x")  # slaq report OUT/slaq writes beside it
    for ok in (tmp_path / "empty", sim, tmp_path / "new"):
        rundir.check_fresh(ok, "output_dir")
    with rundir.fresh_output(sim, "--out") as aside:
        assert aside is not None and (aside / "slaq" / "metrics.h5").is_file()


def test_a_folder_of_runs_or_the_configs_own_folder_is_never_moved(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    for name in ("old1", "slaq"):
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.h5").write_text("x")
    (runs / "README.txt").write_text("my notes")
    with pytest.raises(ConfigError, match=r"not a slaq run \(README.txt, old1\)"):
        rundir.check_fresh(runs, "output_dir")  # only <policy>/metrics.h5 is a simulation
    (runs / "README.txt").unlink()
    with pytest.raises(ConfigError, match=r"not a slaq run \(old1\);"):
        rundir.check_fresh(runs, "output_dir")  # old1 is no policy: a folder of runs
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "notes.md").write_text("mine")
    (exp / "config.yaml").write_text(
        f"name: t\noutput_dir: {exp}\njobs: [{{name: a, algorithm: logreg, "
        "dataset: {generator: classification, rows: 50, features: 2}}]\n")
    spec = config.load(exp / "config.yaml")
    with pytest.raises(ConfigError, match=r"holds .*exp/config.yaml, which this run reads"):
        rundir.check_fresh(spec.output_dir, "output_dir", config.input_files(spec))
    (exp / "notes.md").unlink()
    (exp / "state.json").write_text("{}")  # an earlier run, run again from its saved config
    rundir.check_fresh(spec.output_dir, "output_dir", config.input_files(spec))
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "fig1.png").write_text("x")  # PNGs alone are someone's figures
    with pytest.raises(ConfigError, match="not a slaq run"):
        rundir.check_fresh(figs, "output_dir")

    def unreadable(self: Path) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", unreadable)
    with pytest.raises(ConfigError, match=r"cannot be read \(.*figs: Permission denied\); give a directory"):
        rundir.check_fresh(figs, "output_dir")


def test_a_simulation_stopped_before_writing_is_moved_aside(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    (out / "slaq").mkdir(parents=True)
    (out / "slaq" / "metrics.h5.tmp4242").write_text("half")  # killed while writing
    (out / "fair").mkdir()  # killed between mkdir and the first write
    with rundir.fresh_output(out, "--out") as aside:
        assert aside is not None and (aside / "slaq" / "metrics.h5.tmp4242").read_text() == "half"
    check = tmp_path / "check"
    check.mkdir()
    (check / "metrics.h5.tmp7").write_text("half")  # sim-check writes <out>/metrics.h5
    rundir.check_fresh(check, "--out")
    (out / "fair").mkdir(parents=True)
    (out / "fair" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"not a slaq run \(fair\)"):
        rundir.check_fresh(out, "--out")


@pytest.mark.parametrize("kind", ["file", "dir", "dir with a file"])
def test_a_stop_made_as_anything_is_removed(kind: str, tmp_path: Path) -> None:
    stop = tmp_path / rundir.STOP_FILE
    if kind == "file":
        stop.write_text("")
    else:
        stop.mkdir()
        if kind == "dir with a file":
            (stop / "note").write_text("x")
    old = time.time() + 10
    assert rundir.clear_stale_stop(tmp_path, old)  # older than the start: removed
    assert not stop.exists()
    stop.mkdir()
    rundir.remove_stop(tmp_path)
    assert not stop.exists()
    rundir.remove_stop(tmp_path)  # nothing there: fine


def test_a_resume_path_through_a_link_keeps_its_meaning(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from slaq_mpi.runtime.launch import resume_path

    (tmp_path / "scratch" / "exp").mkdir(parents=True)
    (tmp_path / "scratch" / "run").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "link").symlink_to(tmp_path / "scratch" / "exp")
    monkeypatch.chdir(tmp_path / "home")
    assert resume_path("link/../run").resolve() == (tmp_path / "scratch" / "run").resolve()
    assert resume_path("../home/./link") == tmp_path / "home" / "link"  # tidied, link kept
