"""``slaq run`` and ``slaq validate``: start an experiment, or check its YAML without running it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slaq_mpi._text import count

__all__ = ["add_cli", "cmd_run", "cmd_validate"]


def cmd_validate(args: argparse.Namespace) -> int:
    """Check the experiment YAML ``args.config``; print what ``run``/``submit`` would refuse here
    as notes (a config may be meant for another machine or for ``slaq simulate`` only)."""
    from slaq_mpi.config import experiment as config
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.policies import LIVE_POLICY_NAMES
    from slaq_mpi.runtime.launch import check_local_ranks
    from slaq_mpi.sim.settings import parse_settings
    from slaq_mpi.storage.rundir import check_fresh, holder_of

    spec = config.load(args.config)
    check_fresh(spec.output_dir, "output_dir", config.input_files(spec))
    parse_settings(spec)  # the curve library `slaq simulate` would read
    print(
        f"{args.config}: ok: experiment {spec.name!r}, {count(len(spec.jobs), 'job')}, {spec.ranks} ranks, "
        f"policy {spec.policy}, epoch {spec.epoch_seconds:g} s"
    )
    for check in (config.check_data_space, lambda s: check_local_ranks(s.ranks)):
        try:
            check(spec)
        except ConfigError as exc:  # a config may be for `slaq simulate` only: a note, not an error
            print(f"{args.config}: note: slaq run would refuse it here: {exc}")
    _slurm_notes(args.config, spec)
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


def _slurm_notes(given: str, spec: Any) -> None:
    """Note what ``slaq submit`` from here would refuse in, or say of, the ``slurm:`` settings
    (the check submit makes: :func:`slaq_mpi.slurm.submit.check_slurm`)."""
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.slurm.submit import check_slurm, job_settings

    why = "here" if spec.slurm else "(no slurm: section, so Slurm's defaults)"
    try:
        notes = check_slurm(job_settings(spec), Path.cwd())
    except ConfigError as exc:
        print(f"{given}: note: slaq submit would refuse it {why}: {exc}")
        return
    for text in notes:
        print(f"{given}: note: slaq submit: {text}")


def cmd_run(args: argparse.Namespace) -> int:
    """Run an experiment (``slaq_mpi.runtime.launch.run_command``)."""
    from slaq_mpi.runtime.launch import run_command

    return run_command(args)


def add_cli(subparsers: Any) -> None:
    """Add ``slaq run`` and ``slaq validate`` to the ``slaq`` command line."""
    p = subparsers.add_parser("run", help="run an experiment (re-launches itself under mpiexec if needed)")
    p.add_argument("config", nargs="?", help="experiment YAML (see docs/config.md)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its checkpoints")
    p.add_argument("--mpiexec", default=None, help="MPI launcher to use when not already under MPI")
    p.add_argument("--open", action="store_true",
                   help="keep the run alive when its jobs are done, waiting for `slaq add` "
                        "until `slaq drain`, a stop or the time limit (the config's `open: true`)")
    p.set_defaults(func=cmd_run)
    p = subparsers.add_parser("validate", help="check an experiment YAML without running it")
    p.add_argument("config", help="experiment YAML to check (see docs/config.md)")
    p.set_defaults(func=cmd_validate)
