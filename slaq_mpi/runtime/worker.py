"""Worker ranks (1..N-1): train whichever job the plan gives them, epoch after epoch."""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from jobs import load_solver
from jobs.base import Solver
from slaq_mpi.config.experiment import ExperimentSpec, JobSpec
from slaq_mpi.data.datasets import read_shard
from slaq_mpi.errors import EXIT_ABORTED
from slaq_mpi.runtime import comm
from slaq_mpi.runtime.messages import Plan, Report
from slaq_mpi.storage import checkpoint

STUCK_SECONDS = 30.0  # at least this long a rank whose solver raised waits for its peers


class SolverError(RuntimeError):
    """A solver raised on some ranks of its job only: the others cannot be reached."""


class CheckpointWriteError(RuntimeError):
    """Writing a job's checkpoint failed (in the background writer); ``job`` names the job."""

    def __init__(self, job: str | None, cause: BaseException) -> None:
        super().__init__(f"writing a checkpoint of {job} failed: {cause}")
        self.job = job


class Worker:
    """One worker rank's state: the job it trains, its group and its solver."""

    def __init__(self, spec: ExperimentSpec, run_dir: Path, sleep_waits: bool = False) -> None:
        """``sleep_waits``: this node's ranks outnumber its CPUs (:func:`comm.detect_oversubscription`),
        so jobs' collectives wait sleeping."""
        self.spec = spec
        self.run_dir = run_dir
        self.rank = comm.world_rank()
        self.link = comm.WorkerLink(self._on_cut, sleep_waits)
        self.jobs: dict[str, JobSpec] = {j.name: j for j in spec.jobs}
        self.color = {j.name: i for i, j in enumerate(spec.jobs)}
        self.job: str | None = None
        self.group: comm.MPIGroup | None = None
        self.solver: Solver | None = None
        self.iteration = 0
        self.last_loss = math.nan
        self._writer: threading.Thread | None = None
        self._writer_error: BaseException | None = None
        self._writer_job: str | None = None
        self._stop_soon = False
        self._epoch_now = -1  # the epoch of the latest plan
        self._cut = False  # rank 0 asked to end that epoch early
        self._state_checked = False  # the job's get_state() was checked on this rank

    def run(self) -> None:
        """Follow plans until rank 0 says stop."""
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)  # end this epoch early; rank 0 stops the run
        while True:
            plan = self.link.recv_plan()
            received = time.monotonic()
            self._epoch_now, self._cut = plan.epoch, False
            self.link.poll()  # an ask may come before the plan; asks for earlier epochs are dropped
            if plan.stop:
                break
            if plan.moved:
                self._join_writer()  # a moved job's new ranks read the checkpoint after the split
            self._apply(plan)
            if self.solver is not None:
                self._epoch(plan, received)
        self._join_writer()
        self._drop()
        self.link.close()

    def fail(self, exc: BaseException) -> None:
        """An unrecoverable error on this rank: tell rank 0 (which re-raises it tagged with
        rank, host and job), then end the whole run in case rank 0 is blocked elsewhere."""
        info = {
            "rank": str(self.rank), "host": comm.hostname(),
            "job": str(getattr(exc, "job", None) or self.job),
            "error": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc(),
        }
        print(f"slaq: error on rank {info['rank']} ({info['host']}, job {info['job']}): "
              f"{info['error']}\n{info['traceback']}", file=sys.stderr, flush=True)
        self.link.post_error(info)
        time.sleep(2.0)
        comm.abort(EXIT_ABORTED)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self._stop_soon = True

    def _on_cut(self, epoch: int) -> None:
        """Rank 0 asked to end ``epoch`` early (the link's handler for ``Tag.CUT``)."""
        if epoch == self._epoch_now:
            self._cut = True

    def _join_writer(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._writer_error is not None:
            raise CheckpointWriteError(self._writer_job, self._writer_error)

    def _write(self, *args: object) -> None:
        try:
            checkpoint.write(*args)  # type: ignore[arg-type]
        except BaseException as exc:  # surfaced by _join_writer on the main thread
            self._writer_error = exc

    def _write_checkpoint_in_background(self) -> None:
        """Write this epoch's checkpoint while rank 0 decides and the job trains on.

        Joined before the next write, before any re-split and before exit, so a moved
        job's new ranks always find it complete.
        """
        assert self.job is not None and self.solver is not None
        self._join_writer()
        state = checkpoint.state_arrays(self.solver.get_state(), self.job)
        self._writer_job = self.job
        args = (self.run_dir, self.job, self.iteration, self.last_loss, state)
        self._writer = threading.Thread(target=self._write, args=args, daemon=False)
        self._writer.start()

    def _drop(self) -> None:
        if self.group is not None:
            self.group.free()
        self.group, self.solver, self.job = None, None, None

    def _apply(self, plan: Plan) -> None:
        new_job = plan.job_of(self.rank)
        if self.job is not None and (self.job in plan.moved or self.job != new_job):
            self._drop()
        if not plan.moved:
            return
        if new_job is None or new_job not in plan.moved:
            self.link.split(None, key=self.rank)  # the split is collective: take part, join nothing
            return
        self.job = new_job  # an error from here on names the job being placed
        # Read my rows before the collective split: ranks are ordered by world rank in the
        # new group, so my position is known now, and the read overlaps the wait.
        members = sorted(plan.ranks[new_job])
        shard = read_shard(plan.data[new_job], members.index(self.rank), len(members))
        group = self.link.split(self.color[new_job], key=self.rank)
        if group is None:
            return
        job = self.jobs[new_job]
        solver = load_solver(job.algorithm)(group, shard, job.hyperparameters, job.seed)
        done = plan.iterations[new_job]
        last_loss = math.nan
        if done > 0:
            state = None
            if group.rank == 0:
                path = checkpoint.job_dir(self.run_dir, new_job) / f"{done:08d}.h5"
                ckpt = checkpoint.read(path)
                state = (ckpt.state, ckpt.last_loss)
            state = group.bcast(state)
            solver.set_state(state[0])
            last_loss = state[1]
        self.job, self.group, self.solver = new_job, group, solver
        self._state_checked = False
        self.iteration, self.last_loss = done, last_loss

    def _epoch(self, plan: Plan, received: float) -> None:
        """Iterate until the epoch deadline, checking with the group only between chunks.

        Every rank runs the same number of iterations: the leader sizes each chunk from its
        iteration times so that the epoch ends just before the deadline (an overrun keeps
        every other job waiting for the next plan), and one small allreduce per chunk (at most
        an eighth of an epoch long) shares that size, any solver error and whether to end the
        epoch now: a stop signal, or rank 0 cutting the epoch short because another job
        finished (:func:`slaq_mpi.runtime.timing.cut_time`). Stopping rules and NaN checks use
        the global loss, which every rank sees, so ranks agree without talking.
        """
        assert self.group is not None and self.job is not None
        deadline = received + plan.epoch_seconds
        wall_deadline = time.time() + (deadline - time.monotonic())
        report = Report(self.job, plan.epoch, self.group.size, [], [], [], time.time(), wall_deadline)
        chunk = 1
        while True:
            error = self._run_chunk(report, chunk)
            next_chunk = 0
            if self.group.rank == 0 and report.status == "running":
                next_chunk = _chunk_size(report.iter_seconds, deadline, plan.epoch_seconds)
                self.link.poll()
            flags = self._agree(error, next_chunk, self._stop_soon or self._cut, plan.epoch_seconds)
            if flags[0] and report.status != "failed":
                report.status = "failed"
                report.reason = "solver raised on another rank of the group (see the log)"
            if report.status != "running" or flags[1] < 1 or flags[2]:
                break
            chunk = int(flags[1])
        if self.group.rank == 0:
            self.link.send_report(report)
            if report.status != "failed":
                self._write_checkpoint_in_background()
        if report.status != "running":
            self._drop()

    def _run_chunk(self, report: Report, chunk: int) -> str:
        """Run up to ``chunk`` iterations, adding them to ``report``; they end early when the
        job is done or fails (``report.status`` says so). Returns the solver's error ("" if
        it raised none)."""
        assert self.solver is not None and self.job is not None
        stop = self.jobs[self.job].stop
        for _ in range(chunk):
            t0 = time.monotonic()
            try:
                loss = _loss_value(self.solver.step())
                t1 = time.monotonic()
                if not self._state_checked:  # a state no checkpoint can hold: the job fails
                    checkpoint.state_arrays(self.solver.get_state(), self.job)  # now, not the run later
                    self._state_checked = True
            except Exception as exc:
                error = f"solver raised {exc.__class__.__name__}: {exc}"
                print(f"[rank {self.rank} on {comm.hostname()}, job {self.job}] {error}\n"
                      f"{traceback.format_exc()}", file=sys.stderr, flush=True)
                report.status, report.reason = "failed", error
                return error
            self.iteration += 1
            report.losses.append(loss)
            report.iter_seconds.append(t1 - t0)
            report.end_times.append(time.time())
            if not math.isfinite(loss):
                report.status = "failed"
                report.reason = f"loss became {loss} at iteration {self.iteration}"
            elif stop.done_after(self.iteration, self.last_loss, loss):
                report.status = "done"
            self.last_loss = loss
            if report.status != "running":
                break
        return ""

    def _agree(self, error: str, next_chunk: int, end_now: bool, epoch_seconds: float) -> np.ndarray:
        """The group's element-wise max of (a solver raised, the leader's next chunk size,
        end the epoch now).

        Raises:
            SolverError: this rank's solver raised and the other ranks did not come: they are
                inside the solver's own collective, waiting for this one.
        """
        assert self.group is not None
        patience = max(STUCK_SECONDS, 2 * epoch_seconds)
        flags = self.group.control_max(
            np.array([float(bool(error)), float(next_chunk), float(end_now)]),
            deadline=time.monotonic() + patience if error else None)
        if flags is None:
            raise SolverError(
                f"job {self.job}: its solver raised on this rank ({error}), and the job's other "
                f"ranks did not come within {patience:g} s: they are waiting inside the solver's "
                "collective. A solver must raise on every rank of the job or on none "
                "(docs/solvers.md); the run stops, resume it once the solver is fixed")
        return flags


def _chunk_size(iter_seconds: list[float], deadline: float, epoch_seconds: float) -> int:
    """The leader's next chunk: how many iterations fit in half the time left before
    ``deadline`` (``time.monotonic()``), at most an eighth of an epoch (the delay of a cut).
    Chunks shrink near the deadline, so a slowdown cannot overrun it by more than a few
    iterations; 0 ends the epoch."""
    est = max(iter_seconds[-2:])
    left = deadline - time.monotonic() - 0.25 * est
    chunk = int(min(0.5 * left, epoch_seconds / 8) / max(est, 1e-9))
    if chunk == 0 and left >= est:
        chunk = 1
    return chunk


def _loss_value(value: object) -> float:
    """The loss a solver's ``step()`` returned, as a float; a TypeError (the job fails, as if
    its step raised) unless it is one real number (a Python or numpy scalar, or a 0-d array)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return float(value)
    shown = f"an array of shape {value.shape}" if isinstance(value, np.ndarray) else repr(value)[:60]
    raise TypeError(f"step() must return the global loss as one number, not {shown} "
                    f"({type(value).__name__})")
