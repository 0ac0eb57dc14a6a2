"""Subcommands ``slaq simulate``, ``slaq curves record`` and ``slaq sim-check``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from slaq_mpi._text import count
from slaq_mpi.cli._output import printer
from slaq_mpi.errors import ConfigError
from slaq_mpi.storage.outpaths import check_writable

__all__ = ["JSON_KEYS", "add_cli", "bound_line", "cmd_curves_record", "cmd_sim_check", "cmd_simulate"]

#: Per-policy keys of ``slaq simulate --json`` (other issues append to this tuple).
JSON_KEYS: tuple[str, ...] = (
    "avg_normalized_loss", "mean_time_to_90", "mean_time_to_95", "median_time_to_90",
    "median_time_to_95", "median_completion", "mean_completion", "makespan",
    "decision_ms", "total_utility", "max_rho", "mean_rho", "min_speedup", "mean_speedup",
    "p_mean_speedup", "normalized_loss_job_s", "mean_active_jobs", "reached_90", "reached_95",
)


def _positive_int(text: str) -> int:
    try:
        val = int(text)
    except ValueError:
        val = 0
    if val < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; must be an integer >= 1")
    return val


def _seed(text: str) -> int:
    """A base seed: SEED*1000+i must stay a 64-bit seed (as the experiment's ``seed``)."""
    from slaq_mpi.config.experiment import EXPERIMENT_SEED_MAX

    try:
        val = int(text)
    except ValueError:
        val = -1
    if not 0 <= val <= EXPERIMENT_SEED_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; must be an integer from 0 to "
                                         f"{EXPERIMENT_SEED_MAX}")
    return val


def _fraction(text: str) -> float:
    try:
        val = float(text)
    except ValueError:
        val = math.nan
    if not 0.0 <= val <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; must be a fraction in [0, 1]")
    return val


def _progress(args: argparse.Namespace) -> Any:
    """Progress lines (stderr with ``--json``); a reader that goes away (``| head``) does not
    stop the simulation: every policy's metrics.h5 is still written."""
    return printer(sys.stderr if args.json else sys.stdout)


def _check_out(out: str | None) -> None:
    """Refuse an empty ``--out DIR`` (which would otherwise mean: write nothing)."""
    if out is not None and not out.strip():
        raise ConfigError("--out", out, "must name a directory (leave --out out to write nothing)")


def cmd_simulate(args: argparse.Namespace) -> int:
    """``slaq simulate CONFIG``: simulate every policy on the same workload and summarize."""
    from slaq_mpi.cli.report import format_table, window_line
    from slaq_mpi.config import experiment as config
    from slaq_mpi.report.evaluation import common_l_star, comparison_window
    from slaq_mpi.report.summary import json_value, summarize_runs
    from slaq_mpi.sim.bound import bound_metrics
    from slaq_mpi.sim.curves import CurveLibrary
    from slaq_mpi.sim.run import run_workload
    from slaq_mpi.sim.settings import check_policy_name, parse_settings
    from slaq_mpi.storage import rundir

    _check_out(args.out)
    spec = config.load(args.config, check_files=False)
    if args.seed is not None:
        spec = dataclasses.replace(spec, seed=args.seed)
    for i, name in enumerate(args.policy or []):
        check_policy_name(name, "--policy")
        if name in args.policy[:i]:
            raise ConfigError("--policy", name, "it is given twice; give each policy once")
    if args.draws is not None:
        return _simulate_draws(args, spec)
    library = CurveLibrary.load(parse_settings(spec).curve_file)
    out = Path(args.out) if args.out else None
    say = _progress(args)
    # never mix with, or overwrite, an earlier simulation or a running one
    with rundir.fresh_output(out, "--out") if out is not None else contextlib.nullcontext() as aside:
        if aside is not None:
            say(f"moved the previous contents of {out} to {aside}")
        work, runs = run_workload(spec, args.policy or None, out=out, progress=say,
                                  max_epochs=args.max_epochs, library=library)
    rows, window = summarize_runs(runs)
    bound = bound_metrics(work.jobs, work.capacity, common_l_star(runs.values()),
                          comparison_window(runs.values()))
    say(window_line(window))
    say(format_table(rows))
    say(bound_line(rows, bound))
    if out is not None:
        say(f"metrics written to {out}/<policy>/metrics.h5; plots: slaq report {shlex.quote(str(out))}")
    if args.json:
        payload = {"policies": {n: {k: json_value(k, r.get(k, math.nan)) for k in JSON_KEYS}
                                for n, r in rows.items()},
                   "bound": {k: json_value(k, v) for k, v in bound.items()}}
        print(json.dumps(payload), flush=True)
    return 0


