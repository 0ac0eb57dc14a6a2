"""What every rank of an MPI launch of ``slaq run`` does first: read the config (all ranks
go on only if all could), let rank 0 take the run directory, then coordinate (rank 0) or
work (every other rank)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections import Counter
from pathlib import Path

from slaq_mpi._text import count
from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.errors import EXIT_ABORTED, EXIT_BAD_INPUT, NO_VALUE, ConfigError
from slaq_mpi.runtime import comm
from slaq_mpi.runtime.fit import memory_problems, unfit_jobs
from slaq_mpi.runtime.launch import check_start, read_spec
from slaq_mpi.runtime.resume import finished_status, say_finished
from slaq_mpi.storage import rundir
from slaq_mpi.storage.durable import replacing

HOSTS_FILE = "hosts.json"  # the host of every rank of the latest launch, by rank
_GO_ON = -1  # rank 0's word to the others at the start: no exit status yet, the run goes on


def run_rank(args: argparse.Namespace, started: float) -> int:
    """This rank's part of ``slaq run`` (``started``: when the run started, seconds since the
    epoch); returns its exit status."""
    read = _read_on_every_rank(args)
    if read is None:
        return EXIT_BAD_INPUT
    spec, run_dir, resume = read
    size, rank = comm.world_size(), comm.world_rank()
    # a resumed run goes on with fewer ranks than it started with (after a node was lost)
    if size < 2 or (size < spec.ranks and not resume):
        if rank == 0:
            raise ConfigError("ranks", spec.ranks, f"the MPI launch gave only {count(size, 'rank')}; "
                              f"ask the launcher for at least {max(2, spec.ranks)}")
        return EXIT_BAD_INPUT
    # rank 0 takes the run directory (lock, fresh start); if it cannot, or the run to resume
    # has finished, every rank ends with rank 0's status
    verdict, failure = _take_run_dir(spec, run_dir, resume, started) if rank == 0 else (_GO_ON, None)
    verdict = comm.root_value(verdict)
    if verdict != _GO_ON:
        if failure is not None:
            raise failure
        return verdict
    busy, cpus = comm.detect_oversubscription()
    hosts = comm.world_hosts()
    # a resumed run's jobs that some rank's node cannot hold now (fit.py)
    problems = comm.gather_to_root((comm.hostname(), memory_problems(spec))) if resume else None
    if rank == 0:
        _say_launch(spec, busy, cpus, size)
        _say_hosts(run_dir, hosts)
        from slaq_mpi.runtime.coordinator import run_coordinator

        return run_coordinator(spec, run_dir, resume, hosts, unfit_jobs(problems or ()))
    try:
        from slaq_mpi.runtime.worker import Worker

        worker = Worker(spec, run_dir, sleep_waits=busy > cpus)
    except Exception:  # rank 0 would wait for this rank forever: end the run now
        print(f"slaq: error on rank {rank} ({comm.hostname()}) at its start:\n"
              f"{traceback.format_exc()}", file=sys.stderr, flush=True)
        comm.abort(EXIT_ABORTED)
        return EXIT_ABORTED
    try:
        worker.run()
    except Exception as exc:
        worker.fail(exc)
    return 0


def _read_on_every_rank(args: argparse.Namespace) -> tuple[ExperimentSpec, Path, bool] | None:
    """The experiment (:func:`read_spec`), read by every rank; all go on only if all could (a
    file that changed during the start must not leave some ranks waiting for a coordinator
    that has quit). Rank 0 raises the first rank's failure; the others get None."""
    failure: ConfigError | None = None
    read = None
    try:
        read = read_spec(args)
    except ConfigError as exc:
        failure = exc
    failed = comm.first_failure(None if failure is None else f"{comm.hostname()}\n{failure}")
    if failed is None:
        return read
    if comm.world_rank() == 0:
        if failure is not None:
            raise failure
        who, (host, why) = failed[0], failed[1].split("\n", 1)
        raise ConfigError(f"rank {who} on {host}", NO_VALUE, f"{why}; rank 0 on "
                          f"{comm.hostname()} accepted it: the nodes differ (files, "
                          "software or memory)")
    return None


def _take_run_dir(spec: ExperimentSpec, run_dir: Path, resume: bool,
                  started: float) -> tuple[int, ConfigError | None]:
    """Rank 0: lock the run directory and prepare it (a fresh run's, or check a resumed
    one's). Returns the status every rank ends with (``_GO_ON``: the run goes on) and the
    error to raise once they know it."""
    try:
        rundir.hold(run_dir)
        done = finished_status(run_dir) if resume else None
        if done is not None:
            say_finished(run_dir)
            return done, None
        if rundir.clear_stale_stop(run_dir, started):
            print(f"slaq: removed a STOP file in {run_dir} left from before this start", flush=True)
        check_start(spec, run_dir, resume)
        if not resume:
            _fresh_run_dir(spec)
    except OSError as exc:
        return EXIT_BAD_INPUT, ConfigError("output_dir", str(run_dir),
                                           f"cannot be used: {exc.strerror or exc}")
    except ConfigError as exc:
        return EXIT_BAD_INPUT, exc
    return _GO_ON, None


def _fresh_run_dir(spec: ExperimentSpec) -> None:
    run_dir = spec.output_dir
    aside = rundir.move_aside(run_dir)
    if aside is not None:
        print(f"slaq: moved the previous run in {run_dir} to {aside}", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(spec.source)


def _say_hosts(run_dir: Path, hosts: list[str]) -> None:
    """Rank 0, on several nodes: say which nodes the ranks run on, and keep the rank-to-host
    map in RUN_DIR/hosts.json (read by the Slurm supervisor to find the ranks of a lost node)."""
    per_host = Counter(hosts)
    if len(per_host) == 1:  # one node: nothing to say or keep
        (run_dir / HOSTS_FILE).unlink(missing_ok=True)
        return
    print("slaq: ranks on " + ", ".join(f"{h} ({n})" for h, n in sorted(per_host.items())),
          flush=True)
    with replacing(run_dir / HOSTS_FILE, run_dir / f".{HOSTS_FILE}.tmp") as tmp:
        tmp.write_text(json.dumps({"hosts": hosts}))


def _say_launch(spec: ExperimentSpec, busy: int, cpus: int, size: int) -> None:
    """Rank 0: what the launch gave that the config did not ask for."""
    if busy > cpus:
        print(f"slaq: {busy} worker ranks share {cpus} CPUs on {comm.hostname()}: jobs' "
              "collectives wait sleeping instead of spinning (speedups are below a cluster's)",
              flush=True)
    if size > spec.ranks:
        print(f"slaq: the launch gave {size} ranks (config asks {spec.ranks}); using all {size}",
              flush=True)
