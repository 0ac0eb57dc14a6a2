"""``slaq add``, ``slaq cancel`` and ``slaq drain``: requests to a running run, checked here (on
the machine the command runs on, against the run's own config) before anything is written,
then handed to rank 0 through the run's spool (:mod:`slaq_mpi.storage.spool`).

Bad input is one line and exit status 2, and leaves the run untouched."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slaq_mpi.errors import EXIT_BAD_INPUT, ConfigError

__all__ = ["add_cli"]

ENDED = ("done", "failed", "cancelled")


def _run_dir(text: str) -> Path:
    """The run directory ``text`` names, if it is one that can still take requests.

    Raises:
        ConfigError: not a run directory, a finished run, or a run without a spool.
    """
    from slaq_mpi.storage.spool import spool_dir

    run_dir = Path(text).absolute()
    state_file = run_dir / "state.json"
    if not state_file.is_file() or not (run_dir / "config.yaml").is_file():
        raise ConfigError("RUN_DIR", text, "must be the run directory of a slaq run (with "
                          "state.json and config.yaml)")
    state = json.loads(state_file.read_text())
    if state.get("finished"):
        raise ConfigError("RUN_DIR", text, "the run has finished; start a new one with slaq run")
    if not spool_dir(run_dir).is_dir():
        raise ConfigError("RUN_DIR", text, "the run has no spool/ directory (it was started by an "
                          "older slaq-mpi, or has not started yet)")
    if not os.access(spool_dir(run_dir), os.W_OK | os.X_OK):
        raise ConfigError("RUN_DIR", text, "only the run's owner may send it requests")
    return run_dir


@contextlib.contextmanager
def _in_start_dir(run_dir: Path) -> Iterator[None]:
    """Work in the directory the run started in, where its config's relative paths point."""
    from slaq_mpi.storage.metrics import text_attribute

    start = text_attribute(run_dir / "metrics.h5", "workdir")
    here = Path.cwd()
    if start and Path(start).is_dir():
        os.chdir(start)
    try:
        yield
    finally:
        os.chdir(here)


