"""``slaq report RUN_DIR [RUN_DIR ...]``: the paper's metrics as a table, plus PNG figures.

Works on real runs and simulations alike (both write metrics.h5). A RUN_DIR is a directory
holding ``metrics.h5``, or one whose subdirectories do (``slaq simulate --out DIR``). All runs
given are evaluated with the same L* per job (:func:`slaq_mpi.report.evaluation.common_l_star`).
The table needs only numpy; the figures need matplotlib (the ``plot`` extra:
:func:`slaq_mpi._install.pip_install` says how to add it to this installation).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slaq_mpi._install import pip_install
from slaq_mpi._text import count, seconds
from slaq_mpi.cli._output import printer
from slaq_mpi.errors import ConfigError
from slaq_mpi.report.draws import DRAWS_FILE
from slaq_mpi.report.evaluation import RunData, common_l_star, observed, run_span
from slaq_mpi.report.nodes import node_span_lines
from slaq_mpi.report.summary import json_value, summarize_runs
from slaq_mpi.storage.outpaths import check_writable

__all__ = ["COLUMNS", "add_cli", "cmd_report", "find_runs", "format_comparison", "format_table",
           "load_runs", "plots_dir", "window_line"]

#: Table columns: (summary key, header, format). Other modules append columns here.
COLUMNS: list[tuple[str, str, str]] = [
    ("avg_normalized_loss", "avg norm loss", "{:.4f}"),
    ("normalized_loss_job_s", "loss job-s", "{:.1f}"),
    ("mean_active_jobs", "active jobs", "{:.1f}"),
    ("median_time_to_90", "t90 median s", "{:.1f}"),
    ("mean_time_to_90", "t90 mean s", "{:.1f}"),
    ("median_time_to_95", "t95 median s", "{:.1f}"),
    ("mean_time_to_95", "t95 mean s", "{:.1f}"),
    ("median_completion", "JCT median s", "{:.1f}"),
    ("mean_completion", "JCT mean s", "{:.1f}"),
    ("makespan", "makespan s", "{:.0f}"),
    ("total_utility", "utility", "{:.1f}"),
    ("max_rho", "max rho", "{:.2f}"),
    ("mean_rho", "mean rho", "{:.2f}"),
    ("min_speedup", "min speedup", "{:.2f}"),
    ("mean_speedup", "mean speedup", "{:.2f}"),
    ("p_mean_speedup", "p-mean speedup", "{:.3f}"),
    ("decision_ms", "decision ms", "{:.2f}"),
]
#: Lower-is-better metrics compared against a baseline policy under the table.
COMPARED = ("avg_normalized_loss", "mean_time_to_90", "mean_time_to_95", "normalized_loss_job_s")


def _fmt(fmt: str, val: Any) -> str:
    if val is None or (isinstance(val, float) and not math.isfinite(val)):
        return "-"
    return fmt.format(val)


def format_table(rows: Mapping[str, Mapping[str, float]], compare: bool = True) -> str:
    """A fixed-width text table: one row per run label, one column per :data:`COLUMNS` entry,
    then (``compare``) the lines comparing policies (:func:`format_comparison`)."""
    headers = ["policy"] + [h for _, h, _ in COLUMNS]
    body = [[label] + [_fmt(f, r.get(k)) for k, _, f in COLUMNS] for label, r in rows.items()]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths,
                                                                                        strict=True)))]
    for b in body:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(b, widths, strict=True))))
    comp = format_comparison(rows) if compare else ""
    return "\n".join(lines) + ("\n" + comp if comp else "")


def _change(val: float, base: float) -> str:
    if not (math.isfinite(val) and math.isfinite(base)) or base == 0:
        return "-"
    pct = (val - base) / base * 100.0
    if round(abs(pct), 1) == 0:
        return "the same"
    return f"{abs(pct):.1f}% {'lower' if pct < 0 else 'higher'}"


def _reached(key: str, row: Mapping[str, float], base: Mapping[str, float]) -> str:
    """For a time to X% compared: how many jobs reached X% in each run, when the counts differ
    (each mean is over its own jobs)."""
    if not key.startswith(("mean_time_to_", "median_time_to_")):
        return ""
    level = key.rsplit("_", 1)[1]
    a, b = row.get(f"reached_{level}", math.nan), base.get(f"reached_{level}", math.nan)
    if not (math.isfinite(a) and math.isfinite(b)) or a == b:
        return ""
    return f" ({a:.0f} vs {b:.0f} jobs reached {level}%)"


def format_comparison(rows: Mapping[str, Mapping[str, float]], baseline: str = "fair") -> str:
    """Lines comparing every policy with ``baseline`` (and ``slaq`` with ``oracle``)."""
    out = []
    if baseline in rows:
        base = rows[baseline]
        for label, r in rows.items():
            if label == baseline:
                continue
            parts = [f"{k} {_change(r.get(k, math.nan), base.get(k, math.nan))}{_reached(k, r, base)}"
                     for k in COMPARED]
            out.append(f"{label} vs {baseline}: " + ", ".join(parts))
    if "slaq" in rows and "oracle" in rows:
        parts = [f"{k} {_change(rows['slaq'].get(k, math.nan), rows['oracle'].get(k, math.nan))}"
                 for k in ("avg_normalized_loss", "normalized_loss_job_s")]
        out.append("slaq vs oracle: " + ", ".join(parts))
    return "\n".join(out)


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Every metrics.h5 under the given run directories (a directory or its subdirectories),
    each once. The PNGs a report wrote beside the runs (which ``runs/paper/*`` also matches)
    are passed over, other files with a note, as long as some run is left."""
    found: list[Path] = []
    skipped: list[str] = []
    unsaved: list[str] = []
    plots: list[str] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file() and p.suffix == ".png":
            plots.append(str(p))  # a plot a report wrote beside the runs (`runs/paper/*` matches it)
        elif p.is_file() and p.suffix not in (".h5", ".hdf5"):
            skipped.append(str(p))
        elif p.is_file():
            found.append(p)
        elif (p / "metrics.h5").is_file():
            found.append(p / "metrics.h5")
        elif p.is_dir() and sorted(p.glob("*/metrics.h5")):
            found.extend(sorted(p.glob("*/metrics.h5")))
            # a run killed before its first complete save has its state or a partial file only
            unsaved.extend(str(d) for d in sorted(p.iterdir()) if d.is_dir()
                           and not (d / "metrics.h5").exists()
                           and ((d / "state.json").exists() or any(d.glob("metrics.h5.tmp*"))))
        else:
            raise ConfigError("RUN_DIR", str(p), "must be a run directory holding metrics.h5 "
                              "(or directories that do)")
    if not found:
        raise ConfigError("RUN_DIR", " ".join(skipped + plots), "must be a run directory holding metrics.h5 "
                          "(or directories that do)")
    if skipped:
        print(f"slaq: note: skipped what is not a run: {', '.join(skipped)}", file=sys.stderr)
    if unsaved:
        print(f"slaq: note: skipped runs that stopped before they first saved metrics.h5: "
              f"{', '.join(unsaved)}", file=sys.stderr)
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def load_runs(paths: Sequence[str | Path]) -> dict[str, RunData]:
    """Read every run; keys are unique labels: the policy, with ``(run)`` or ``(simulate)``
    when real and simulated runs are read together (so ``slaq vs fair`` never compares a real
    run with a simulation), and with the run's directory when a policy is repeated."""
    from slaq_mpi.config.saved import read_run

    loaded = [(path, observed(read_run(path))) for path in find_runs(paths)]
    mixed = len({run.mode for _, run in loaded}) > 1
    bases = [f"{run.policy} ({run.mode})" if mixed else run.policy for _, run in loaded]
    runs: dict[str, RunData] = {}
    for (path, run), label in zip(loaded, bases, strict=True):
        if bases.count(label) > 1:  # every run of a repeated policy is named by its directory
            label = f"{run.policy} ({run.mode}, {_shown(path.parent)})"
        n = 2
        base = label
        while label in runs:
            label, n = f"{base} #{n}", n + 1
        runs[label] = run
    return runs


