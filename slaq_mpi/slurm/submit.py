"""Slurm: the ``slurm:`` section of the experiment YAML, the sbatch script, and ``slaq submit``.

One SLAQ experiment runs in ONE Slurm allocation: one MPI rank per task (core), launched with
``srun --mpi=pmi2`` (or another srun MPI plugin, or ``mpiexec``). The batch script asks Slurm for
a warning signal before the time limit; on that signal (or SIGTERM) it creates ``RUN_DIR/STOP``,
rank 0 checkpoints and exits with status 75, and the script requeues the job, which resumes from
the checkpoints (``slaq run --resume RUN_DIR``). ``docs/slurm.md`` tells the whole story.

* :mod:`slaq_mpi.slurm.settings` validates the ``slurm:`` section into
  :class:`~slaq_mpi.slurm.settings.SlurmSettings`.
* :func:`render_sbatch` is a pure function: settings in, script text out.
* Every Slurm command goes through :func:`run_cmd`; :func:`submit` and :func:`job_info` use it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from slaq_mpi.errors import EXIT_BAD_INPUT, ConfigError, SlaqError
from slaq_mpi.slurm.settings import SlurmSettings, settings_for
from slaq_mpi.storage import rundir

__all__ = [
    "EXIT_STOPPED",
    "SlurmError",
    "add_cli",
    "job_info",
    "output_path",
    "render_sbatch",
    "run_cmd",
    "submit",
]

EXIT_STOPPED = 75
"""Exit status of ``slaq run`` after a graceful stop: checkpointed, resume me."""

class SlurmError(SlaqError, RuntimeError):
    """A Slurm command failed or answered something unexpected."""



# --- rendering -----------------------------------------------------------------------------

_HEADER = """\
#!/bin/bash
# slaq.sbatch - run one slaq-mpi experiment in one Slurm allocation.
#
# One MPI rank per task: rank 0 schedules, the others train; SLAQ moves ranks between the
# experiment's jobs every epoch. Written by `slaq submit` from the YAML's `slurm:` section
# (docs/slurm.md){how}
#
# Flow: SIGUSR1 comes {lead} s before the time limit (SIGTERM on preemption or scancel); the trap
# below creates RUN_DIR/STOP, rank 0 finishes the epoch, checkpoints every job and exits 75, and
{after}
# resumes from it. Exit 0: every job done; 1: a job failed; 2: bad input (or RUN_DIR in use);
# 3: aborted on an error, or the MPI launch failed before the run started; 75: stopped, not
# requeued.
"""
_BY_HAND = """; this copy uses the defaults and can also be submitted by hand:
#
#     sbatch [--ntasks=N --time=T --partition=P --account=A] slurm/slaq.sbatch CONFIG.yaml [RUN_DIR]"""
_REQUEUES = """\
# this script requeues the job (not after scancel, nor after a stop asked inside the run: a
# RUN_DIR/STOP you create, a signal to rank 0). A restart finds RUN_DIR/state.json and"""
_NO_REQUEUE = """\
# the job ends there (slurm.requeue: false, so it is not requeued): submit it again, and the
# new job finds RUN_DIR/state.json and"""


def render_sbatch(settings: SlurmSettings, config: str | None = None,
                  run_dir: str | None = None) -> str:
    """The batch script for ``settings``. ``config`` and ``run_dir`` are written into the script
    (absolute paths, as ``slaq submit`` passes them); when ``config`` is None the script takes
    CONFIG.yaml [RUN_DIR] as its arguments. Pure: no files, no environment, no clock."""
    s = settings
    how = _BY_HAND if config is None else f" for {config}." if config.isprintable() else "."  # one line
    lines = [_HEADER.format(lead=s.signal_lead, how=how,
                            after=_REQUEUES if s.requeue else _NO_REQUEUE).rstrip("\n")]
    directives = [
        f"--job-name={s.job_name}",
        f"--nodes={s.nodes}",
        f"--ntasks={s.ntasks}",
        f"--time={s.time}",
    ]
    directives += [f"--{k}={v}" for k, v in
                   (("partition", s.partition), ("account", s.account), ("qos", s.qos)) if v]
    directives += [f"--signal=B:USR1@{s.signal_lead}", "--requeue" if s.requeue else "--no-requeue",
                   "--open-mode=append", f"--output={s.output}"]
    if s.error:
        directives.append(f"--error={s.error}")
    if s.chdir:
        directives.append(f"--chdir={s.chdir}")
    directives += list(s.extra)
    lines += [f"#SBATCH {d}" for d in directives]
    lines.append("")
    lines += _body(s, config, run_dir)
    return "\n".join(lines) + "\n"


