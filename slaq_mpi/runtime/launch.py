"""``slaq run``: validate, then run inside an MPI launch (:mod:`.startup`) or start one
with mpiexec. Importing this module imports no MPI: the launcher process never needs it."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from slaq_mpi.config import experiment as config
from slaq_mpi.config.added import with_added
from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.config.memory import format_bytes, memory_here
from slaq_mpi.errors import (
    EXIT_ABORTED,
    EXIT_BAD_INPUT,
    EXIT_STOPPED,
    NO_VALUE,
    ConfigError,
)
from slaq_mpi.runtime.backoff import Backoff
from slaq_mpi.runtime.resume import (
    check_data_unchanged,
    check_history,
    check_unchanged,
    finished_status,
    resume_path,
    saved_text,
    say_finished,
    start_dir,
)
from slaq_mpi.storage import rundir

__all__ = ["RANK_BYTES", "check_data_unchanged", "check_history", "check_local_ranks", "check_start",
           "find_mpiexec", "finished_status", "is_open_mpi", "read_spec", "resume_path",
           "run_command", "start_dir", "start_time", "under_mpi"]

_CHILD = Backoff(first=0.1, longest=0.1)  # how often the launcher looks at mpiexec

# Environment variables that MPI launchers (Hydra, srun --mpi=pmi2, Open MPI, PMIx) set.
_LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                "MPI_LOCALNRANKS")


def under_mpi() -> bool:
    """Whether this process was started by an MPI launcher."""
    return any(v in os.environ for v in _LAUNCH_VARS)


def find_mpiexec(explicit: str | None) -> str:
    """The MPI launcher: ``--mpiexec``, else the one beside this Python, else PATH."""
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise ConfigError("--mpiexec", explicit, "must be an executable MPI launcher (a path, "
                              "or a command on PATH)")
        return found
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise ConfigError("mpiexec", NO_VALUE, "no MPI launcher found: pip install 'slaq-mpi[mpich]' "
                          "or load your cluster's MPI module, or pass --mpiexec PATH")
    return found


def read_spec(args: argparse.Namespace) -> tuple[ExperimentSpec, Path, bool]:
    """The experiment ``slaq run`` was given (a YAML, or the config saved in ``--resume``'s
    run directory, entering the directory that run started in), its run directory and
    whether it resumes.

    Raises:
        ConfigError: no config, both, not a run directory, or a config that is not valid here.
    """
    if args.resume and args.config:
        raise ConfigError("config", args.config, "give an experiment YAML or --resume RUN_DIR, not both "
                          "(a resumed run uses the config.yaml saved in RUN_DIR)")
    if args.resume:
        run_dir = resume_path(args.resume)
        saved = run_dir / "config.yaml"
        if not (run_dir / "state.json").is_file() or not saved.is_file():
            raise ConfigError("--resume", args.resume, "must be a run directory of an earlier "
                              "slaq run (with state.json and config.yaml)")
        check_unchanged(run_dir, saved)
        args.resume = str(run_dir)  # the ranks get it absolute: the next line may change directory
        _enter_start_dir(run_dir)
        spec = with_added(config.load(saved), run_dir)
        if getattr(args, "open", False) or json.loads((run_dir / "state.json").read_text()).get("open"):
            spec = replace(spec, open=True)
        config.require_live(spec)
        # no memory check: a resumed run fails only the jobs that no longer fit (runtime/fit.py)
        return spec, run_dir, True
    if not args.config:
        raise ConfigError("config", NO_VALUE, "give an experiment YAML, or --resume RUN_DIR")
    spec = config.load(args.config)
    if getattr(args, "open", False):
        spec = replace(spec, open=True)
    config.require_live(spec)
    config.check_memory(spec)
    return spec, spec.output_dir, False


def _enter_start_dir(run_dir: Path) -> None:
    """Work in the directory the run started in (kept in metrics.h5), where the relative paths
    of its config.yaml (datasets, solver files, output_dir) point; a resume may be started
    from anywhere. A run whose start directory is gone stays here, and says so."""
    start = saved_text(run_dir, "workdir")
    if start is None or Path(start) == Path.cwd():
        return
    if not Path(start).is_dir():
        if not under_mpi():
            print(f"slaq: the run started in {start}, which is gone; relative paths in "
                  f"{run_dir / 'config.yaml'} are read from here", flush=True)
        return
    os.chdir(start)
    if not under_mpi():
        print(f"slaq: resuming in {start}, where the run started (relative paths in its "
              "config.yaml are read from there)", flush=True)


_LAUNCHED_AT = "SLAQ_LAUNCHED_AT"  # when `slaq run` started mpiexec (seconds since the epoch)


def start_time(now: float) -> float:
    """When this run started: when `slaq run` started mpiexec (passed to the ranks in the
    environment) if that is earlier than ``now``, the time a rank began. A STOP file made
    after it is a request for this run, even if the ranks took seconds to start."""
    try:
        return min(now, float(os.environ.get(_LAUNCHED_AT, "inf")))
    except ValueError:
        return now


def is_open_mpi(exe: str) -> bool:
    """Whether ``exe`` is Open MPI's launcher (its ``--version`` names Open MPI or OpenRTE)."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return any(name in out.stdout + out.stderr for name in ("Open MPI", "OpenRTE"))