def _shown(path: Path) -> str:
    """``path`` as the user would name it: relative to here unless that climbs out."""
    rel = os.path.relpath(path)
    return str(path.resolve()) if rel.startswith("..") else rel


def same_workload(runs: Sequence[RunData]) -> bool:
    """Whether the runs are of one workload, so that comparing them (one L* per job, one
    window) means something: every job of each run has the same algorithm and arrival in the
    run with the most jobs (a run cut short lacks its later jobs)."""
    jobs = [{n: (j.algorithm, round(j.arrival, 6)) for n, j in r.jobs.items()} for r in runs]
    if not jobs:
        return True
    full = max(jobs, key=len)
    return all(all(full.get(n) == v for n, v in js.items()) for js in jobs)


def _window(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        lo, hi = (float(x.replace(",", "")) for x in text.split(":"))  # as printed: 1,000,000
    except ValueError:
        raise ConfigError("--window", text, "must be START:END in seconds, e.g. 800:1600") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo >= 0):
        raise ConfigError("--window", text, "START and END must be finite seconds, START >= 0")
    if not hi > lo:
        raise ConfigError("--window", text, "END must be greater than START")
    return lo, hi


def window_line(window: tuple[float, float] | None, chosen: bool = False) -> str:
    """The line saying over which window the average normalized loss was taken."""
    if window is None:
        return "average normalized loss over each run's own window (first arrival to last end)"
    how = "the window given" if chosen else "the common window (first arrival until the first run ends)"
    return f"average normalized loss over {how}: {seconds(window[0])}-{seconds(window[1])} s"


