"""The ``slaq`` command line: run, validate, and the subcommands of other modules."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

from slaq_mpi._text import count
from slaq_mpi.errors import EXIT_BAD_INPUT, ConfigError, DataError
from slaq_mpi.runtime import signals

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away
_output_lost: list[TextIO] = []  # the streams :func:`quiet` silenced: the exit status says so


def quiet(stream: TextIO) -> None:
    """Send the rest of ``stream`` (standard output or error) to /dev/null: its reader has gone
    (``slaq ... | head``).

    Python raises ``BrokenPipeError`` where a Unix tool would get SIGPIPE; after this call the
    process can finish its work (and exit) without writing to the closed pipe again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)
    _output_lost.append(stream)


def printer(stream: TextIO | None) -> Callable[[str], None]:
    """``print`` to ``stream`` for a command's lines; when the stream's reader has gone
    (``| head``), or it is closed (``2>&-``), the command goes on with its work (files, plots)
    without printing."""

    def say(msg: str) -> None:
        if stream is None:
            return
        try:
            print(msg, file=stream, flush=True)
        except BrokenPipeError:
            quiet(stream)

    return say


# Modules that add their own subcommands through ``add_cli(subparsers)``.
_COMMAND_MODULES = (
    "slaq_mpi.data.convert",
    "slaq_mpi.cli.simulate",
    "slaq_mpi.cli.report",
    "slaq_mpi.slurm.submit",
)


def _cmd_validate(args: argparse.Namespace) -> int:
    from slaq_mpi.config import experiment as config
    from slaq_mpi.policies import LIVE_POLICY_NAMES
    from slaq_mpi.runtime.launch import check_local_ranks
    from slaq_mpi.slurm.settings import settings_for
    from slaq_mpi.storage.rundir import check_fresh, holder_of

    spec = config.load(args.config)
    check_fresh(spec.output_dir, "output_dir", config.input_files(spec))
    config.check_sections(spec)  # a slurm: section given is checked in full here
    print(
        f"{args.config}: ok: experiment {spec.name!r}, {count(len(spec.jobs), 'job')}, {spec.ranks} ranks, "
        f"policy {spec.policy}, epoch {spec.epoch_seconds:g} s"
    )
    for check in (config.check_data_space, lambda s: check_local_ranks(s.ranks)):
        try:
            check(spec)
        except ConfigError as exc:  # a config may be for `slaq simulate` only: a note, not an error
            print(f"{args.config}: note: slaq run would refuse it here: {exc}")
    if not spec.slurm:  # run and simulate need none; submit would fill in Slurm's defaults
        try:
            settings_for(spec)
        except ConfigError as exc:
            print(f"{args.config}: note: slaq submit would refuse it (no slurm: section, so "
                  f"Slurm's defaults): {exc}")
    for problem in config.memory_notes(spec):  # the nodes that train may have more memory
        print(f"{args.config}: note: slaq run would refuse it here: {problem}")
    holder = holder_of(spec.output_dir)
    if holder:  # a run in progress: slaq run would refuse to start into it now
        print(f"{args.config}: note: slaq run would refuse it now: another slaq run is using "
              f"{spec.output_dir} ({holder})")
    if spec.policy not in LIVE_POLICY_NAMES:
        print(f"{args.config}: note: policy {spec.policy!r} is for `slaq simulate` only; "
              "`slaq run` and `slaq submit` refuse it")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from slaq_mpi.runtime.launch import run_command

    return run_command(args)


def _launch_rank() -> str | None:
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var]
    return None


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, like every other refusal: exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"slaq: error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``slaq``."""
    parser = _Parser(
        prog="slaq",
        description="Quality-driven scheduling of many ML training jobs on one MPI allocation.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("run", help="run an experiment (re-launches itself under mpiexec if needed)")
    p.add_argument("config", nargs="?", help="experiment YAML (see docs/config.md)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its checkpoints")
    p.add_argument("--mpiexec", default=None, help="MPI launcher to use when not already under MPI")
    p.set_defaults(func=_cmd_run)
    p = sub.add_parser("validate", help="check an experiment YAML without running it")
    p.add_argument("config", help="experiment YAML to check (see docs/config.md)")
    p.set_defaults(func=_cmd_validate)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slaq`` console script; returns the exit status.

    Called as the process's entry point (``argv`` None), it first records stop signals that
    reach a rank of ``slaq run`` while it starts (:func:`slaq_mpi.runtime.signals.install`).
    """
    if argv is None:
        signals.install()
    if sys.stderr is None:  # started with stderr closed (2>&-): print(file=None) would go to stdout
        fd = os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: 2 if nothing took it
        if fd == 2:  # the launcher's children (mpiexec, the ranks) get it as their stderr too
            os.set_inheritable(fd, True)
        sys.stderr = open(fd, "w")  # open for the life of the process
    parser = build_parser()
    args = parser.parse_args(argv)
    _output_lost.clear()  # this command's own losses only
    try:
        status = int(args.func(args))
        if sys.stdout is not None:  # None: started with stdout closed (>&-)
            sys.stdout.flush()  # a closed pipe fails here, not at exit (status 120, a traceback)
        return EXIT_BROKEN_PIPE if _output_lost and status == 0 else status
    except (ConfigError, DataError) as exc:
        if _launch_rank() in (None, "0"):  # under srun/mpiexec, say it once
            print(f"slaq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `slaq validate X | head`: the reader has what it wanted
        quiet(sys.stdout)
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # a path given too long for the filesystem, wherever it is first used
        if exc.errno != errno.ENAMETOOLONG:
            raise
        if _launch_rank() in (None, "0"):
            print(f"slaq: error: {exc.filename!r} is not allowed; the path is too long (a name may "
                  "have at most 255 bytes, a whole path 4096)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C where slaq has no stop of its own (checks, simulate, data)
        if _launch_rank() in (None, "0"):
            print("slaq: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
