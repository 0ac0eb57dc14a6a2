"""``slaq submit CONFIG [--dry-run]``: check an experiment and submit it to Slurm as one sbatch
allocation (the checks and Slurm commands are in :mod:`slaq_mpi.slurm.submit`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from slaq_mpi.errors import EXIT_BAD_INPUT, ConfigError, DataError

__all__ = ["add_cli", "cmd_submit"]


def _note(text: str) -> None:
    print(f"slaq: note: {text}", file=sys.stderr)


def cmd_submit(args: argparse.Namespace) -> int:
    """Check ``args.config`` where the job will run, then submit its batch script. ``--dry-run``
    prints the script instead, and notes what a submit would refuse (unless the YAML itself is
    refused: then there is no script)."""
    from slaq_mpi.slurm import submit as slurm

    cwd = Path.cwd()
    sub = slurm.plan(args.config, cwd)  # refused here: no script to show
    script = sub.script()
    refusal = None
    try:
        slurm.check(sub, args.config, cwd, _note)
    except (ConfigError, DataError) as exc:
        if not args.dry_run:
            raise
        refusal = exc
    if args.dry_run:
        print(script, end="")
        if refusal is not None:
            _note(f"slaq submit would refuse it: {refusal}")
        return 0
    try:
        job_id = slurm.submit(script, cwd=cwd)
    except slurm.SlurmError as exc:
        print(f"slaq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"submitted batch job {job_id}: {sub.settings.ntasks} tasks for {sub.settings.time}; "
          f"log {slurm.output_path(sub.settings, job_id, cwd)}; run dir {sub.run_dir}")
    return 0


def add_cli(subparsers: Any) -> None:
    """Add ``slaq submit CONFIG [--dry-run]`` to the ``slaq`` command line."""
    p = subparsers.add_parser("submit", help="submit an experiment to Slurm as one sbatch allocation")
    p.add_argument("config", help="experiment YAML with an optional slurm: section (docs/slurm.md)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the sbatch script instead of submitting it (with a note on what a "
                        "submit would refuse)")
    p.set_defaults(func=cmd_submit)