def _lock_text(run_dir: Path) -> str:
    """What the run's lock file says (rank 0 writes its pid there as it starts); '' if none."""
    try:
        return rundir.lock_path(run_dir).read_text()
    except OSError:
        return ""


RANK_BYTES = 64 * 2**20  # memory of one idle rank (Python, numpy, scipy, h5py, MPI), measured
# Set inside a batch allocation, where mpiexec may spread the ranks over several machines.
_ALLOCATION_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID")


def check_local_ranks(ranks: int) -> None:
    """Refuse to start ``ranks`` ranks on this machine alone (``slaq run`` outside an MPI launch
    and outside a batch allocation) when even idle ranks would not fit in its memory.

    Raises:
        ConfigError: naming ``ranks``, the memory they need and the machine's.
    """
    here = memory_here()
    if here is None or any(v in os.environ for v in _ALLOCATION_VARS):
        return
    memory, said = here
    need = ranks * RANK_BYTES
    if need > memory:
        raise ConfigError("ranks", ranks, f"{ranks} ranks on this machine need at least "
                          f"{format_bytes(need)} ({format_bytes(RANK_BYTES)} each "
                          f"before any data) and {said}: submit it "
                          f"to a cluster (slaq submit), lower ranks to at most {memory // RANK_BYTES}, "
                          "or start the ranks over several machines yourself (mpiexec ... slaq run)")


def _relaunch(args: argparse.Namespace, spec: ExperimentSpec, exe: str, run_dir: Path,
              started: float) -> int:
    """Start this ``slaq run`` on ``spec.ranks`` ranks with the launcher ``exe`` and wait for
    it, passing stop signals on; returns the run's exit status."""
    open_mpi = is_open_mpi(exe)
    cmd = [exe, "-n", str(spec.ranks)]
    if open_mpi:  # Open MPI refuses more ranks than cores unless told (MPICH never does)
        cmd += ["--map-by", ":OVERSUBSCRIBE"]
    cmd += [sys.executable, str(Path(__file__).resolve().parents[1] / "__main__.py"), "run"]
    cmd += ["--resume", args.resume] if args.resume else [args.config]
    cmd += ["--open"] if getattr(args, "open", False) else []
    print(f"slaq: not inside an MPI launch; starting {spec.ranks} ranks: {shlex.join(cmd)}", flush=True)
    relay = _SignalRelay(open_mpi)
    # The launcher runs in its own session, so a Ctrl-C reaches it once, through us (a
    # second Ctrl-C forwarded makes mpiexec abort at once), and a hangup does not reach it.
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, relay.forward)
    # the ranks learn when this run started: a STOP made while they start is kept
    env = {**os.environ, _LAUNCHED_AT: repr(started)}
    lock_before = _lock_text(run_dir)  # rank 0 writes its pid there once every rank is up
    relay.attach(subprocess.Popen(cmd, start_new_session=True, env=env))
    status = relay.wait(lambda: _lock_text(run_dir) != lock_before)
    if (status not in (EXIT_BAD_INPUT, EXIT_STOPPED) and not relay.stops  # even 0: no rank 0 ran
            and _lock_text(run_dir) == lock_before):
        print(f"slaq: {exe} {_ended(status)} before the run started; its message is "
              "above (see \"MPI launchers\" in the README)", file=sys.stderr, flush=True)
        return EXIT_ABORTED
    if status < 0:  # the launcher died of a signal: the shell's status for it, and a line
        print(f"slaq: {exe} {_ended(status)}; `slaq report` and `--resume` work from what the "
              "run last saved", file=sys.stderr, flush=True)
        return 128 - status
    return status