def bound_line(rows: dict[str, dict[str, float]], bound: dict[str, float]) -> str:
    """The line giving the workload's bound on job-seconds and each policy's distance to it."""
    lb = bound.get("normalized_loss_job_s", math.nan)
    above = ", ".join(f"{n} +{(r['normalized_loss_job_s'] / lb - 1) * 100:.1f}%"
                      for n, r in rows.items() if lb > 0 and math.isfinite(r["normalized_loss_job_s"]))
    return (f"bound (every job alone on all the cores it may use from its arrival, or the "
            f"cluster's core-seconds given to the largest loss drops per core-second first, "
            f"whichever is higher; no policy goes below it): loss job-s {lb:.1f}"
            + (f"; above it: {above}" if above else ""))


def _simulate_draws(args: argparse.Namespace, spec: Any) -> int:
    """``slaq simulate CONFIG --draws K``: every policy on K workload draws, summarized."""
    from slaq_mpi.config.experiment import EXPERIMENT_SEED_MAX
    from slaq_mpi.report.draws import DRAWS_FILE, draws_payload, format_draws
    from slaq_mpi.sim.draws import run_draws
    from slaq_mpi.sim.settings import parse_settings

    out = Path(args.out) if args.out is not None else None
    if out is not None:
        if out.exists() and not out.is_dir():
            raise ConfigError("--out", args.out, "exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        check_writable(out, "--out", args.out, probe=True)
    if spec.seed + args.draws - 1 > EXPERIMENT_SEED_MAX:
        raise ConfigError("--draws", str(args.draws), f"seeds {spec.seed}.. would pass "
                          f"{EXPERIMENT_SEED_MAX}; give a smaller --seed")
    settings = parse_settings(spec)  # the curve file is checked once, before any process starts
    policies = list(args.policy or settings.policies)
    say = _progress(args)
    ds = run_draws(spec, policies, spec.seed, args.draws, jobs=args.jobs,
                   max_epochs=args.max_epochs, progress=say)
    for note in sorted({n for d in ds.draws for n in d.notes}):
        say(note)
    say(format_draws(ds))
    payload = draws_payload(ds, JSON_KEYS)
    if out is not None:
        path = out / DRAWS_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(payload) + "\n")
        tmp.replace(path)
        say(f"per-draw results written to {path}; plot: slaq report {shlex.quote(str(out))}")
    if args.json:
        print(json.dumps(payload), flush=True)
    return 0


def _algorithms(names: list[str] | None) -> list[str] | None:
    """The ``--algorithm`` names, each once; a name that is not a solver is refused."""
    if not names:
        return None
    from jobs import ALGORITHMS, load_solver
    from slaq_mpi.sim.curves import algorithm_key

    out: list[str] = []
    for given in names:
        name = algorithm_key(given)  # a solver file by its absolute path: found from anywhere
        if name in ALGORITHMS or name in out:
            pass
        elif ".py:" in name:
            try:
                solver = load_solver(name)
            except Exception as exc:
                raise ConfigError("--algorithm", given, f"this solver does not load "
                                  f"({type(exc).__name__}: {exc})") from None
            from slaq_mpi.sim.record import KIND_RECIPES

            kind = getattr(solver, "dataset_kind", None)
            if kind is not None and kind not in KIND_RECIPES:
                raise ConfigError("--algorithm", given, f"its dataset_kind {kind!r} is none of "
                                  f"{', '.join(KIND_RECIPES)}: the data it is recorded on")
        else:
            raise ConfigError("--algorithm", given, f"allowed: {', '.join(sorted(ALGORITHMS))} "
                              "(or a solver file: path/to/file.py:ClassName)")
        if name not in out:
            out.append(name)
    return out