def _body(s: SlurmSettings, config: str | None, run_dir: str | None) -> list[str]:
    q = shlex.quote
    if s.launcher == "srun":
        plugin = f"--mpi={q(s.mpi)}" if s.mpi else '--mpi="$MPI_PLUGIN"'
        launch = ["srun", plugin, "--kill-on-bad-exit=1", *map(q, s.launcher_args)]
    else:
        launch = [q(s.mpiexec), "-n", '"$SLURM_NTASKS"', *map(q, s.launcher_args)]
    out = ["# --- site setup (slurm.setup): modules, virtualenv ---"]
    out += list(s.setup) or ["# (none)"]
    out += ["", "set -u", f"PYTHON={q(s.python or 'python3')}",
            f"MAX_RESTARTS={s.max_restarts}", f"REQUEUE={'1' if s.requeue else '0'}",
            "# the Python must import slaq-mpi and mpi4py; the MPI library it loads is logged",
            f'if ! MPI_LIB=$("$PYTHON" -c {q(_MPI_LIBRARY)} 2>&1); then',
            '    echo "slaq.sbatch: $PYTHON cannot import slaq_mpi here ($(hostname): ${MPI_LIB##*$\'\\n\'});'
            ' set slurm.python to the Python slaq-mpi is installed in, or activate its environment in'
            ' slurm.setup" >&2',
            "    exit 2",
            "fi"]
    if s.launcher == "srun" and not s.mpi:
        out += ["# slurm.mpi unset: Open MPI is launched through PMIx (if this Slurm has it), other",
                "# MPIs through PMI-2",
                "MPI_PLUGIN=pmi2",
                'case $MPI_LIB in *"Open MPI"*)',
                '    srun --mpi=list 2>&1 | grep -qw pmix && MPI_PLUGIN=pmix ;;',
                "esac"]
    out.append(f"LAUNCH=({' '.join(launch)})")
    advice = ("check slurm.mpi (srun --mpi=list) or use launcher: mpiexec" if s.launcher == "srun"
              else "check the mpiexec and launcher_args of the slurm: section")
    out.append(f"LAUNCH_ADVICE={q(advice)}   # said if the launch fails before the run starts")
    if config is None:
        out += [
            'CONFIG=${1:?"usage: sbatch slurm/slaq.sbatch CONFIG.yaml [RUN_DIR]"}',
            "# the config's output_dir; a config that cannot be read ends the job here, in one line",
            'OUT_DIR=$("$PYTHON" -c \'import sys; from slaq_mpi.config.experiment import load',
            'try: print(load(sys.argv[1], check_files=False).output_dir.resolve())',
            'except Exception as exc: sys.exit(f"slaq: error: {exc}")\' "$CONFIG") || exit 2',
            'RUN_DIR=${2:-$OUT_DIR}',
            "# a fresh start writes into the config's output_dir: RUN_DIR must be it, or a run to resume",
            'if [ -n "$OUT_DIR" ] && [ ! -f "$RUN_DIR/state.json" ] && '
            '[ "$(readlink -m "$RUN_DIR")" != "$OUT_DIR" ]; then',
            '    echo "slaq.sbatch: RUN_DIR $RUN_DIR holds no run to resume, and a new run of $CONFIG '
            'goes into its output_dir $OUT_DIR: leave RUN_DIR out, or give a run directory to resume" >&2',
            '    exit 2',
            'fi',
        ]
    else:
        out += [f"CONFIG={q(config)}", f"RUN_DIR={q(run_dir or '')}"]
    out += _SCRIPT.splitlines()
    return out


