"""Rank 0: admits jobs, collects reports, asks the policy, places ranks, sends plans.

Rank 0 never trains. It owns all scheduling state and rewrites ``metrics.h5`` and
``state.json`` after every epoch, so a stopped or crashed run can be resumed.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from slaq_mpi._text import count
from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.data.generators import materialize, will_generate
from slaq_mpi.errors import (
    EXIT_ABORTED,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_STOPPED,
    WorkerError,
    disk_full_hint,
)
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.snapshot import checked_allocation
from slaq_mpi.runtime import comm, history
from slaq_mpi.runtime import signals as _early_signals
from slaq_mpi.runtime.backoff import Backoff
from slaq_mpi.runtime.epoch_reports import EpochReports
from slaq_mpi.runtime.history import STATE_FILE, new_record, resume_record
from slaq_mpi.runtime.messages import Plan, Report
from slaq_mpi.runtime.placement import place
from slaq_mpi.runtime.timing import arrival_wait, epoch_length
from slaq_mpi.storage import checkpoint
from slaq_mpi.storage.durable import replacing
from slaq_mpi.storage.metrics import JobRecord, RunRecord
from slaq_mpi.storage.rundir import STOP_FILE, remove_stop

__all__ = ["STATE_FILE", "Coordinator", "new_record", "resume_record", "run_coordinator"]

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
_CLOCK = Backoff(first=0.05, longest=0.05)  # waiting for the experiment's clock: a stop is seen within 50 ms
_received: list[int] = []  # stop signals received by rank 0, set by the handler only


def _on_signal(signum: int, _frame: Any) -> None:
    _received.append(signum)


def _say(msg: str) -> None:
    print(msg, flush=True)


class Coordinator:
    """The scheduling loop of rank 0."""

    def __init__(self, spec: ExperimentSpec, run_dir: Path, record: RunRecord,
                 epoch: int = 0, elapsed: float = 0.0) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.record = record
        self.epoch = epoch
        self.workers = list(range(1, comm.world_size()))
        self.link = comm.CoordinatorLink({comm.Tag.ERROR: _raise_worker_error,
                                          comm.Tag.REPORT: self._on_report})
        self._reports: EpochReports | None = None  # the running epoch's
        self.policy = get_policy(spec.policy, **spec.policy_params)
        self._specs = {j.name: j for j in spec.jobs}
        self.data: dict[str, str] = {}
        self.ranks: dict[str, tuple[int, ...]] = {}
        self.stop_requested = False
        self._prev_deadline: float | None = None
        self._prev_stop: float | None = None
        self._arrival_due: float | None = None  # the arrival the running epoch was cut short for
        self._warned_slow: set[str] = set()
        self._elapsed = elapsed
        self._t0 = time.monotonic() - elapsed
        self._observed = elapsed  # experiment seconds up to which every job's history is known
        self._pruned: dict[str, int] = {}  # job -> the iterations its checkpoints were pruned to

    # --- time and signals -------------------------------------------------------------

    def now(self) -> float:
        """Seconds of experiment time (continues across resumes)."""
        return time.monotonic() - self._t0

    def _wall_to_now(self, wall: float) -> float:
        return self.now() - (time.time() - wall)

    def _stop_asked(self) -> bool:
        """Whether a stop was asked for (a stop signal, or the run's STOP file)."""
        if self.stop_requested:
            return True
        stop = self.run_dir / STOP_FILE
        if _received:
            why = f"received {signal.Signals(_received[0]).name}"
        elif stop.exists():
            why = f"found {stop}"
        else:
            return False
        _say(f"{why}: stopping after this epoch (every job checkpoints where it is)")
        self.stop_requested = True
        return True

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> int:
        """Run the experiment to the end (or to a requested stop); returns the exit status."""
        self._prepare_data()
        self._t0 = time.monotonic() - self._elapsed  # the experiment's clock starts with its data
        self._save(finished=False)  # from now on the directory is resumable
        _say(f"slaq: {count(len(self.spec.jobs), 'job')}, {count(len(self.workers), 'worker rank')}, "
             f"policy {self.spec.policy}, epoch {self.spec.epoch_seconds:g} s, run dir {self.run_dir}")
        status = None
        while status is None:
            status = EXIT_STOPPED if self._stop_asked() else self._one_epoch()
        self.link.broadcast_plan(Plan(epoch=self.epoch, epoch_seconds=0.0, stop=True))
        self.link.close()
        self._save(finished=status != EXIT_STOPPED)
        if status == EXIT_STOPPED:
            remove_stop(self.run_dir)
            again = shlex.quote(str(self.run_dir))
            _say(f"stopped at t={self.now():.1f}s; continue with: slaq run --resume {again}")
        else:
            self._summary()
        return status

    def _prepare_data(self) -> None:
        for job in self.spec.jobs:
            if will_generate(job.dataset, self.run_dir / "data", job.seed):
                p = job.dataset.params
                _say(f"generating dataset for {job.name}: {job.dataset.generator} "
                     f"{p['rows']} x {p['features']}")
            self.data[job.name] = str(materialize(job.dataset, self.run_dir / "data", job.seed))

    def _active(self, now: float) -> list[JobRecord]:
        return [j for j in self.record.jobs.values()
                if j.status in ("waiting", "running") and j.arrival <= now]

    def _wait_until(self, t: float) -> None:
        """Sleep until the experiment's time ``t``, or until a stop is asked."""
        _CLOCK.wait(self._stop_asked, deadline=self._t0 + t)

    def _one_epoch(self) -> int | None:
        """Decide, run and record one epoch (or wait for the next arrival); the exit status
        once every job has ended, else None."""
        now = self._now_for_decision()
        if now is None:
            return None
        active = self._active(now)
        pending = [j for j in self.record.jobs.values() if j.status == "waiting" and j.arrival > now]
        if not active:
            if not pending:
                failed = any(j.status == "failed" for j in self.record.jobs.values())
                return EXIT_FAILED if failed else EXIT_DONE
            self._prev_deadline = self._prev_stop = None
            self._wait_until(min(j.arrival for j in pending))
            self._observed = self.now()
            return None
        next_arrival = min((j.arrival for j in pending), default=None)
        length = epoch_length(now, next_arrival, self.spec.epoch_seconds)
        if next_arrival is not None and length == next_arrival - now:  # cut short for it
            self._arrival_due = next_arrival
        alloc, decision_ms = self._decide(now, active, length)
        ranks, moved = place(self.ranks, alloc, self.workers)
        started = self._send_plan(ranks, moved, length)
        if self.epoch > 0:
            self._save(finished=False)  # the previous epoch's history, while the jobs train
        self.ranks = ranks
        self.record.add_epoch(now, {j: len(r) for j, r in ranks.items()}, decision_ms, bool(moved))
        for name in ranks:
            job = self.record.jobs[name]
            if job.status == "waiting":
                job.status = "running"
        reports = self._collect(set(ranks), started, length)
        self._absorb(reports.reports, reports.cut_wall)
        self._observed = self.now()  # the epoch ended with its last report (early if cut)
        self._progress(now, alloc)
        self.epoch += 1
        return None

    def _now_for_decision(self) -> float | None:
        """The experiment time of the next decision; None if a stop came while waiting.

        An epoch cut short for an arrival ends a few ms before it (:func:`arrival_wait`): the
        decision then waits for the new job, as the simulator's does (its epoch ends at the
        arrival)."""
        now = self.now()
        due, self._arrival_due = self._arrival_due, None
        if due is not None and arrival_wait(now, due, self.spec.epoch_seconds) > 0:
            self._wait_until(due)
            if self.stop_requested:
                return None
            now = max(self.now(), due)
        return now

    def _decide(self, now: float, active: list[JobRecord], length: float) -> tuple[dict[str, int], float]:
        """The policy's allocation for the epoch of ``length`` seconds starting at ``now``,
        checked, and the milliseconds it took to decide."""
        snap = history.snapshot(active, self._specs, self.ranks, len(self.workers), now, length)
        t = time.perf_counter()
        alloc = checked_allocation(self.policy.allocate(snap), snap, self.spec.policy)
        return alloc, (time.perf_counter() - t) * 1000.0

    def _send_plan(self, ranks: dict[str, tuple[int, ...]], moved: set[str], length: float) -> float:
        """Send every worker the plan (the jobs that ``moved`` re-split the world); returns
        when the epoch started (``time.monotonic()``)."""
        self.link.broadcast_plan(Plan(
            epoch=self.epoch,
            epoch_seconds=length,
            ranks=ranks,
            moved=frozenset(moved),
            iterations={j: self.record.jobs[j].iterations for j in moved if j in ranks},
            data={j: self.data[j] for j in moved if j in ranks},
        ))
        started = time.monotonic()
        if moved:
            self.link.join_split()
        return started

    def _collect(self, running: set[str], started: float, length: float) -> EpochReports:
        """Every running job's report of this epoch (which began at ``started``, monotonic),
        asking the jobs still running to end it early when :class:`EpochReports` says so."""
        reports = self._reports = EpochReports(running, started, length, self.spec.epoch_seconds,
                                               len(self.workers))
        try:
            while not reports.complete:
                if not self.link.wait(deadline=reports.cut_at):  # the time to cut has come
                    self.link.send_cut([min(self.ranks[j]) for j in reports.missing], self.epoch)
                    reports.cut_sent()
        finally:
            self._reports = None
        return reports

    def _on_report(self, report: Report) -> None:
        """A job leader's report (the link's handler for ``Tag.REPORT``)."""
        if self._reports is None:
            raise RuntimeError(f"a report of job {report.job} came outside an epoch")
        self._reports.add(report)

    def _absorb(self, reports: dict[str, Report], cut_wall: float | None) -> None:
        """Add an epoch's ``reports`` to the record (``cut_wall``: when the epoch was asked to
        end early, if it was), and the pause between the previous epoch and this one."""
        starts, deadlines, stops = [], [], []
        for name, rep in reports.items():
            self._absorb_job(name, rep)
            starts.append(rep.first_start)
            stop = rep.end_times[-1] if rep.end_times else rep.first_start
            # a cut epoch ended when its jobs stopped (the next chunk boundary after the ask)
            deadlines.append(rep.deadline if cut_wall is None
                             else min(rep.deadline, max(cut_wall, stop)))
            stops.append(stop)
        if self._prev_deadline is not None and self._prev_stop is not None and starts:
            self.record.pause_ms[-1] = max(0.0, (max(starts) - self._prev_deadline) * 1000.0)
            self.record.gap_ms[-1] = max(0.0, (max(starts) - self._prev_stop) * 1000.0)
        self._prev_deadline = max(deadlines) if deadlines else None
        self._prev_stop = max(stops) if stops else None

    def _absorb_job(self, name: str, rep: Report) -> None:
        """Add job ``name``'s report of an epoch to its record."""
        job = self.record.jobs[name]
        n = len(rep.losses)
        if math.isnan(job.start):
            job.start = self._wall_to_now(rep.first_start)
        job.loss.extend(rep.losses)
        job.time.extend(self._wall_to_now(t) for t in rep.end_times)
        job.cores.extend([rep.cores] * n)
        job.iter_seconds.extend(rep.iter_seconds)
        if n:
            secs = sorted(rep.iter_seconds)[n // 2]
            job.throughput.append((rep.cores, secs))
            if secs > self.spec.epoch_seconds and name not in self._warned_slow:
                self._warned_slow.add(name)
                _say(f"job {name}: one iteration takes {secs:.2f} s on "
                     f"{count(rep.cores, 'core')}, longer than the "
                     f"{self.spec.epoch_seconds:g} s epoch; every epoch waits for it. "
                     "Raise epoch_seconds or give it more cores.")
            job.attained_core_seconds += rep.cores * sum(rep.iter_seconds)
        if rep.status != "running":
            job.status, job.reason = rep.status, rep.reason
            job.end = self._wall_to_now(rep.end_times[-1]) if rep.end_times else self.now()
            self.ranks.pop(name, None)
            if rep.status == "failed":
                _say(f"job {name} failed: {rep.reason}")

    def _progress(self, now: float, alloc: dict[str, int]) -> None:
        jobs = self.record.jobs.values()
        running = sum(1 for j in jobs if j.status == "running")
        waiting = sum(1 for j in jobs if j.status == "waiting" and j.arrival <= now)
        done = sum(1 for j in jobs if j.status == "done")
        failed = sum(1 for j in jobs if j.status == "failed")
        rel = [j.loss[-1] / j.loss[0] for j in jobs if j.loss and j.loss[0] not in (0.0,)
               and j.status != "failed"]
        cores = " ".join(f"{n}:{c}" for n, c in sorted(alloc.items()))
        mean = f"{sum(rel) / len(rel):.4g}" if rel else "-"
        _say(f"epoch {self.epoch:4d} t={now:7.1f}s running {running} waiting {waiting} "
             f"done {done}/{len(self.record.jobs)}" + (f" failed {failed}" if failed else "")
             + f" | cores this epoch {cores} | mean loss/initial {mean}")

    def _summary(self) -> None:
        for j in self.record.jobs.values():
            last = f"{j.loss[-1]:.6g}" if j.loss else "-"
            _say(f"job {j.name}: {j.status} after {j.iterations} iterations, loss {last}"
                 + (f" ({j.reason})" if j.reason else ""))
        where = os.path.abspath(self.run_dir)  # a Slurm log is read from anywhere
        _say(f"metrics: {os.path.join(where, 'metrics.h5')} (table and plots: slaq report "
             f"{shlex.quote(where)})")

    def _save(self, finished: bool) -> None:
        elapsed = self.now()
        self.record.attrs["stopped"] = self._observed
        # where a resume starts, in the same atomic write as the history it continues
        self.record.attrs["epoch"], self.record.attrs["elapsed"] = self.epoch, elapsed
        self.record.write(self.run_dir / "metrics.h5")
        with replacing(self.run_dir / STATE_FILE, self.run_dir / f".{STATE_FILE}.tmp") as tmp:
            tmp.write_text(json.dumps({"epoch": self.epoch, "elapsed": elapsed, "finished": finished}))
        for job in self.record.jobs.values():  # what is saved now needs no older checkpoint
            if self._pruned.get(job.name, 0) != job.iterations:
                checkpoint.prune(self.run_dir, job.name, job.iterations)
                self._pruned[job.name] = job.iterations


def _raise_worker_error(info: dict[str, str]) -> NoReturn:
    """Re-raise a worker's posted error (:meth:`Worker.fail`) on rank 0, tagged with its rank,
    host and job (the link's handler for ``Tag.ERROR``)."""
    raise WorkerError(f"rank {info['rank']} on {info['host']} (job {info['job']}): "
                      f"{info['error']}\n{info['traceback']}")


def run_coordinator(spec: ExperimentSpec, run_dir: Path, resume: bool) -> int:
    """Rank 0's entry point. Any error ends every rank (MPI abort) after saving the record,
    so a run never hangs with workers waiting for a plan that will not come."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)
    _received.extend(_early_signals.received)  # a stop asked for while the ranks were starting
    coord = None
    try:
        if resume:
            record, epoch, elapsed = resume_record(run_dir)
            _say(f"resuming {run_dir} at epoch {epoch}, t={elapsed:.1f}s")
            coord = Coordinator(spec, run_dir, record, epoch, elapsed)
        else:
            coord = Coordinator(spec, run_dir, new_record(spec, comm.world_size() - 1))
        return coord.run()
    except Exception as exc:
        if isinstance(exc, WorkerError):
            print(f"slaq: error on a worker: {exc}", file=sys.stderr, flush=True)
        else:
            print(f"slaq: error on rank 0 ({comm.hostname()}): {exc.__class__.__name__}: {exc}\n"
                  f"{traceback.format_exc()}", file=sys.stderr, flush=True)
        if coord is not None:
            try:
                coord._save(finished=False)
            except Exception as save_exc:  # the abort matters more than the record
                print(f"slaq: could not save the record: {save_exc}", file=sys.stderr, flush=True)
        hint = disk_full_hint(exc, run_dir)
        if hint:
            print(hint, file=sys.stderr, flush=True)
        comm.abort(EXIT_ABORTED)
        return EXIT_ABORTED