def _library_out(text: str) -> Path:
    """Where ``slaq curves record`` writes: checked before anything is recorded (its directory
    must exist: a misspelt one is not created)."""
    if not text.strip():
        raise ConfigError("--out", text, "must name a .npz file")
    out = Path(text)
    if out.is_dir():
        raise ConfigError("--out", text, "is a directory; must name a .npz file")
    where = out.resolve().parent
    if not where.exists():
        raise ConfigError("--out", text, f"cannot be written: the directory {where} does not exist")
    check_writable(where, "--out", text, probe=True)
    return out


def cmd_curves_record(args: argparse.Namespace) -> int:
    """``slaq curves record``: record curves from our solvers and merge them into a library
    (``--out FILE``; a new FILE starts as a copy of the packaged library)."""
    from slaq_mpi.errors import DataError
    from slaq_mpi.sim.curves import CurveLibrary
    from slaq_mpi.sim.record import record_curves

    algorithms = _algorithms(args.algorithm)
    out = _library_out(args.out)
    try:
        # a new file starts as a copy of the packaged library: usable whole as a curve_file
        old = CurveLibrary.load(out if out.exists() else None)
    except DataError:
        raise ConfigError("--out", str(out), "exists and is not a curve library of `slaq curves "
                          "record` (recorded curves are merged into it); remove it or give "
                          "another file") from None
    new = record_curves(algorithms, seed=args.seed, progress=printer(sys.stdout))  # `| head`: saved still
    if not new:
        print(f"no usable curve recorded; {out} left as it was")
        return 1
    lib = old.merged(new)
    lib.save(out)
    algs = sorted({c.algorithm for c in new})
    replaced = sum(len(old.for_algorithm(a)) for a in algs)
    did = f"replaced {replaced} old ones" if replaced else "new"
    kept = [a for a in (algorithms or []) if a not in algs and old.for_algorithm(a)]
    if kept:
        print(f"note: nothing usable recorded for {', '.join(kept)}: its old curves are kept")
    print(f"{count(len(new), 'curve')} of {', '.join(algs)} recorded ({did}); library {out} now holds "
          f"{count(len(lib), 'curve')} of {count(len(lib.algorithms()), 'algorithm')} "
          f"({out.stat().st_size / 1024:.0f} KiB)")
    return 0


def cmd_sim_check(args: argparse.Namespace) -> int:
    """``slaq sim-check RUN_DIR``: simulate a real run, calibrated from it; compare shares."""
    from slaq_mpi.report.summary import json_value
    from slaq_mpi.sim.run import compare_with_run, read_real_run
    from slaq_mpi.storage import rundir

    _check_out(args.out)
    if args.out is None:
        cmp = compare_with_run(args.run_dir, epoch_model=args.epoch_model)
    else:
        read_real_run(args.run_dir)  # a bad RUN_DIR is refused before --out is touched
        out, real = Path(args.out).resolve(), Path(args.run_dir).resolve()
        if out == real or out in real.parents:
            raise ConfigError("--out", args.out, f"must not be the real run's directory or hold it "
                              f"({args.run_dir}); an earlier simulation there is moved aside")
        with rundir.fresh_output(args.out, "--out") as aside:
            if aside is not None and not args.json:
                print(f"moved the previous contents of {args.out} to {aside}")
            cmp = compare_with_run(args.run_dir, out=args.out, epoch_model=args.epoch_model)
    ok = cmp.mean_share_difference <= args.threshold
    if args.json:
        print(json.dumps({"mean_share_difference": json_value("mean_share_difference",
                                                                    cmp.mean_share_difference),
                          "threshold": args.threshold, "ok": ok}))
    else:
        print("seconds per iteration on a cores, fitted to the real run (the simulator's scaling model):")
        for name, m in sorted(cmp.scaling.items()):
            print(f"  {name}: t(a) = {m.work:.4g}/a + {m.overhead:.4g} + {m.comm:.4g}*log2(a)")
        print(f"mean core-share difference (sim vs real): {cmp.mean_share_difference:.1%} "
              f"({'within' if ok else 'above'} {args.threshold:.0%})")
    return 0 if ok else 1