def _window_notes(runs: dict[str, RunData], window: tuple[float, float]) -> list[str]:
    """Notes on a ``--window`` that reaches past a run's end: the average covers less."""
    notes = []
    for label, run in runs.items():
        seen = observed(run)
        if not seen.jobs:
            continue
        first, last = run_span(seen)
        if window[0] >= last:
            notes.append(f"note: run {label} ended at {seconds(last)} s, before the window starts: no job "
                         "is active in it")
        elif window[1] > last:
            notes.append(f"note: run {label} ended at {seconds(last)} s, inside the window: its average "
                         f"covers {seconds(max(window[0], first))}-{seconds(last)} s only")
    return notes


def _unfinished_notes(runs: Mapping[str, RunData]) -> list[str]:
    """A note on each run that ended with jobs still running or waiting (stopped, or cut
    short): its metrics count them until it stopped."""
    notes = []
    for label, run in runs.items():
        left = sum(job.status in ("running", "waiting") for job in run.jobs.values())
        if left:
            how = " (slaq run --resume RUN_DIR finishes them)" if run.mode == "run" else ""
            notes.append(f"note: run {label} stopped with {left} of its {count(len(run.jobs), 'job')} "
                         f"left unfinished{how}; its metrics count them until it stopped")
    return notes


def plots_dir(run_dirs: Sequence[str | Path]) -> Path:
    """Where ``slaq report`` writes its PNGs without ``--out``: the one RUN_DIR given (the
    directory of a metrics.h5 given as a file); for several, the directory they all sit in
    (``runs/paper`` for ``runs/paper/*``), else the first one."""
    dirs = [Path(p).resolve() if Path(p).is_dir() else Path(p).resolve().parent for p in run_dirs]
    parents = {d.parent for d in dirs}
    if len(set(dirs)) > 1 and len(parents) == 1:
        return parents.pop()
    return dirs[0]


def cmd_report(args: argparse.Namespace) -> int:
    """Print the table and write the PNG figures."""
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout is the JSON alone
    say = printer(out)  # `| head` still gets the PNGs written
    if len(args.run_dirs) == 1 and (Path(args.run_dirs[0]) / DRAWS_FILE).is_file():
        return _report_draws(args, Path(args.run_dirs[0]) / DRAWS_FILE, say)
    runs = load_runs(args.run_dirs)
    chosen = _window(args.window)
    if args.out is not None:
        check_plots_dir(Path(args.out), args.out)
    alike = same_workload(list(runs.values()))
    if alike:
        l_star = common_l_star(runs.values())
        rows, window = summarize_runs(runs, l_star, chosen)
        if len({run.mode for run in runs.values()}) > 1:
            say("note: real and simulated runs share each job's L* (its lowest loss in any run "
                "given), but a simulated job follows a recorded or analytic curve, not this data: "
                "its losses, and the loss figures, need not match the real run's; "
                "`slaq sim-check RUN_DIR` compares their allocations")
        say(window_line(window, bool(args.window)))
    else:  # nothing in common to compare: each run on its own L* and window
        rows = {label: summarize_runs({label: run}, None, chosen)[0][label] for label, run in runs.items()}
        say("note: these runs are not of one workload (their jobs differ): each is measured on "
              "its own L* and window, and they are not compared")
        say(window_line(chosen, bool(args.window)))
    for note in _unfinished_notes(runs) + (_window_notes(runs, chosen) if chosen is not None else []):
        say(note)
    say(format_table(rows, compare=alike))
    for line in node_span_lines(runs):
        say(line)
    if not args.no_plots and alike:
        _plots(runs, l_star, Path(args.out) if args.out is not None else plots_dir(args.run_dirs), say)
    elif not args.no_plots:
        say("plots skipped: runs of different workloads do not share figures; report each "
              "workload's runs on their own")
    if args.json:
        print(json.dumps({"runs": {k: {m: json_value(m, v) for m, v in r.items()}
                                   for k, r in rows.items()}}), flush=True)
    return 0