def _absolute_paths(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` with their data files and solver files made absolute (relative to here),
    since rank 0 reads them from the directory the run started in."""
    out = []
    for entry in entries:
        entry = dict(entry)
        algorithm = entry.get("algorithm")
        if isinstance(algorithm, str) and ".py:" in algorithm:
            file, cls = algorithm.rsplit(":", 1)
            entry["algorithm"] = f"{Path(file).expanduser().absolute()}:{cls}"
        data = entry.get("dataset")
        if isinstance(data, dict) and isinstance(data.get("path"), str):
            entry["dataset"] = {**data, "path": str(Path(data["path"]).expanduser().absolute())}
        out.append(entry)
    return out


def _pending_adds(run_dir: Path) -> list[dict[str, Any]]:
    """The job entries of ``add`` requests rank 0 has not taken yet."""
    from slaq_mpi.storage import spool

    found: list[dict[str, Any]] = []
    for path in sorted(spool.spool_dir(run_dir).glob("*.request.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            raw = json.loads(path.read_text())
            if raw["kind"] == "add":
                found.extend(raw["body"])
    return found


def _job_states(run_dir: Path) -> dict[str, str]:
    """Every job of the run and its status, as rank 0 last saved them."""
    from slaq_mpi.storage.metrics import read_metrics

    try:
        run = read_metrics(run_dir)
    except Exception as exc:  # a run that has not saved its record yet
        raise ConfigError("RUN_DIR", str(run_dir), f"its metrics.h5 cannot be read ({exc})") from None
    return {name: job.status for name, job in run.jobs.items()}


def cmd_add(args: argparse.Namespace) -> int:
    """``slaq add RUN_DIR JOBS.yaml [--wait]``."""
    from slaq_mpi.config.added import new_jobs, read_entries
    from slaq_mpi.config.experiment import check_memory, load
    from slaq_mpi.storage import spool

    run_dir = _run_dir(args.run_dir)
    if json.loads((run_dir / "state.json").read_text()).get("draining"):
        raise ConfigError("RUN_DIR", args.run_dir, "the run is draining: it accepts no more jobs")
    try:
        text = Path(args.jobs).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("JOBS", args.jobs, f"must be a readable YAML file ({exc})") from None
    entries = _absolute_paths(read_entries(text, args.jobs))
    with _in_start_dir(run_dir):
        spec = load(run_dir / "config.yaml", check_files=False)
        known = new_jobs(spec, run_dir, _pending_adds(run_dir), check_files=False)
        checked = new_jobs(known, run_dir, entries)
        check_memory(checked)
    name = spool.submit(run_dir, "add", entries)
    names = [j.name for j in checked.jobs[len(known.jobs):]]
    print(f"slaq: handed {len(names)} job(s) to the run: {', '.join(names)} (request {name})")
    if not args.wait:
        return 0
    return _wait_for(run_dir, name, names, args.timeout)


def _wait_for(run_dir: Path, name: str, jobs: list[str], timeout: float) -> int:
    """Wait until rank 0 has answered request ``name`` and, if it admitted ``jobs``, until
    each has its first cores; say so."""
    from slaq_mpi.storage import spool

    end = time.monotonic() + timeout
    answer = None
    while answer is None and time.monotonic() < end:
        answer = spool.read_answer(run_dir, name)
        time.sleep(0.1)
    if answer is None:
        print(f"slaq: rank 0 has not answered within {timeout:g} s (is the run running? the "
              "request stays in its spool and is taken when it runs)")
        return 1
    if not answer["accepted"]:
        print(f"slaq: the run refused the jobs: {answer['reason']}")
        return EXIT_BAD_INPUT
    print(f"slaq: admitted {', '.join(answer.get('jobs', jobs))}")
    waiting = set(jobs)
    while waiting and time.monotonic() < end:
        for job, cores, at in _first_cores(run_dir, waiting):
            print(f"slaq: job {job}: first assignment {cores} core(s) at t={at:.1f}s")
            waiting.discard(job)
        time.sleep(0.2)
    return 0 if not waiting else 1


def _first_cores(run_dir: Path, jobs: set[str]) -> list[tuple[str, int, float]]:
    """``(job, cores, time)`` of the first iteration of each of ``jobs`` that has one in the
    run's record."""
    from slaq_mpi.storage.metrics import read_metrics

    try:
        run = read_metrics(run_dir)
    except Exception:  # being rewritten
        return []
    found = []
    for job in jobs & run.jobs.keys():
        trace = run.jobs[job]
        if len(trace.time):
            found.append((job, int(trace.cores[0]), float(trace.time[0] - trace.iter_seconds[0])))
    return found


def cmd_cancel(args: argparse.Namespace) -> int:
    """``slaq cancel RUN_DIR JOB...``."""
    from slaq_mpi.storage import spool

    run_dir = _run_dir(args.run_dir)
    states = _job_states(run_dir)
    pending = {str(e.get("name")) for e in _pending_adds(run_dir)}
    for job in args.job:
        if job not in states and job not in pending:
            raise ConfigError("JOB", job, f"the run has no such job; its jobs: {', '.join(states)}")
        if states.get(job) in ENDED:
            raise ConfigError("JOB", job, f"the job has already ended ({states[job]})")
    name = spool.submit(run_dir, "cancel", list(args.job))
    return _answered(run_dir, name, f"cancel {', '.join(args.job)}", args.timeout)


def cmd_drain(args: argparse.Namespace) -> int:
    """``slaq drain RUN_DIR``."""
    from slaq_mpi.storage import spool

    run_dir = _run_dir(args.run_dir)
    name = spool.submit(run_dir, "drain", None)
    return _answered(run_dir, name, "drain", args.timeout)


def _answered(run_dir: Path, name: str, what: str, timeout: float) -> int:
    from slaq_mpi.storage import spool

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        answer = spool.read_answer(run_dir, name)
        if answer is not None:
            if answer["accepted"]:
                print(f"slaq: {what}: done")
                return 0
            print(f"slaq: the run refused to {what}: {answer['reason']}")
            return EXIT_BAD_INPUT
        time.sleep(0.1)
    print(f"slaq: {what}: handed to the run; rank 0 has not answered within {timeout:g} s (the "
          "request stays in its spool and is taken when the run runs)")
    return 0


def add_cli(subparsers: Any) -> None:
    """Add ``slaq add``, ``slaq cancel`` and ``slaq drain`` to the ``slaq`` command line."""
    p = subparsers.add_parser("add", help="add jobs to a running run (docs/control.md)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (its output_dir)")
    p.add_argument("jobs", metavar="JOBS.yaml", help="job entries, the schema of `jobs:`; "
                   "`arrival` is seconds after admission (default 0)")
    p.add_argument("--wait", action="store_true",
                   help="wait until rank 0 admits the jobs and print their first assignment")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds --wait waits (default 300)")
    p.set_defaults(func=cmd_add)
    p = subparsers.add_parser("cancel", help="cancel jobs of a running run (docs/control.md)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    p.add_argument("job", metavar="JOB", nargs="+", help="job names")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for rank 0's answer")
    p.set_defaults(func=cmd_cancel)
    p = subparsers.add_parser("drain", help="let a run's jobs finish, accept no more, then end it")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for rank 0's answer")
    p.set_defaults(func=cmd_drain)

