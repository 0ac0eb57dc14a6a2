"""``slaq run``: validate, then run inside an MPI launch or start one with mpiexec."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from slaq_mpi._text import count
from slaq_mpi.config import experiment as config
from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.config.memory import format_bytes, memory_here
from slaq_mpi.errors import (
    DAMAGED_FILE_ERRORS,
    EXIT_ABORTED,
    EXIT_BAD_INPUT,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_STOPPED,
    NO_VALUE,
    ConfigError,
)
from slaq_mpi.storage import rundir

_GO_ON = -1  # rank 0's word to the others at the start: no exit status yet, the run goes on

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


def resume_path(text: str) -> Path:
    """The absolute run directory ``--resume text`` means: ``a/../b`` is shown as ``b``, unless
    ``a`` is a link (then ``..`` leaves the link's target, and the text is kept as given)."""
    given = Path(text).absolute()
    tidy = Path(os.path.abspath(given))
    return tidy if tidy.resolve() == given.resolve() else given


def _spec_and_dir(args: argparse.Namespace) -> tuple[ExperimentSpec, Path, bool]:
    if args.resume and args.config:
        raise ConfigError("config", args.config, "give an experiment YAML or --resume RUN_DIR, not both "
                          "(a resumed run uses the config.yaml saved in RUN_DIR)")
    if args.resume:
        run_dir = resume_path(args.resume)
        saved = run_dir / "config.yaml"
        if not (run_dir / "state.json").is_file() or not saved.is_file():
            raise ConfigError("--resume", args.resume, "must be a run directory of an earlier "
                              "slaq run (with state.json and config.yaml)")
        _check_unchanged(run_dir, saved)
        args.resume = str(run_dir)  # the ranks get it absolute: the next line may change directory
        _enter_start_dir(run_dir)
        spec = config.load(saved)
        config.require_live(spec)
        if finished_status(run_dir) is None:  # a finished run only says so
            config.check_memory(spec)
        return spec, run_dir, True
    if not args.config:
        raise ConfigError("config", NO_VALUE, "give an experiment YAML, or --resume RUN_DIR")
    spec = config.load(args.config)
    config.require_live(spec)
    config.check_sections(spec, simulation_files=False)
    config.check_memory(spec)
    return spec, spec.output_dir, False


def finished_status(run_dir: Path) -> int | None:
    """The exit status of a finished run (1 if a job failed, else 0); None if it can go on."""
    import json

    try:
        finished = bool(json.loads((run_dir / "state.json").read_text()).get("finished"))
        if not finished:
            return None
        from slaq_mpi.storage.metrics import read_metrics

        jobs = read_metrics(run_dir).jobs.values()
    except (OSError, ValueError, AttributeError):
        return None  # let the run itself look at it
    return EXIT_FAILED if any(j.status == "failed" for j in jobs) else EXIT_DONE


def _say_finished(run_dir: Path) -> None:
    print(f"slaq: {run_dir} has finished; nothing to resume (slaq report "
          f"{shlex.quote(str(run_dir))} shows its results)", flush=True)


def _kept(run_dir: Path, key: str) -> str | None:
    """The text attribute ``key`` of the run's metrics.h5 (None: no such attribute, or no
    readable metrics yet)."""
    import h5py

    try:
        with h5py.File(run_dir / "metrics.h5", "r") as f:
            value = f.attrs.get(key)
    except OSError:
        return None
    if isinstance(value, bytes):
        value = value.decode()
    return value if isinstance(value, str) and value else None


def check_history(run_dir: Path) -> None:
    """Refuse to resume a run whose metrics.h5 (its history, read back by rank 0) is missing or
    cannot be read, before any rank starts."""
    from slaq_mpi.storage.metrics import RunRecord

    try:
        RunRecord.read(run_dir / "metrics.h5")
        return
    except FileNotFoundError:
        why = "it is missing"
    except OSError as exc:
        if exc.errno is not None:  # the file system, not the file (h5py gives damage no errno)
            raise ConfigError("--resume", str(run_dir), f"its metrics.h5 cannot be read now "
                              f"({exc.strerror or exc}); fix that, then resume again") from None
        why = f"it cannot be read ({exc})"
    except DAMAGED_FILE_ERRORS as exc:
        why = f"it cannot be read ({exc})"
    raise ConfigError("--resume", str(run_dir), f"its metrics.h5 holds the run's history and {why}; "
                      "the run cannot be resumed: start a new run with slaq run CONFIG")


def start_dir(run_dir: Path) -> Path | None:
    """The directory the run in ``run_dir`` started in (kept in metrics.h5), where a resume
    reads its config's relative paths; None if not kept, or gone."""
    start = _kept(run_dir, "workdir")
    return Path(start) if start is not None and Path(start).is_dir() else None


def _check_unchanged(run_dir: Path, saved: Path) -> None:
    """Refuse a resume whose config.yaml differs from the config the run started with (kept
    in metrics.h5): jobs added, removed or changed cannot be carried on from checkpoints."""
    original = _kept(run_dir, "config")  # None: nothing to compare with (checkpoints decide)
    if original is not None and saved.read_text() != original:
        raise ConfigError("--resume", str(run_dir), f"its {saved.name} differs from the config the run "
                          "started with (kept in metrics.h5); a resumed run must use it unchanged: "
                          "restore it, or start a new run with slaq run CONFIG")


def check_data_unchanged(run_dir: Path, spec: ExperimentSpec, where: str = "--resume",
                         fresh: str = "start a new run with slaq run CONFIG") -> None:
    """Refuse to resume a run whose data changed since it started (fingerprints kept in
    metrics.h5): the jobs would go on training on other data, silently.

    The files checked are those the resumed ``spec`` reads (its paths resolved now, from the
    start directory or from here), each against the fingerprint its job's file had at the
    start: a link pointed at another file is seen, a project directory renamed is not refused.
    ``where`` and ``fresh`` word the refusal for the command that resumes (the option that
    named the run, and how to start afresh instead).

    Raises:
        ConfigError: naming the job, the file and what to do.
    """
    import json

    from slaq_mpi.data.datasets import fingerprint_matches

    kept = _kept(run_dir, "data_files")
    if kept is None:
        return  # a run from before fingerprints were kept
    paths = {j.name: j.dataset.path for j in spec.jobs if j.dataset.path}
    now: dict[tuple[str, str], bool] = {}  # a file shared by jobs is read once
    for job, (then, was) in sorted(json.loads(kept).items()):
        path = paths.get(job, then)
        named = path if path == then else f"{path} ({then} when the run started)"
        if (path, was) not in now:
            try:
                now[path, was] = fingerprint_matches(path, was)
            except OSError as exc:
                raise ConfigError(where, str(run_dir), f"job {job}'s data file {named} cannot "
                                  f"be read ({exc.strerror}); restore it, or {fresh}") from None
        if not now[path, was]:
            raise ConfigError(where, str(run_dir), f"job {job}'s data file {named} changed since "
                              f"the run started; restore it, or {fresh}")


def _enter_start_dir(run_dir: Path) -> None:
    """Work in the directory the run started in (kept in metrics.h5), where the relative paths
    of its config.yaml (datasets, solver files, output_dir) point; a resume may be started
    from anywhere. A run whose start directory is gone stays here, and says so."""
    start = _kept(run_dir, "workdir")
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
    open_mpi = is_open_mpi(exe)
    cmd = [exe, "-n", str(spec.ranks)]
    if open_mpi:  # Open MPI refuses more ranks than cores unless told (MPICH never does)
        cmd += ["--map-by", ":OVERSUBSCRIBE"]
    cmd += [sys.executable, "-m", "slaq_mpi", "run"]
    cmd += ["--resume", args.resume] if args.resume else [args.config]
    print(f"slaq: not inside an MPI launch; starting {spec.ranks} ranks: {shlex.join(cmd)}", flush=True)
    pending: list[int] = []
    child: subprocess.Popen[bytes] | None = None
    stops: list[int] = []  # every stop signal received
    held: list[int] = []  # Open MPI: the graceful stop, until every rank can take it

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP:
            signum = signal.SIGTERM  # the terminal went away: stop gracefully, resumable
        stops.append(signum)
        if open_mpi:
            # Open MPI's launcher kills the ranks on SIGINT or SIGTERM but passes SIGUSR1 on:
            # the first stop asks the ranks to stop gracefully, a second one aborts. SIGUSR1
            # would kill a rank (or mpiexec) still starting: it waits until rank 0 has begun.
            if len(stops) == 1:
                held.append(signal.SIGUSR1)
                return
            held.clear()
        if child is None:
            pending.append(signum)
        else:
            child.send_signal(signum)

    # The launcher runs in its own session, so a Ctrl-C reaches it once, through us (a
    # second Ctrl-C forwarded makes mpiexec abort at once), and a hangup does not reach it.
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    # the ranks learn when this run started: a STOP made while they start is kept
    env = {**os.environ, _LAUNCHED_AT: repr(started)}
    lock_before = _lock_text(run_dir)  # rank 0 writes its pid there once every rank is up
    child = subprocess.Popen(cmd, start_new_session=True, env=env)
    for signum in pending:
        child.send_signal(signum)
    while (status := child.poll()) is None:
        if held and _lock_text(run_dir) != lock_before:
            child.send_signal(held.pop())
        time.sleep(0.1)
    if (status not in (EXIT_BAD_INPUT, EXIT_STOPPED) and not stops  # even 0: no rank 0 ran
            and _lock_text(run_dir) == lock_before):
        print(f"slaq: {exe} {_ended(status)} before the run started; its message is "
              "above (see \"MPI launchers\" in the README)", file=sys.stderr, flush=True)
        return EXIT_ABORTED
    if status < 0:  # the launcher died of a signal: the shell's status for it, and a line
        print(f"slaq: {exe} {_ended(status)}; `slaq report` and `--resume` work from what the "
              "run last saved", file=sys.stderr, flush=True)
        return 128 - status
    return status


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


def _check_start(spec: ExperimentSpec, run_dir: Path, resume: bool) -> None:
    """What must hold before a run starts (checked by the launcher, and by rank 0 alone under a
    launch): a resumed run's history can be read back and its data files are unchanged; a fresh
    run's output_dir may be moved aside, and its generated data fits on the disk."""
    if resume:
        check_history(run_dir)
        check_data_unchanged(run_dir, spec)
    else:
        rundir.check_fresh(run_dir, "output_dir", config.input_files(spec))
        config.check_data_space(spec)


def _fresh_run_dir(spec: ExperimentSpec) -> None:
    run_dir = spec.output_dir
    aside = rundir.move_aside(run_dir)
    if aside is not None:
        print(f"slaq: moved the previous run in {run_dir} to {aside}", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(spec.source)


def run_command(args: argparse.Namespace) -> int:
    """The ``slaq run`` command; returns the exit status."""
    started = time.time()
    if not under_mpi():
        spec, run_dir, resume = _spec_and_dir(args)
        if resume:
            status = finished_status(run_dir)
            if status is not None:
                _say_finished(run_dir)
                return status
        exe = find_mpiexec(args.mpiexec)
        check_local_ranks(spec.ranks)
        _check_start(spec, run_dir, resume)  # before any rank starts
        rundir.check_free(run_dir)
        return _relaunch(args, spec, exe, run_dir, started)
    started = start_time(started)
    from slaq_mpi.runtime import comm

    size, rank = comm.world_size(), comm.world_rank()
    # Every rank reads the config; all go on only if all could (a file that changed during the
    # start must not leave some ranks waiting for a coordinator that has quit).
    failure: ConfigError | None = None
    try:
        spec, run_dir, resume = _spec_and_dir(args)
    except ConfigError as exc:
        failure = exc
    failed = comm.first_failure(None if failure is None else f"{comm.hostname()}\n{failure}")
    if failed is not None:
        if rank == 0:
            if failure is not None:
                raise failure
            who, (host, why) = failed[0], failed[1].split("\n", 1)
            raise ConfigError(f"rank {who} on {host}", NO_VALUE, f"{why}; rank 0 on "
                              f"{comm.hostname()} accepted it: the nodes differ (files, "
                              "software or memory)")
        return 2
    if size < 2 or size < spec.ranks:
        if rank == 0:
            raise ConfigError("ranks", spec.ranks, f"the MPI launch gave only {count(size, 'rank')}; "
                              f"ask the launcher for at least {max(2, spec.ranks)}")
        return 2
    # rank 0 takes the run directory (lock, fresh start); if it cannot, or the run to resume
    # has finished, every rank ends with rank 0's status
    verdict = _GO_ON
    if rank == 0:
        try:
            rundir.hold(run_dir)
            done = finished_status(run_dir) if resume else None
            if done is not None:
                verdict = done
                _say_finished(run_dir)
            else:
                if rundir.clear_stale_stop(run_dir, started):
                    print(f"slaq: removed a STOP file in {run_dir} left from before this start",
                          flush=True)
                _check_start(spec, run_dir, resume)
                if not resume:
                    _fresh_run_dir(spec)
        except OSError as exc:
            failure = ConfigError("output_dir", str(run_dir), f"cannot be used: {exc.strerror or exc}")
        except ConfigError as exc:
            failure = exc
        if failure is not None:
            verdict = EXIT_BAD_INPUT
    verdict = comm.root_value(verdict)
    if verdict != _GO_ON:
        if failure is not None:
            raise failure
        return verdict
    busy, cpus = comm.detect_oversubscription()
    if rank == 0:
        if busy > cpus:
            print(f"slaq: {busy} worker ranks share {cpus} CPUs on {comm.hostname()}: jobs' "
                  "collectives wait sleeping instead of spinning (speedups are below a cluster's)",
                  flush=True)
        if size > spec.ranks:
            print(f"slaq: the launch gave {size} ranks (config asks {spec.ranks}); using all {size}",
                  flush=True)
        from slaq_mpi.runtime.coordinator import run_coordinator

        return run_coordinator(spec, run_dir, resume)
    from slaq_mpi.runtime.worker import Worker

    worker = Worker(spec, run_dir)
    try:
        worker.run()
    except Exception as exc:
        worker.fail(exc)
    return 0
