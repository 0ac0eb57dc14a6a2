"""``slaq check-solver FILE.py:Class [--data FILE.h5]``: run a solver serially, on 1 rank and
on 3 ranks, compare its losses and restore its checkpoint on another rank count
(:mod:`slaq_mpi.runtime.solver_check`); under mpiexec, with ``--rank-spec``, it is one rank of
that check (:mod:`slaq_mpi.runtime.solver_ranks`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slaq_mpi.errors import EXIT_FAILED, NO_VALUE, ConfigError

__all__ = ["add_cli", "cmd_check_solver"]


def _solver(algorithm: str) -> Any:
    """The solver class ``algorithm`` names.

    Raises:
        ConfigError: it does not load, naming why.
    """
    from jobs import load_solver

    try:
        return load_solver(algorithm)
    except KeyError:
        why = "not a built-in algorithm; name a solver as path/to/file.py:ClassName"
    except Exception as exc:  # the user's file: any error of its import
        why = f"the solver file or class does not load ({type(exc).__name__}: {exc})"
    raise ConfigError("check-solver SOLVER", algorithm, why)


def cmd_check_solver(args: argparse.Namespace) -> int:
    """Check a solver; 0 if every check passed, 1 if one failed (each said in a line)."""
    from slaq_mpi.runtime.launch import under_mpi

    if args.rank_spec:
        from slaq_mpi.runtime.solver_ranks import run_ranks

        return run_ranks(Path(args.rank_spec))
    if under_mpi():
        raise ConfigError("check-solver", NO_VALUE, "run it as one process, outside mpiexec or "
                          "srun: it starts its own ranks")
    if args.iterations < 2:
        raise ConfigError("check-solver --iterations", args.iterations, "must be an integer >= 2")
    if args.timeout <= 0:
        raise ConfigError("check-solver --timeout", args.timeout, "must be a number of seconds > 0")
    from slaq_mpi.runtime.solver_check import check_solver

    cls = _solver(args.solver)
    head, checks = check_solver(args.solver, cls, args.data, args.seed, args.iterations,
                                args.mpiexec, args.timeout)
    print(f"slaq check-solver {args.solver}: {head}")
    for check in checks:
        print(f"  {'ok  ' if check.ok else 'FAIL'}  {check.text}")
    failed = sum(not c.ok for c in checks)
    if failed:
        print(f"failed: {failed} of {len(checks)} checks (the protocol: docs/solvers.md)")
        return EXIT_FAILED
    print(f"passed: {len(checks)} checks")
    return 0


def add_cli(subparsers: Any) -> None:
    """Add ``slaq check-solver`` to the ``slaq`` command line."""
    p = subparsers.add_parser(
        "check-solver", help="run a solver serially, on 1 and on 3 ranks, and through a checkpoint, "
                             "and compare its losses")
    p.add_argument("solver", help="path/to/file.py:ClassName (or a built-in algorithm name)")
    p.add_argument("--data", metavar="FILE.h5", default=None,
                   help="an HDF5 dataset (docs/data.md); default: a small generated one of the "
                        "solver's dataset_kind")
    p.add_argument("--iterations", type=int, default=12, help="steps of each run (default 12)")
    p.add_argument("--seed", type=int, default=0, help="the solver's seed and the data's (default 0)")
    p.add_argument("--mpiexec", default=None, help="MPI launcher (default: as slaq run finds it)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds each launch may take (default 300)")
    p.add_argument("--rank-spec", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_check_solver)
