"""``slaq submit``'s work: the checks before an experiment goes to Slurm, and every Slurm command.

One SLAQ experiment runs in ONE Slurm allocation: one MPI rank per task (core), launched with
``srun --mpi=pmi2`` (or another srun MPI plugin, or ``mpiexec``). The batch script
(:mod:`slaq_mpi.slurm.render`) asks Slurm for a warning signal before the time limit; on that
signal (or SIGTERM) it creates ``RUN_DIR/STOP``, rank 0 checkpoints and exits with status 75,
and the script requeues the job, which resumes from the checkpoints (``slaq run --resume
RUN_DIR``). ``docs/slurm.md`` tells the whole story.

* :func:`plan` reads a config into a :class:`Submission`; :func:`check` checks it where the job
  will run, before it waits in the queue.
* Every Slurm command goes through :func:`run_cmd`; :func:`submit` and :func:`job_info` use it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slaq_mpi.errors import ConfigError, SlaqError
from slaq_mpi.slurm.render import render_sbatch
from slaq_mpi.slurm.settings import SlurmSettings, settings_for
from slaq_mpi.storage import rundir

__all__ = [
    "NEVER_STARTS",
    "SlurmError",
    "Submission",
    "check",
    "check_slurm",
    "job_info",
    "job_settings",
    "launch_notes",
    "output_path",
    "plan",
    "run_cmd",
    "submit",
]


class SlurmError(SlaqError, RuntimeError):
    """A Slurm command failed or answered something unexpected."""


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


# --- checks before a submission --------------------------------------------------------------------------

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


@dataclass(frozen=True)
class Submission:
    """What ``slaq submit`` gives Slurm: the job's settings, its config and run directory."""

    settings: SlurmSettings
    config: Path  # absolute, as the job reads it
    run_dir: Path  # absolute: the config's output_dir seen from where the job runs
    resume: bool  # run_dir holds an earlier run (state.json): the job resumes it

    def script(self) -> str:
        """The batch script of this submission."""
        return render_sbatch(self.settings, config=str(self.config), run_dir=str(self.run_dir),
                             package=str(Path(__file__).resolve().parents[1]))


def job_settings(spec: Any) -> SlurmSettings:
    """The settings a job of ``spec`` is submitted with: its ``slurm:`` section (Slurm's
    defaults without one), running the Python that runs this command unless ``slurm.python``
    names another (its virtualenv need not be active in the job).

    Raises:
        ConfigError: ``spec`` has no ``slurm:`` section and the defaults do not fit it.
    """
    settings = settings_for(spec)
    return settings if settings.python is not None else replace(settings, python=sys.executable)


def check_slurm(settings: SlurmSettings, cwd: Path) -> list[str]:
    """The one check of the ``slurm:`` settings on this host, for a job submitted from ``cwd``:
    ``slaq submit`` refuses what it raises, ``slaq validate`` notes it. Returns the notes of
    :func:`launch_notes` (what the compute nodes may still provide).

    Raises:
        ConfigError: ``slurm.chdir`` is not a directory, or ``slurm.output``/``slurm.error``
            is a directory or lies in one that does not exist (Slurm would not create it).
    """
    _check_log_dirs(settings, cwd)
    return launch_notes(settings, cwd)


def plan(config_arg: str, cwd: Path) -> Submission:
    """The submission of the experiment YAML ``config_arg`` from the directory ``cwd``. Reads
    only the YAML (data and solver files are checked by :func:`check`).

    Raises:
        ConfigError: the YAML or its ``slurm:`` section is refused.
    """
    from slaq_mpi.config import experiment as config

    first = config.load(config_arg, check_files=False)
    settings = job_settings(first)
    run_dir = (_workdir(settings, cwd) / first.output_dir).resolve()  # the job's directory is the base
    return Submission(settings, Path(config_arg).resolve(), run_dir,
                      resume=(run_dir / "state.json").is_file())


def check(sub: Submission, config_arg: str, cwd: Path, note: Callable[[str], None]) -> None:
    """Check ``sub`` (of the YAML ``config_arg``, submitted from ``cwd``) as the job would,
    where it will run, before it waits in the queue; ``note`` gets what the job may still
    survive (memory of this machine, an earlier run it will resume, launch hints).

    Raises:
        ConfigError: the first thing the job would refuse.
    """
    from slaq_mpi.config import experiment as config
    from slaq_mpi.runtime.launch import check_data_unchanged, start_dir

    for text in check_slurm(sub.settings, cwd):
        note(text)
    run_dir = str(sub.run_dir)
    # relative data and solver paths are read from where the job runs, or, resuming a run, from
    # the directory that run started in: check them there
    work = _workdir(sub.settings, cwd)
    where = (start_dir(sub.run_dir) if sub.resume else None) or work
    given = config_arg if where == cwd else str(sub.config)
    with _working_directory(where):
        spec = config.load(given)
        config.require_live(spec)
        for problem in config.memory_notes(spec):  # the compute nodes check it again, and may have more
            note(f"too big for this machine's memory: {problem}")
        rundir.check_free(run_dir)
        if sub.resume:
            _check_resumable(sub.run_dir, spec.source, config_arg)
            # the job would refuse, after its wait
            check_data_unchanged(sub.run_dir, spec, "output_dir", "move this earlier run away "
                                 "for a fresh one (the job would resume it)")
            note(f"{run_dir} holds an earlier run of this config; the job will resume it "
                 "(move it away for a fresh run)")
        else:
            rundir.check_fresh(run_dir, "output_dir", config.input_files(spec))
            config.check_data_space(spec)
