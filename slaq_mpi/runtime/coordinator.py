"""Rank 0: admits jobs, takes the jobs' reports, asks the policy, places ranks, moves jobs.

Rank 0 never trains. It decides on its own clock while the jobs train: every
``epoch_seconds``, and at once when a job arrives or ends. The policy runs in a thread of its
own on a snapshot of the record, so that rank 0 goes on handling the reports job leaders send
on their own clocks while it decides, and carries out the latest placement
(:class:`~slaq_mpi.runtime.transitions.Transitions`): it asks the leaders of the jobs whose
ranks change to release them, and assigns free ranks to the jobs that start or restart. It
owns all scheduling state and rewrites ``metrics.h5`` and ``state.json`` at every regular
decision, so a stopped or crashed run can be resumed.
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
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

from slaq_mpi._text import count
from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.data.generators import materialize, will_generate
from slaq_mpi.errors import (
    EXIT_ABORTED,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_RANKS_LOST,
    EXIT_STOPPED,
    RanksLost,
    WorkerError,
    disk_full_hint,
)
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.snapshot import DEFAULT_MOVE_SECONDS, ClusterSnapshot, checked_allocation
from slaq_mpi.runtime import comm, history
from slaq_mpi.runtime import signals as _early_signals
from slaq_mpi.runtime.admission import Admission
from slaq_mpi.runtime.fit import fail_unfit
from slaq_mpi.runtime.history import STATE_FILE, new_record, resume_record
from slaq_mpi.runtime.job_reports import absorb
from slaq_mpi.runtime.liveness import Liveness
from slaq_mpi.runtime.messages import Assign, Report
from slaq_mpi.runtime.moves_seen import MovesSeen
from slaq_mpi.runtime.placement import assignments, place
from slaq_mpi.runtime.record_saver import RecordSaver
from slaq_mpi.runtime.timing import next_decision
from slaq_mpi.runtime.transitions import Transitions
from slaq_mpi.storage import journal
from slaq_mpi.storage.journal import Journal
from slaq_mpi.storage.metrics import JobRecord, RunRecord
from slaq_mpi.storage.rundir import STOP_FILE, remove_stop
from slaq_mpi.storage.status_file import RunStatus, job_status, run_utilization, write_status

__all__ = ["STATE_FILE", "Coordinator", "new_record", "resume_record", "run_coordinator"]

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
_STOP_CHECK = 0.05  # seconds: a stop signal or STOP file is seen within this long
_DECIDING_CHECK = 0.002  # seconds: how soon the end of a decision under way is seen
SAVE_SHARE = 10  # the record is saved at most once per this many times a save's duration
_received: list[int] = []  # stop signals received by rank 0, set by the handler only


def _on_signal(signum: int, _frame: Any) -> None:
    _received.append(signum)


def _say(msg: str) -> None:
    print(msg, flush=True)


class Coordinator:
    """The scheduling loop of rank 0."""

    def __init__(self, spec: ExperimentSpec, run_dir: Path, record: RunRecord,
                 epoch: int = 0, elapsed: float = 0.0, draining: bool = False,
                 hosts: Sequence[str] = ()) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.record = record
        self.epoch = epoch  # decisions so far (each one starts an "epoch" of the record)
        self.workers = list(range(1, comm.world_size()))
        # rank -> node, on several nodes (placement packs jobs on nodes; metrics keep the hosts)
        self.hosts = {r: hosts[r] for r in self.workers} if len(set(hosts)) > 1 else None
        self.link = comm.CoordinatorLink({comm.Tag.ERROR: _raise_worker_error,
                                          comm.Tag.REPORT: self._on_report,
                                          comm.Tag.SAVED: self._on_saved})
        self.policy = get_policy(spec.policy, **spec.policy_params)
        self._specs = {j.name: j for j in spec.jobs}
        self.data: dict[str, str] = {}
        self.moves = Transitions()
        self.admission = Admission(spec, record, run_dir, len(self.workers), _say, draining)
        self.seen = MovesSeen(record)
        self.stop_requested = False
        self._event = False  # a job ended: decide at once
        self._changed = True  # the placement or the jobs training changed: carry out again
        self._shown: tuple[float, dict[str, int]] | None = None  # the epoch whose line is due
        self._elapsed = elapsed
        self._t0 = time.monotonic() - elapsed
        self._pruned: dict[str, int] = {}  # job -> the iterations its checkpoints were pruned to
        self._last_decision = math.nan
        self._saved_at = -math.inf  # experiment time of the last save of the record
        self.saver = RecordSaver(run_dir, STATE_FILE)
        # reports taken since the last save (a resume replays them); after every journal file
        # already there, which the first save drops
        self.journal = Journal(run_dir, journal.newest_index(run_dir) + 1)
        self._policy_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slaq-policy")
        self._deciding: tuple[Future[tuple[dict[str, int], float]], float] | None = None
        # on several nodes, a job that stops reporting has lost ranks with a node (liveness.py)
        self.liveness = Liveness(spec.epoch_seconds) if self.hosts is not None else None

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
        # the record saver's thread holds the GIL in each HDF5 call: switch back to the loop
        # within a millisecond (the default is 5 ms)
        sys.setswitchinterval(0.001)
        self._prepare_data()
        self._t0 = time.monotonic() - self._elapsed  # the first save records no data time
        self._save(finished=False)  # from now on the directory is resumable
        # the experiment's clock (the jobs' arrivals) starts once the data are there and the
        # run can be resumed: a large record's first save does not delay the first decision
        self._t0 = time.monotonic() - self._elapsed
        _say(f"slaq: {count(len(self.spec.jobs), 'job')}, {count(len(self.workers), 'worker rank')}, "
             f"policy {self.spec.policy}, epoch {self.spec.epoch_seconds:g} s, run dir {self.run_dir}")
        status, due = None, self.now()
        while status is None:
            if self._stop_asked():
                status = EXIT_STOPPED
                break
            now = self.now()
            if self.admission.poll(now):
                self._take_admitted()
                due = min(due, now)
            if self._deciding is not None and self._deciding[0].done():
                self._decided()
                self._after_decision(now)
            if (now >= due or self._event) and self._deciding is None:
                self._event = False
                status = self._decide(now)
                if self._deciding is None:  # no job to ask the policy about
                    self._after_decision(now)
                due = self._next_decision(self.now())
            if self._changed:
                self._carry_out()
            wait = _DECIDING_CHECK if self._deciding is not None else _STOP_CHECK
            self.link.wait(deadline=self._t0 + min(due, self.now() + wait),
                           idle=self.moves.idle and self._deciding is None)
            self.journal.flush()  # the reports just taken survive this process from now on
            self._check_liveness()
        self._shutdown()
        self._save(finished=status != EXIT_STOPPED)
        self._write_status({EXIT_STOPPED: "stopped", EXIT_FAILED: "failed"}.get(status, "finished"))
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

    def _next_decision(self, now: float) -> float:
        """When to decide next (:func:`~slaq_mpi.runtime.timing.next_decision`; a job's end
        decides at once)."""
        due = [j.arrival for j in self.record.jobs.values() if j.status == "waiting" and j.arrival > now]
        return next_decision(now, min(due, default=None), self.spec.epoch_seconds)

    def _after_decision(self, now: float) -> None:
        """Carry out a decision's placement, then save the record (in the background, at most
        once an epoch and so that its writes take at most a tenth of rank 0's time; the journal
        holds the reports taken since) and rewrite status.json."""
        if self._changed:
            self._carry_out()  # the moves first: the files can wait, the ranks cannot
        every = max(self.spec.epoch_seconds, SAVE_SHARE * self.saver.last_seconds)
        # decisions on the epoch clock come about ``epoch_seconds`` apart, a little less or more
        # with the policy's time
        if now >= self._saved_at + every - self.spec.epoch_seconds / 2:
            self._save(finished=False, background=True)
        self._write_status("running")

    def _decide(self, now: float) -> int | None:
        """Start the policy's decision for the jobs active at ``now`` (:meth:`_decided` makes
        its placement the target); the exit status once every job has ended, else None."""
        self._show_epoch()
        active = self._active(now)
        if not active:
            self.moves.retarget({})  # jobs cancelled since the last decision stop
            self._changed = True
            if self.moves.idle and not any(j.status == "waiting" for j in self.record.jobs.values()):
                if not self.spec.open or self.admission.draining:
                    failed = any(j.status == "failed" for j in self.record.jobs.values())
                    return EXIT_FAILED if failed else EXIT_DONE
            return None  # an open run waits for added jobs; or the next arrival
        snap = history.snapshot(active, self._specs, self.moves.target, len(self.workers), now,
                                self.spec.epoch_seconds, self.seen.cost(DEFAULT_MOVE_SECONDS))
        self._deciding = (self._policy_thread.submit(self._allocate, snap), now)
        return None

    def _allocate(self, snap: ClusterSnapshot) -> tuple[dict[str, int], float]:
        """The policy's allocation for ``snap`` and the milliseconds it took (in the policy's
        thread; it touches nothing but the snapshot and the policy)."""
        t = time.perf_counter()
        alloc = checked_allocation(self.policy.allocate(snap), snap, self.spec.policy)
        return alloc, (time.perf_counter() - t) * 1000.0

    def _decided(self) -> None:
        """Make the finished decision's placement the target. A job that ended while the
        policy decided gets no ranks (its end asks for a decision of its own)."""
        assert self._deciding is not None
        future, now = self._deciding
        self._deciding = None
        alloc, decision_ms = future.result()  # the policy's error is raised here
        alloc = {job: cores for job, cores in alloc.items()
                 if self.record.jobs[job].status in ("waiting", "running")}
        target, moved = place(self.moves.target, alloc, self.workers, self.hosts)
        self.moves.retarget(target)
        if self.hosts is not None:
            self.record.placements += assignments(now, target, moved, self.workers, self.hosts)
        self._changed = True
        cores = {j: len(r) for j, r in target.items()}
        self.record.add_epoch(now, cores, decision_ms, bool(moved & set(self.moves.running)))
        self.seen.decided(len(self.record.epoch_time) - 1, moved & set(self.moves.running))
        self._shown = (now, cores)
        self.epoch += 1
        self._last_decision = now

    def _write_status(self, state: str) -> None:
        """Rewrite RUN_DIR/status.json (``slaq status``): the run's ``state`` and every job now."""
        now = self.now()
        jobs = self.record.jobs.values()
        if state == "running" and self.spec.open and not self._active(now) and self.moves.idle:
            state = "waiting for jobs"
        write_status(self.run_dir, RunStatus(
            name=self.spec.name, policy=self.spec.policy, workers=len(self.workers),
            epoch_seconds=self.spec.epoch_seconds, open=self.spec.open,
            draining=self.admission.draining, state=state, updated=time.time(), now=now,
            last_decision=self._last_decision,
            utilization=run_utilization(jobs, len(self.workers), now),
            jobs=[job_status(j, len(self.moves.running.get(j.name, ())),
                             weight=self._specs[j.name].weight,
                             max_iterations=self._specs[j.name].stop.max_iterations)
                  for j in jobs]))

    def _take_admitted(self) -> None:
        """Take the jobs added and the state changed by ``slaq add / cancel / drain``."""
        self.spec = self.admission.spec
        self._specs = {j.name: j for j in self.spec.jobs}
        self.data.update(self.admission.data)
        self._event = not self.stop_requested

    def _carry_out(self) -> None:
        """Send the releases and assignments the latest placement needs now."""
        self._changed = False
        pace = {job: self.record.jobs[job].iter_seconds[-1] for job in self.moves.running
                if self.record.jobs[job].iter_seconds}
        release, start = self.moves.steps(pace)
        for job in release:
            self.link.release(min(self.moves.running[job]), job)
        for job in start:
            record = self.record.jobs[job]
            if record.status == "waiting":
                record.status = "running"
            ranks = self.moves.running[job]
            order = Assign(job, ranks, record.iterations, self.data[job], self._specs[job],
                           tag=list(self.record.jobs).index(job), source=self.moves.source(job))
            for rank in ranks:
                self.link.assign(rank, order)

    def _on_report(self, report: Report) -> None:
        """A job leader's report (the link's handler for ``Tag.REPORT``)."""
        first = absorb(self.record, report, self._wall_to_now, self.journal)
        if self.liveness is not None:
            self.liveness.heard(report.job, self.now())
        job = self.record.jobs[report.job]
        self.seen.reported(report.job, first)
        self._changed |= report.released or report.status != "running"
        if report.released:
            self.moves.ended(report.job, finished=False)
            self.seen.released(report.job, job.time[-1] if job.time else None,
                               report.job in self.moves.target)
        elif report.status != "running":
            self.moves.ended(report.job, finished=True)
            self._event = not self.stop_requested
            if report.status == "failed":
                _say(f"job {report.job} failed: {report.reason}")

    def _on_saved(self, saved: tuple[str, int]) -> None:
        """A released job's checkpoint is on disk (the link's handler for ``Tag.SAVED``)."""
        self.moves.saved(saved[0])
        self._changed = True

    def _shutdown(self) -> None:
        """Release every job (each checkpoints), then tell every worker to exit."""
        if self._deciding is not None:  # a decision under way when the run stops is dropped
            self._deciding[0].result()
            self._deciding = None
        self._policy_thread.shutdown()
        self.moves.retarget({})
        self._changed = True
        while not self.moves.idle or self.moves.unsaved:
            if self._changed:
                self._carry_out()
            self.link.wait(deadline=time.monotonic() + _STOP_CHECK)
            self._check_liveness()
        for rank in self.workers:
            self.link.assign(rank, Assign(None, releases=self.link.releases.get(rank, 0)))
        self.record.attrs["world_collectives"] = self.link.close()
        self._show_epoch()

    def _check_liveness(self) -> None:
        """Raise :class:`RanksLost` if a job has stopped reporting (on several nodes only)."""
        if self.liveness is not None:
            self.liveness.check(self.now(), self.moves.running, self.record.jobs, self.hosts)

    def _show_epoch(self) -> None:
        """Print the line of the epoch that just ended (:meth:`_progress`)."""
        if self._shown is not None:
            self._progress(*self._shown)
            self._shown = None

    def _progress(self, now: float, alloc: dict[str, int]) -> None:
        """One line for the epoch that began at ``now`` with ``alloc``, with the counts at its end."""
        jobs = self.record.jobs.values()
        running = sum(1 for j in jobs if j.status == "running")
        waiting = sum(1 for j in jobs if j.status == "waiting" and j.arrival <= now)
        done = sum(1 for j in jobs if j.status == "done")
        failed = sum(1 for j in jobs if j.status == "failed")
        rel = [j.loss[-1] / j.loss[0] for j in jobs if j.loss and j.loss[0] not in (0.0,)
               and j.status != "failed"]
        cores = " ".join(f"{n}:{c}" for n, c in sorted(alloc.items()))
        mean = f"{sum(rel) / len(rel):.4g}" if rel else "-"
        _say(f"epoch {self.epoch - 1:4d} t={now:7.1f}s running {running} waiting {waiting} "
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

    def _save(self, finished: bool, background: bool = False) -> None:
        """Save the record and the state a resume starts from (:class:`RecordSaver`): in the
        background during the run, skipped if the previous save is still being written."""
        if background and self.saver.busy:
            return
        elapsed = self._saved_at = self.now()
        self.record.attrs["stopped"] = elapsed
        # where a resume starts, in the same atomic write as the history it continues
        self.record.attrs["epoch"], self.record.attrs["elapsed"] = self.epoch, elapsed
        # the reports taken from now on go to the next journal file, which the record names
        self.record.attrs["journal"] = self.journal.rotate()
        state = json.dumps({"epoch": self.epoch, "elapsed": elapsed, "finished": finished,
                            "draining": self.admission.draining, "open": self.spec.open})
        prune = [(job.name, job.iterations) for job in self.record.jobs.values()
                 if self._pruned.get(job.name, 0) != job.iterations]
        self._pruned.update(prune)
        self.saver.save(self.record.run_data(), state, prune, background)


def _raise_worker_error(info: dict[str, str]) -> NoReturn:
    """Re-raise a worker's posted error (:meth:`Worker.fail`) on rank 0, tagged with its rank,
    host and job (the link's handler for ``Tag.ERROR``)."""
    raise WorkerError(f"rank {info['rank']} on {info['host']} (job {info['job']}): "
                      f"{info['error']}\n{info['traceback']}")


def run_coordinator(spec: ExperimentSpec, run_dir: Path, resume: bool,
                    hosts: Sequence[str] = (), unfit: Mapping[str, str] | None = None) -> int:
    """Rank 0's entry point. Any error ends every rank (MPI abort) after saving the record,
    so a run never hangs with workers waiting for a plan that will not come. ``unfit``: the
    jobs of a resumed run that no longer fit its ranks, with why (they fail at once)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)
    _received.extend(_early_signals.received)  # a stop asked for while the ranks were starting
    coord = None
    try:
        if resume:
            record, epoch, elapsed = resume_record(run_dir)
            draining = bool(json.loads((run_dir / STATE_FILE).read_text()).get("draining", False))
            _say(f"resuming {run_dir} at epoch {epoch}, t={elapsed:.1f}s"
                 + (" (draining: no more jobs are accepted)" if draining else ""))
            fail_unfit(record, unfit or {}, elapsed, _say)
            coord = Coordinator(spec, run_dir, record, epoch, elapsed, draining, hosts)
        else:
            coord = Coordinator(spec, run_dir, new_record(spec, comm.world_size() - 1),
                                hosts=hosts)
        return coord.run()
    except Exception as exc:
        if isinstance(exc, WorkerError):
            print(f"slaq: error on a worker: {exc}", file=sys.stderr, flush=True)
        elif isinstance(exc, RanksLost):
            print(f"slaq: ranks lost: {exc}. Saving the record and ending the launch (exit "
                  f"{EXIT_RANKS_LOST}): resume the run on the ranks left", file=sys.stderr, flush=True)
        else:
            print(f"slaq: error on rank 0 ({comm.hostname()}): {exc.__class__.__name__}: {exc}\n"
                  f"{traceback.format_exc()}", file=sys.stderr, flush=True)
        lost = isinstance(exc, RanksLost)
        if coord is not None:
            try:
                coord._show_epoch()  # the line of the last decision, as the record will hold it
                coord._save(finished=False)
                if lost:  # the step supervisor resumes the run on the nodes left
                    coord._write_status("ranks lost")
            except Exception as save_exc:  # the abort matters more than the record
                print(f"slaq: could not save the record: {save_exc}", file=sys.stderr, flush=True)
        hint = disk_full_hint(exc, run_dir)
        if hint:
            print(hint, file=sys.stderr, flush=True)
        comm.abort(EXIT_RANKS_LOST if lost else EXIT_ABORTED)
        return EXIT_RANKS_LOST if lost else EXIT_ABORTED
