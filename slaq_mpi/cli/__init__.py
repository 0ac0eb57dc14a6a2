"""The ``slaq`` command line: :func:`main` (the console script) and :func:`build_parser`.

Each command group has its own module holding its arguments and command functions: ``run``
(run, validate), ``data`` (data make, data convert), ``simulate`` (simulate, curves record,
sim-check), ``report``, ``submit`` and ``check_solver``. ``slaq`` alone prints the help and
exits 0, as ``slaq --help`` does; ``slaq --version`` names the version and the directory of the code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from slaq_mpi.cli._output import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, output_lost, quiet
from slaq_mpi.errors import EXIT_BAD_INPUT, ConfigError, DataError
from slaq_mpi.runtime import signals

__all__ = ["build_parser", "main"]

# The command groups, in the order ``slaq --help`` lists them; each has ``add_cli(subparsers)``.
_COMMAND_MODULES = (
    "slaq_mpi.cli.run",
    "slaq_mpi.cli.data",
    "slaq_mpi.cli.simulate",
    "slaq_mpi.cli.report",
    "slaq_mpi.cli.submit",
    "slaq_mpi.cli.check_solver",
    "slaq_mpi.cli.status",
    "slaq_mpi.cli.control",
)


def _launch_rank() -> str | None:
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var]
    return None


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, like every other refusal: exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"slaq: error: {self.prog}: {message} (see {self.prog} --help)\n")


# the module of each command: a command line that names one builds only that module's parser
# (`slaq status` on a login node does not pay for importing every other command's libraries)
_COMMAND_MODULE = {
    "run": "slaq_mpi.cli.run", "validate": "slaq_mpi.cli.run", "data": "slaq_mpi.cli.data",
    "simulate": "slaq_mpi.cli.simulate", "curves": "slaq_mpi.cli.simulate",
    "sim-check": "slaq_mpi.cli.simulate", "report": "slaq_mpi.cli.report",
    "submit": "slaq_mpi.cli.submit", "check-solver": "slaq_mpi.cli.check_solver",
    "add": "slaq_mpi.cli.control", "cancel": "slaq_mpi.cli.control",
    "drain": "slaq_mpi.cli.control", "status": "slaq_mpi.cli.status",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``slaq`` (of ``command`` alone, when it names one: the same
    parse of its own arguments, at a fraction of the start-up)."""
    parser = _Parser(
        prog="slaq",
        description="Quality-driven scheduling of many ML training jobs on one MPI allocation.",
        epilog="`slaq COMMAND --help` shows a command's options; `slaq` alone prints this help.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = _COMMAND_MODULE.get(command or "")
    for name in _COMMAND_MODULES:
        if only is None or name == only:
            importlib.import_module(name).add_cli(sub)
    return parser


def _version() -> str:
    """``slaq --version``: the version, and where the code it runs was imported from."""
    import slaq_mpi

    return f"slaq-mpi {slaq_mpi.__version__} ({Path(slaq_mpi.__file__).resolve().parent})"


def _stderr_open() -> None:
    """Give a process started with stderr closed (2>&-) a /dev/null stderr: ``print(file=None)``
    would otherwise write to stdout."""
    fd = os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: 2 if nothing took it
    if fd == 2:  # the launcher's children (mpiexec, the ranks) get it as their stderr too
        os.set_inheritable(fd, True)
    sys.stderr = open(fd, "w")  # open for the life of the process


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``slaq`` console script; returns the exit status.

    Called as the process's entry point (``argv`` None), it first records stop signals that
    reach a rank of ``slaq run`` while it starts (:func:`slaq_mpi.runtime.signals.install`).
    """
    if argv is None:
        signals.install()
    if sys.stderr is None:
        _stderr_open()
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(given[0] if given else None)
    args = parser.parse_args(given)
    if args.command is None:  # `slaq` alone: the help, as a request for it (exit 0)
        parser.print_help()
        return 0
    output_lost.clear()  # this command's own losses only
    try:
        status = int(args.func(args))
        if sys.stdout is not None:  # None: started with stdout closed (>&-)
            sys.stdout.flush()  # a closed pipe fails here, not at exit (status 120, a traceback)
        return EXIT_BROKEN_PIPE if output_lost and status == 0 else status
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