class _SignalRelay:
    """Passes the stop signals ``slaq run`` receives on to the launcher it started."""

    def __init__(self, open_mpi: bool) -> None:
        self.open_mpi = open_mpi
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []  # received before the launcher started
        self.stops: list[int] = []  # every stop signal received
        self.held: list[int] = []  # Open MPI: the graceful stop, until every rank can take it

    def forward(self, signum: int, _frame: object) -> None:
        """The signal handler."""
        if signum == signal.SIGHUP:
            signum = signal.SIGTERM  # the terminal went away: stop gracefully, resumable
        self.stops.append(signum)
        if self.open_mpi:
            # Open MPI's launcher kills the ranks on SIGINT or SIGTERM but passes SIGUSR1 on:
            # the first stop asks the ranks to stop gracefully, a second one aborts. SIGUSR1
            # would kill a rank (or mpiexec) still starting: it waits until rank 0 has begun.
            if len(self.stops) == 1:
                self.held.append(signal.SIGUSR1)
                return
            self.held.clear()
        if self.child is None:
            self.pending.append(signum)
        else:
            self.child.send_signal(signum)

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        """The launcher has started: pass it the signals received until now."""
        self.child = child
        for signum in self.pending:
            child.send_signal(signum)

    def wait(self, rank0_began: Callable[[], bool]) -> int:
        """The launcher's exit status, once it ends; a held stop is passed on once
        ``rank0_began()``."""
        child = self.child
        assert child is not None
        codes: list[int] = []

        def ended() -> bool:
            code = child.poll()
            if code is not None:
                codes.append(code)
            return code is not None

        def release_held() -> None:
            if self.held and rank0_began():
                child.send_signal(self.held.pop())

        _CHILD.wait(ended, between=release_held)
        return codes[0]


def _ended(status: int) -> str:
    """How a launcher ended, from its ``Popen`` status (negative: killed by that signal)."""
    if status >= 0:
        return f"exited with status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    why = " (the reader of its output went away)" if -status == signal.SIGPIPE else ""
    return f"was killed by {name}{why}"


def check_start(spec: ExperimentSpec, run_dir: Path, resume: bool) -> None:
    """What must hold before a run starts (checked by the launcher, and by rank 0 alone under a
    launch): a resumed run's history can be read back and its data files are unchanged; a fresh
    run's output_dir may be moved aside, and its generated data fits on the disk."""
    if resume:
        check_history(run_dir)
        check_data_unchanged(run_dir, spec)
    else:
        rundir.check_fresh(run_dir, "output_dir", config.input_files(spec))
        config.check_data_space(spec)


def run_command(args: argparse.Namespace) -> int:
    """The ``slaq run`` command; returns the exit status."""
    started = time.time()
    if under_mpi():
        from slaq_mpi.runtime.startup import run_rank

        return run_rank(args, start_time(started))
    spec, run_dir, resume = read_spec(args)
    if resume:
        status = finished_status(run_dir)
        if status is not None:
            say_finished(run_dir)
            return status
    exe = find_mpiexec(args.mpiexec)
    check_local_ranks(spec.ranks)
    check_start(spec, run_dir, resume)  # before any rank starts
    rundir.check_free(run_dir)
    return _relaunch(args, spec, exe, run_dir, started)