def _report_draws(args: argparse.Namespace, path: Path, say: Callable[[str], None]) -> int:
    """``slaq report DIR`` of ``slaq simulate --draws K --out DIR``: the summary over the draws,
    and ``draws.png`` (every policy's per-draw change against the baseline)."""
    from slaq_mpi.report.draws import PayloadDraws, format_draws

    try:
        payload = json.loads(path.read_text())
        text = format_draws(PayloadDraws(payload))
    except (ValueError, KeyError, TypeError, IndexError):
        raise ConfigError("RUN_DIR", str(path.parent), f"its {path.name} is not the output of "
                          "`slaq simulate --draws K --out DIR`") from None
    say(text)
    if not args.no_plots:
        try:
            from slaq_mpi.report.draws_plot import write_draws_plot
        except ImportError:
            say(f"plots skipped: matplotlib is not installed ({pip_install('plot')})")
        else:
            say(f"wrote {write_draws_plot(payload, Path(args.out) if args.out else path.parent)}")
    if args.json:
        print(json.dumps(payload), flush=True)
    return 0


PLOT_FILES = ("avg_normalized_loss.png", "time_to_reduction.png", "core_share.png", "fairness.png")


def check_plots_dir(out: Path, given: str | None = None) -> None:
    """Refuse a ``--out`` that cannot hold the PNGs (before anything is computed)."""
    shown = str(out) if given is None else given
    if not shown.strip():
        raise ConfigError("--out", shown, "must name a directory (leave --out out to write the PNGs "
                          "beside the runs)")
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", shown, "exists and is not a directory; give a directory for the PNGs")
    taken = [name for name in PLOT_FILES if (out / name).exists() and not (out / name).is_file()]
    if taken:
        raise ConfigError("--out", shown, f"holds {taken[0]}, which is not a file; the report writes "
                          f"{', '.join(PLOT_FILES)} there")
    check_writable(out, "--out", shown, probe=True)


def _plots(runs: Mapping[str, RunData], l_star: Mapping[str, float], out: Path,
           say: Callable[[str], None]) -> None:
    try:
        from slaq_mpi.report.plots import write_plots
    except ImportError:
        say(f"plots skipped: matplotlib is not installed ({pip_install('plot')})")
        return
    for path in write_plots(runs, l_star, out):
        say(f"wrote {path}")


def add_cli(subparsers: Any) -> None:
    """Add ``report`` to the ``slaq`` command line."""
    p = subparsers.add_parser("report", help="metrics table and plots of real or simulated runs")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="a run directory holding metrics.h5, or one whose subdirectories do "
                        "(slaq simulate --out DIR), or the DIR of slaq simulate --draws K --out "
                        "DIR (its per-draw changes against the baseline: draws.png)")
    p.add_argument("--out", metavar="DIR",
                   help="where to write the PNGs (default: the RUN_DIR; for several, the "
                        "directory they all sit in, else the first)")
    p.add_argument("--no-plots", action="store_true", help="print the table only")
    p.add_argument("--json", action="store_true",
                   help="print the metrics as one JSON line on stdout (the table and notes go to stderr)")
    p.add_argument("--window", metavar="START:END",
                   help="average the normalized loss over this time window "
                        "(default: the common window of the runs; the paper used 800 s)")
    p.set_defaults(func=cmd_report)