# Prints the first line of the MPI library's version (Open MPI's ends in a NUL byte), without
# initializing MPI.
_MPI_LIBRARY = ("import slaq_mpi, mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
                "print(MPI.Get_library_version().split(chr(0))[0].strip().splitlines()[0])")


_SCRIPT = r"""
export PYTHONUNBUFFERED=1   # rank 0's "epoch ..." progress lines reach the log as they happen
RESTARTS=${SLURM_RESTART_COUNT:-0}
say() { echo "slaq.sbatch: $(date '+%F %T') job ${SLURM_JOB_ID:-?} restart $RESTARTS: $*"; }

# A warning signal (USR1), preemption or scancel (TERM): ask rank 0 for a graceful stop by
# creating RUN_DIR/STOP, once the run owns RUN_DIR (state.json written): a fresh start moves an
# old RUN_DIR aside, so a STOP file made too early would be lost; until then a watcher waits.
caught=0
stop_requested=0
step=
ask_rank0_to_stop() {
    if [ -f "$RUN_DIR/state.json" ]; then
        touch "$RUN_DIR/STOP"
    elif [ -n "$step" ]; then
        ( while kill -0 "$step" 2>/dev/null; do
              if [ -f "$RUN_DIR/state.json" ]; then touch "$RUN_DIR/STOP"; exit 0; fi
              sleep 1
          done ) &
    fi
}
request_stop() {
    caught=1
    say "got SIG$1: asking for a graceful stop"
    [ "$stop_requested" = 1 ] || ask_rank0_to_stop
    stop_requested=1
}
trap 'request_stop USR1' USR1
trap 'request_stop TERM' TERM

# A leftover STOP file (from a signal that came after the stop) would stop this start at once.
rm -f "$RUN_DIR/STOP"
if [ -f "$RUN_DIR/state.json" ]; then
    say "resuming $RUN_DIR"
    ARGS=(run --resume "$RUN_DIR")
else
    say "starting $CONFIG into $RUN_DIR"
    ARGS=(run "$CONFIG")
fi

# The step runs in the background so the traps fire while this shell waits for it. Rank 0
# writes its pid into the run's lock file (.NAME.lock beside RUN_DIR) as it starts: if the lock
# file still says what it said before the launch, no rank 0 ever ran (the launch failed).
lock_text() {
    local d; d=$(readlink -f "$RUN_DIR")
    cat "$(dirname "$d")/.$(basename "$d").lock" 2>/dev/null
}
say "MPI: $MPI_LIB; launcher: ${LAUNCH[*]}"
lock_before=$(lock_text)
"${LAUNCH[@]}" "$PYTHON" -m slaq_mpi "${ARGS[@]}" &
step=$!
[ "$stop_requested" = 1 ] && ask_rank0_to_stop   # a signal that came before the launch
while :; do
    caught=0
    wait "$step"
    status=$?
    # wait returns early (status > 128) when a trapped signal arrives: keep waiting.
    [ "$caught" = 1 ] && [ "$status" -gt 128 ] && continue
    break
done
trap - USR1 TERM

if [ "$status" != 2 ] && [ "$status" != 75 ] && [ "$stop_requested" = 0 ] &&
        [ "$(lock_text)" = "$lock_before" ]; then
    say "the MPI launch failed before the run started (status $status, its message is above):" \
        "$LAUNCH_ADVICE (docs/slurm.md)"
    exit 3
fi
case $status in
    0) say "every job done" ;;
    1) say "finished; at least one job failed (see the log and $RUN_DIR/metrics.h5)" ;;
    75)
        # A stop asked inside the run (RUN_DIR/STOP, a signal to rank 0 itself) with no signal
        # to this script: the user's "stop for a later resume", not requeued.
        if [ "$stop_requested" = 0 ]; then
            say "stopped with checkpoints on request (RUN_DIR/STOP or a signal to rank 0)," \
                "not requeued; resume with: slaq run --resume $RUN_DIR (or submit again)"
            exit "$status"
        fi
        # scancel sends TERM too. A job ending with no reason of Slurm's own (not the time
        # limit) was cancelled by its owner or an admin: this script does not requeue it.
        info=$(scontrol show job "$SLURM_JOB_ID" -o 2>/dev/null)
        state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")
        reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<< "$info")
        if { [ "$state" = COMPLETING ] || [ "$state" = CANCELLED ]; } && [ "$reason" = None ]; then
            say "ended by Slurm (scancel, or scontrol requeue, which restarts it): stopped with" \
                "checkpoints; after a scancel, resume with: slaq run --resume $RUN_DIR (or submit again)"
            exit "$status"
        fi
        if [ "$REQUEUE" = 1 ] && [ "$RESTARTS" -lt "$MAX_RESTARTS" ]; then
            say "stopped with checkpoints; requeueing"
            rm -f "$RUN_DIR/STOP"
            if scontrol requeue "$SLURM_JOB_ID"; then
                exit 0
            fi
            say "scontrol requeue failed"
        fi
        say "stopped with checkpoints; resume with: slaq run --resume $RUN_DIR (or submit again)" ;;
    2) say "bad input or run directory in use (the error is above); nothing was run" ;;
    *) say "slaq run exited with status $status; after a crash: slaq run --resume $RUN_DIR" ;;
esac
exit "$status"
"""


