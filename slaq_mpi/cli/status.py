"""``slaq status RUN_DIR [--json] [--watch [SECONDS]]``: what a run is doing, from its run
directory alone (no MPI: it works on a login node, while the run is live or after it ended).
The reading is :func:`slaq_mpi.report.status.load_status`, the output
:mod:`slaq_mpi.report.status_table`; docs/status.md describes both."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from typing import Any

from slaq_mpi.cli._output import printer

__all__ = ["DEFAULT_WATCH_SECONDS", "add_cli", "cmd_status"]

DEFAULT_WATCH_SECONDS = 2.0
_CLEAR = "\033[H\033[2J"  # cursor home, clear the screen
_HEADER_LINES = 6  # lines a screen keeps for the header, the column names and the "more" line


def _frame(args: argparse.Namespace, terminal: bool) -> str:
    """One output of the command: the JSON object, or the header and table."""
    from slaq_mpi.report.status import load_status
    from slaq_mpi.report.status_table import format_status, status_json

    report = load_status(args.run_dir)
    if args.json:
        return json.dumps(status_json(report), allow_nan=False)
    rows = None
    if args.watch is not None and terminal:  # a redrawn screen shows what fits on it
        rows = max(shutil.get_terminal_size().lines - _HEADER_LINES, 1)
    return format_status(report, max_rows=rows)


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status of ``args.run_dir`` once, or (``--watch``) every few seconds until
    Ctrl-C (exit 0); the screen is cleared between redraws only when stdout is a terminal."""
    say = printer(sys.stdout)
    if args.watch is None:
        say(_frame(args, terminal=False))
        return 0
    terminal = sys.stdout is not None and sys.stdout.isatty() and not args.json
    try:
        while True:
            text = _frame(args, terminal)
            if terminal:
                say(_CLEAR + text)
            else:
                say(text + ("" if args.json else "\n"))
            time.sleep(args.watch)
    except KeyboardInterrupt:  # the way to end a watch
        return 0


def _seconds(text: str) -> float:
    """``--watch``'s period: a number of seconds > 0."""
    try:
        val = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (give RUN_DIR "
                                         "before --watch)") from None
    if not (math.isfinite(val) and val > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; a number of seconds > 0")
    return val


def add_cli(subparsers: Any) -> None:
    """Add ``slaq status RUN_DIR [--json] [--watch [SECONDS]]`` to the ``slaq`` command line."""
    p = subparsers.add_parser(
        "status", help="what a run is doing: its jobs, cores, losses and predicted times (no MPI)",
        description="Show a run's jobs (status, cores, iterations, loss relative to the first, "
                    "time running, predicted time to a 90% loss reduction, weight), its "
                    "utilization and its last decision, from the run directory alone.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's output_dir")
    p.add_argument("--json", action="store_true", help="print one JSON object (docs/status.md)")
    p.add_argument("--watch", nargs="?", type=_seconds, const=DEFAULT_WATCH_SECONDS, default=None,
                   metavar="SECONDS",
                   help=f"redraw every SECONDS (default {DEFAULT_WATCH_SECONDS:g}) until Ctrl-C")
    p.set_defaults(func=cmd_status)