def add_cli(subparsers: Any) -> None:
    """Add ``simulate``, ``curves`` and ``sim-check`` to the ``slaq`` command line."""
    p = subparsers.add_parser("simulate", help="simulate an experiment under one or more policies")
    p.add_argument("config", help="experiment YAML (its simulation: section, see docs)")
    p.add_argument("--policy", action="append", metavar="NAME",
                   help="policy to simulate (repeatable, each once; default: simulation.policies)")
    p.add_argument("--out", metavar="DIR", help="write DIR/<policy>/metrics.h5 (with --draws: "
                   "DIR/draws.json, the per-draw results `slaq report DIR` plots)")
    p.add_argument("--json", action="store_true", help="print one JSON summary line last")
    p.add_argument("--max-epochs", type=_positive_int, default=None,
                   help="stop after this many epochs; jobs due later are left out of the table")
    p.add_argument("--seed", type=_seed, default=None,
                   help="the workload's seed, in place of the config's seed: (with --draws) the first")
    p.add_argument("--draws", type=_positive_int, default=None, metavar="K",
                   help="run every policy on K workload draws (seeds SEED..SEED+K-1) and give "
                        "the median and interquartile range over them, and each policy's "
                        "per-draw change against the first policy")
    p.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                   help="processes running the draws at once (default: the cores of this machine)")
    p.set_defaults(func=cmd_simulate)
    p = subparsers.add_parser("curves", help="the simulator's loss-curve library")
    csub = p.add_subparsers(dest="curves_command", required=True, metavar="ACTION")
    r = csub.add_parser("record", help="record loss curves from our solvers (serial) into the "
                                       "curve library")
    r.add_argument("--out", metavar="FILE", required=True,
                   help="the library to update (a new FILE starts as a copy of the packaged "
                        "one; use it with simulation.curve_file); the curves recorded replace "
                        "those of their algorithms, all others are kept")
    r.add_argument("--algorithm", action="append",
                   help="only these algorithms (repeatable; default: all built-in ones)")
    r.add_argument("--seed", type=_seed, default=0,
                   help="base seed: recipe i of an algorithm seeds its synthetic dataset and its "
                        "solver with SEED*1000+i (default: %(default)s)")
    r.set_defaults(func=cmd_curves_record)
    p = subparsers.add_parser("sim-check", help="compare a real run with its calibrated simulation")
    p.add_argument("run_dir", help="a real run directory holding metrics.h5")
    p.add_argument("--threshold", type=_fraction, default=0.15,
                   help="allowed mean core-share difference, a fraction of the cores; above it "
                        "the exit status is 1 (default: %(default)s)")
    p.add_argument("--out", metavar="DIR", help="write the simulation's metrics.h5 here")
    p.add_argument("--epoch-model", choices=("live", "fluid"), default="live",
                   help="how the simulator runs epochs (default: like the live runtime)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON line {mean_share_difference, threshold, ok} "
                        "instead of the text")
    p.set_defaults(func=cmd_sim_check)