# --- Slurm commands ------------------------------------------------------------------------

def run_cmd(argv: Sequence[str], *, input: str | None = None, cwd: str | Path | None = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command and return the finished process (text output, never raises on a
    non-zero status; raises SlurmError if the command is missing or hangs). Every Slurm command
    of slaq-mpi goes through here, so tests can fake Slurm at this one boundary."""
    try:
        return subprocess.run(list(argv), input=input, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: command not found; is Slurm installed here (or its module "
                         "loaded)?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv)}: no answer in {timeout:g} s; is slurmctld up?") from None


def submit(script: str, *, cwd: str | Path | None = None, sbatch_args: Sequence[str] = ()) -> str:
    """Submit ``script`` (text, given to sbatch on standard input) and return the job id.

    Slurm queues a request no partition can ever satisfy (more tasks than its nodes have
    cores, more nodes than it has) and leaves it pending for good, with a reason that says
    so at once. Such a job is cancelled and refused here. (``sbatch --test-only`` cannot
    tell it from a job waiting for drained or down nodes, which will run later.)
    """
    proc = run_cmd(["sbatch", "--parsable", *sbatch_args], input=script, cwd=cwd)
    if proc.returncode != 0:
        why = " ".join((proc.stderr or proc.stdout).split()) or f"exit status {proc.returncode}"
        raise SlurmError(f"sbatch refused the job: {why}")
    first = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    job_id = first.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {proc.stdout.strip()!r}, not a job id")
    try:
        reason = job_info(job_id).get("Reason", "")
    except SlurmError:
        return job_id  # scontrol did not answer: the job is queued; nothing more to tell
    if reason in NEVER_STARTS:
        run_cmd(["scancel", job_id])
        raise SlurmError(f"Slurm would never start job {job_id} (Reason={reason}: "
                         f"{NEVER_STARTS[reason]}); it was cancelled. Ask for fewer tasks or "
                         "nodes, or another partition (sinfo shows them)")
    return job_id


#: Pending reasons Slurm gives at submission to a job that cannot run unless the partition's
#: configuration changes.
NEVER_STARTS: dict[str, str] = {
    "PartitionConfig": "the request exceeds what the partition has",
    "PartitionNodeLimit": "the node count is outside the partition's limits",
    "PartitionTimeLimit": "the time limit exceeds the partition's",
    "BadConstraints": "no node has the requested features",
}


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job`` of ``job_id`` as a mapping (JobState, Restarts, ExitCode, ...);
    empty if Slurm no longer knows the job."""
    proc = run_cmd(["scontrol", "show", "job", "--oneliner", str(job_id)])
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return {}
        raise SlurmError(f"scontrol show job {job_id}: {proc.stderr.strip()}")
    info: dict[str, str] = {}
    for token in proc.stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in info:
            info[key] = value
    return info


# --- command line --------------------------------------------------------------------------

def _workdir(settings: SlurmSettings, cwd: Path) -> Path:
    """Where the job runs: slurm.chdir (relative to the submit directory), else the submit directory."""
    return cwd / settings.chdir if settings.chdir else cwd


def output_path(settings: SlurmSettings, job_id: str, cwd: Path) -> Path:
    """The log file of job ``job_id`` submitted from ``cwd`` (expands %x, %j and %%)."""
    name = settings.output.replace("%x", settings.job_name).replace("%j", job_id).replace("%%", "%")
    return _workdir(settings, cwd) / name


def _check_log_dirs(settings: SlurmSettings, cwd: Path) -> None:
    """Refuse an ``output``/``error`` whose directory does not exist: Slurm does not create it,
    and the job would run and vanish without a log."""
    work = _workdir(settings, cwd)
    if settings.chdir is not None and not work.is_dir():
        raise ConfigError("slurm.chdir", settings.chdir, f"the directory {work} does not exist")
    for key in ("output", "error"):
        value = getattr(settings, key)
        if value is None:
            continue
        log = work / value.replace("%x", settings.job_name).replace("%%", "%")
        if "%" not in str(log) and log.is_dir():
            raise ConfigError(f"slurm.{key}", value, f"{log} is a directory; give the log file's "
                              "name (e.g. slaq-%x-%j.out: %x the job name, %j its id)")
        parent = log.parent
        if "%" not in str(parent) and not parent.is_dir():
            raise ConfigError(f"slurm.{key}", value, f"its directory {parent} does not exist; Slurm "
                              "would not create it and the job would leave no log: create it first")


def _run_part(text: str) -> Any:
    """An experiment YAML without the sections a resumed run ignores (None if unparsable)."""
    import yaml

    from slaq_mpi.config import experiment as config

    try:
        raw = yaml.load(text, Loader=config.yaml_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return None
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k not in ("slurm", "simulation")}
    return raw


def _check_resumable(run_dir: Path, source: str, given: str) -> None:
    """Refuse to submit ``given`` (YAML text ``source``) into ``run_dir``, which holds an
    earlier run that the job would resume, unless that run is of this config and has not
    finished. Only the ``slurm:`` section (and ``simulation:``) may differ: a longer time
    limit or another partition for the rest of a run is the usual reason to submit it again."""
    from slaq_mpi.runtime.launch import finished_status

    try:
        saved = (run_dir / "config.yaml").read_text()
    except (OSError, UnicodeDecodeError):
        raise ConfigError("output_dir", str(run_dir), "holds an earlier run without a readable "
                          "config.yaml, which the job would try to resume: move it away, or give "
                          "this config another output_dir") from None
    if _run_part(saved) != _run_part(source):
        raise ConfigError("output_dir", str(run_dir), f"holds an earlier run of another config (its "
                          f"config.yaml differs from {given} outside slurm: and simulation:), "
                          "which the job would resume instead: move it away, or give this config "
                          "another output_dir")
    if finished_status(run_dir) is not None:
        raise ConfigError("output_dir", str(run_dir), "holds a finished run of this config; nothing "
                          "to resume: move it away for a fresh run (slaq report shows its results)")


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    """Run the block in ``path`` (then back where we were)."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def launch_notes(settings: SlurmSettings, cwd: Path) -> list[str]:
    """What this host can tell about the job's launch before it waits in the queue: an
    ``srun --mpi`` plugin that this host's srun does not offer, or a ``python``/``mpiexec``
    path that is not an executable here. Notes, not refusals: compute nodes may differ, and
    ``setup`` commands (modules) may provide them."""
    notes = []
    paths = {"python": settings.python}
    if settings.launcher == "mpiexec":
        paths["mpiexec"] = settings.mpiexec
    for key, path in paths.items():
        if path is None or "/" not in path:  # a bare name is looked up on the job's PATH
            continue
        full = _workdir(settings, cwd) / path  # where the job runs; an absolute path stays itself
        if not (full.is_file() and os.access(full, os.X_OK)):
            notes.append(f"slurm.{key} {path} is not an executable file here: the job fails at its "
                         "start unless the compute nodes have it")
    if settings.launcher == "srun" and settings.mpi:
        try:
            listed = run_cmd(["srun", "--mpi=list"], timeout=20)
        except SlurmError:
            return notes  # no srun here to ask; the job's srun says
        offered = {line.strip() for line in (listed.stdout + listed.stderr).splitlines()}
        if listed.returncode == 0 and settings.mpi not in offered:
            plugins = sorted(p for p in offered if p and " " not in p and ":" not in p)
            notes.append(f"slurm.mpi {settings.mpi}: this host's srun offers {', '.join(plugins)} "
                         "(srun --mpi=list); the job's srun fails unless the compute nodes have it")
    return notes


def _cmd_submit(args: argparse.Namespace) -> int:
    from slaq_mpi.config import experiment as config
    from slaq_mpi.runtime.launch import check_data_unchanged, start_dir

    cwd = Path.cwd()
    first = config.load(args.config, check_files=False)
    settings = settings_for(first)
    if settings.python is None:
        # the job runs the Python that runs this command (its venv need not be active)
        settings = replace(settings, python=sys.executable)
    _check_log_dirs(settings, cwd)  # also that slurm.chdir exists
    for note in launch_notes(settings, cwd):
        print(f"slaq: note: {note}", file=sys.stderr)
    work = _workdir(settings, cwd)
    run_dir = str((work / first.output_dir).resolve())  # the job's directory is the base
    resume = (Path(run_dir) / "state.json").is_file()
    # ... and relative data and solver paths from there too, or, resuming a run, from the
    # directory that run started in: check them where the job will read them
    where = (start_dir(Path(run_dir)) if resume else None) or work
    given = args.config if where == cwd else str(Path(args.config).resolve())
    with _working_directory(where):
        spec = config.load(given)
        config.require_live(spec)
        for problem in config.memory_notes(spec):  # the compute nodes check it again, and may have more
            print(f"slaq: note: too big for this machine's memory: {problem}", file=sys.stderr)
        rundir.check_free(run_dir)
        if resume:
            _check_resumable(Path(run_dir), spec.source, args.config)
            # the job would refuse, after its wait
            check_data_unchanged(Path(run_dir), spec, "output_dir", "move this earlier run away "
                                 "for a fresh one (the job would resume it)")
            print(f"slaq: note: {run_dir} holds an earlier run of this config; the job will resume it "
                  "(move it away for a fresh run)", file=sys.stderr)
        else:
            config.check_sections(spec, simulation_files=False)
            rundir.check_fresh(run_dir, "output_dir", config.input_files(spec))
            config.check_data_space(spec)
    script = render_sbatch(settings, config=str(Path(args.config).resolve()), run_dir=run_dir)
    if args.dry_run:
        print(script, end="")
        return 0
    try:
        job_id = submit(script, cwd=cwd)
    except SlurmError as exc:
        print(f"slaq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"submitted batch job {job_id}: {settings.ntasks} tasks for {settings.time}; "
          f"log {output_path(settings, job_id, cwd)}; run dir {run_dir}")
    return 0


def add_cli(subparsers: Any) -> None:
    """Add ``slaq submit CONFIG [--dry-run]`` to the ``slaq`` command line."""
    p = subparsers.add_parser("submit", help="submit an experiment to Slurm as one sbatch allocation")
    p.add_argument("config", help="experiment YAML with an optional slurm: section (docs/slurm.md)")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch script instead of submitting")
    p.set_defaults(func=_cmd_submit)
