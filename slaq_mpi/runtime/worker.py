"""Worker ranks (1..N-1): train the job rank 0 assigns, until it ends or rank 0 moves it.

A job's ranks iterate without pause. Between chunks of iterations (each at most
:data:`CHUNK_SECONDS` long, one iteration at least) they exchange, in one tiny non-blocking
allreduce over the job's own control communicator, whether a solver raised, the next chunk's
size and whether to stop for a move; the exchange started at one chunk boundary is read at the
next, so it overlaps the chunk instead of pausing the job (a job on one rank acts at once). A
job whose solver ends it (done, failed) agrees on it at once. The leader (the job's lowest
rank) sends rank 0 a report about once per ``epoch_seconds``, having started a checkpoint of
the same iterations in the background (once the previous one is on disk).

Asked to release the job, the ranks stop at the chunk boundary after the one where the leader
saw the ask; the leader keeps the job's state in memory, reports at once and writes the
checkpoint in the background, telling rank 0 when it is on disk. If the job restarts on ranks
that include that leader, the state goes from its memory to the new group; else the new
leader reads the checkpoint (rank 0 waits for it to be on disk).
"""

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
from slaq_mpi.data.shard_cache import ShardCache
from slaq_mpi.errors import EXIT_ABORTED
from slaq_mpi.runtime import comm
from slaq_mpi.runtime.messages import Assign, Report
from slaq_mpi.storage import checkpoint

STUCK_SECONDS = 30.0  # at least this long a rank whose solver raised waits for its peers
# checkpoints a leader writes in the background at once: one, so a report's checkpoint is on
# disk before the next report is sent, and a resume redoes at most one report period
WRITES_IN_FLIGHT = 1
CHUNK_SECONDS = 0.03  # the longest run of iterations between two checks (an eighth of an epoch if less)


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
        self.link = comm.WorkerLink(sleep_waits)
        self.job: str | None = None
        self.job_spec: JobSpec | None = None
        self.group: comm.MPIGroup | None = None
        self.solver: Solver | None = None
        self.iteration = 0
        self.last_loss = math.nan
        self._saved = 0  # the newest iteration of the job with a checkpoint
        self._writers: list[threading.Thread] = []  # checkpoints being written, oldest first
        self._writer_error: tuple[str, BaseException] | None = None  # a write's (job, error)
        self._state_checked = False  # the job's get_state() was checked on this rank
        self._chunk_seconds = min(CHUNK_SECONDS, spec.epoch_seconds / 8)
        self._setup_error = ""  # the job's solver raised while being built or restored
        self._pace = [self._chunk_seconds]  # the latest iterations' seconds
        self._kept: tuple[str, int, dict[str, np.ndarray], float] | None = None  # a released
        # job's (name, iterations, state, last loss), for its restart on a group with this rank
        self._unsaved: list[tuple[str, int]] = []  # released jobs whose checkpoints are being written
        self._shards = ShardCache()  # small datasets, kept whole for the job restarts of this rank

    def run(self) -> None:
        """Train the jobs rank 0 assigns until it says the run is over."""
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _ignore)  # rank 0 stops the run, releasing every job
        while True:
            order = self.link.wait_assign(between=self._confirm_saved)
            if order.job is None:
                break
            self._start(order)  # an error escapes with self.job still naming the job
            self._iterate()
            self._drop()
        self._join_writer()
        self.link.close(order.releases)

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

    def _join_writer(self) -> None:
        """Wait for every checkpoint being written; then tell rank 0 of the released jobs'."""
        for writer in self._writers:
            writer.join()
        self._writers = []
        self._writes_done()

    def _writes_done(self) -> None:
        """After the writes ended: raise a write's error, else confirm the released jobs'
        checkpoints to rank 0."""
        if self._writer_error is not None:
            raise CheckpointWriteError(*self._writer_error)
        for job, iteration in self._unsaved:
            self.link.send_saved(job, iteration)
        self._unsaved = []

    def _confirm_saved(self) -> None:
        """Once the checkpoints of the jobs this rank released are written, tell rank 0 (a
        restart without this rank reads them). Checked while waiting and between chunks."""
        self._writers = [w for w in self._writers if w.is_alive()]
        if not self._writers:
            self._writes_done()

    def _write(self, after: threading.Thread | None, job: str, *args: object) -> None:
        try:
            if after is not None:  # checkpoints of a job are written in order
                after.join()
            checkpoint.write(self.run_dir, job, *args)  # type: ignore[arg-type]
        except BaseException as exc:  # surfaced on the main thread (_writes_done)
            self._writer_error = (job, exc)

    def _checkpoint(self, released: bool = False) -> None:
        """The leader: write the job's checkpoint of its iterations so far in the background,
        while the job trains on or this rank waits. The writes run one after another, at most
        :data:`WRITES_IN_FLIGHT` of them (a new one waits for the oldest beyond that); all
        end before exit. ``released``: the job stops for a move; its state is kept in memory
        for its restart, and rank 0 is told when the file is written."""
        assert self.job is not None and self.solver is not None
        self._confirm_saved()
        if released:
            state = checkpoint.state_arrays(self.solver.get_state(), self.job)
            self._kept = (self.job, self.iteration, state, self.last_loss)
            self._unsaved.append((self.job, self.iteration))  # confirmed once the file is written
            if self.iteration == self._saved:
                return
        elif self.iteration == self._saved:
            return
        else:
            state = checkpoint.state_arrays(self.solver.get_state(), self.job)
        while len(self._writers) >= WRITES_IN_FLIGHT:
            self._writers.pop(0).join()
        after = self._writers[-1] if self._writers else None
        self._saved = self.iteration
        writer = threading.Thread(target=self._write, daemon=False,
                                  args=(after, self.job, self.iteration, self.last_loss, state))
        writer.start()
        self._writers.append(writer)

    def _drop(self) -> None:
        if self.group is not None:
            self.group.free()
        self.group, self.solver, self.job = None, None, None

    def _start(self, order: Assign) -> None:
        """Join the group of ``order.job`` and build its solver, restored from its checkpoint
        if it has iterated. A solver that raises here fails its job (:meth:`_iterate` reports
        it), not the run."""
        assert order.job is not None and order.spec is not None
        job_name = self.job = order.job  # an error from here on names the job
        job = self.job_spec = order.spec
        members = sorted(order.ranks)
        # my rows first: the read overlaps the other ranks' arrival
        shard = self._shards.read(order.data, members.index(self.rank), len(members))
        group = self.group = comm.job_group(members, order.tag, self.link.sleep_waits)
        self.iteration = self._saved = order.iterations
        self.last_loss = math.nan
        self._state_checked = False
        self._setup_error = ""
        self._pace = [self._chunk_seconds]
        kept, self._kept = self._kept, None
        state = None
        root = members.index(order.source) if order.source in members else 0
        if order.iterations > 0 and group.rank == root:
            if order.source == self.rank:
                assert kept is not None and kept[:2] == (job_name, order.iterations), \
                    f"rank {self.rank} was to restart {job_name} from memory but holds {kept and kept[:2]}"
                state = ({k: v.copy() for k, v in kept[2].items()}, kept[3])
            else:
                path = checkpoint.job_dir(self.run_dir, job_name) / f"{order.iterations:08d}.h5"
                ckpt = checkpoint.read(path)
                state = (ckpt.state, ckpt.last_loss)
        if order.iterations > 0:
            state = group.bcast(state, root)
        try:
            solver = load_solver(job.algorithm)(group, shard, job.hyperparameters, job.seed)
        except Exception as exc:
            self._setup_error = self._solver_raised(exc, " in __init__")
            return
        if state is not None:
            try:
                solver.set_state(state[0])
            except Exception as exc:
                where = f" in set_state() restoring iteration {order.iterations}"
                self._setup_error = self._solver_raised(exc, where)
                return
            self.last_loss = state[1]
        self.solver = solver

    def _solver_raised(self, exc: Exception, where: str) -> str:
        """Log a solver's exception on this rank; the job's failure reason (``where``: the
        method that raised, "" for ``step()``)."""
        error = f"solver raised {exc.__class__.__name__}{where}: {exc}"
        print(f"[rank {self.rank} on {comm.hostname()}, job {self.job}] {error}\n"
              f"{traceback.format_exc()}", file=sys.stderr, flush=True)
        return error

    def _iterate(self) -> None:
        """Train the job until it ends or rank 0 releases it (see the module docstring)."""
        assert self.group is not None and self.job is not None
        group = self.group
        leader = group.rank == 0
        report = Report(self.job, group.size)
        next_report = time.monotonic() + self.spec.epoch_seconds
        error = self._setup_error
        if error:
            report.status, report.reason = "failed", error
        # before any step, in step: the solver may have failed to build on some rank
        pace = _chunk_size(self._pace, self._chunk_seconds) if leader else 0
        flags = self._agree(error, pace, False, posted=False)
        chunk = int(flags[1])
        if flags[0] and report.status != "failed":
            report.status, report.reason = "failed", _peer_raised(self.iteration + 1)
        alone = group.size == 1  # no peer to wait for: a boundary acts on its own values
        if report.status == "running":
            if not alone:
                group.post_control(np.array([0.0, float(pace), 0.0]))
            while True:
                error = self._run_chunk(report, chunk)
                ended = report.status != "running"
                next_chunk, release = 0, False
                if leader and not ended:
                    next_chunk = _chunk_size(self._pace, self._chunk_seconds)
                    release = self.job in self.link.released()
                mine = np.array([0.0, float(next_chunk), float(release)])
                previous = mine if alone else self._agree_posted()  # the previous boundary's
                if ended:  # every rank of the job ends at this boundary: agree on it now
                    flags = self._agree(error, 0, False, posted=False)
                    if flags[0] and report.status != "failed":
                        report.status, report.reason = "failed", _peer_raised(self.iteration)
                    break
                if previous[2]:  # released
                    break
                if not alone:
                    group.post_control(mine)
                chunk = int(previous[1])
                self._confirm_saved()
                if leader and time.monotonic() >= next_report:
                    # the previous report's checkpoint is on disk before rank 0 records this
                    # report's iterations (the write waits for it): a resume redoes one at most
                    self._checkpoint()
                    self.link.send_report(report)
                    report = Report(self.job, group.size)
                    next_report = time.monotonic() + self.spec.epoch_seconds
        if leader:
            if report.status == "running":  # released
                self._checkpoint(released=True)
                report.released = True
            elif report.status == "done":
                self._checkpoint()
            self.link.send_report(report)

    def _run_chunk(self, report: Report, chunk: int) -> str:
        """Run up to ``chunk`` iterations, adding them to ``report``; they end early when the
        job is done or fails (``report.status`` says so). Returns the solver's error ("" if
        it raised none)."""
        assert self.solver is not None and self.job is not None and self.job_spec is not None
        stop = self.job_spec.stop
        for _ in range(chunk):
            t0 = time.monotonic()
            try:
                loss = _loss_value(self.solver.step())
            except Exception as exc:
                error = self._solver_raised(exc, "")
                report.status, report.reason = "failed", error
                return error
            t1 = time.monotonic()
            self.iteration += 1
            report.losses.append(loss)
            report.iter_seconds.append(t1 - t0)
            self._pace[:] = [*self._pace[-1:], t1 - t0]
            report.end_times.append(time.time())
            if not self._state_checked:  # a state no checkpoint can hold: the job fails now
                try:
                    checkpoint.state_arrays(self.solver.get_state(), self.job)
                except Exception as exc:
                    error = self._solver_raised(exc, f" in get_state() after iteration {self.iteration}")
                    report.status, report.reason = "failed", error
                    return error
                self._state_checked = True
            if not math.isfinite(loss):
                report.status = "failed"
                report.reason = f"loss became {loss} at iteration {self.iteration}"
            elif stop.done_after(self.iteration, self.last_loss, loss):
                report.status = "done"
            self.last_loss = loss
            if report.status != "running":
                break
        return ""

    def _agree(self, error: str, next_chunk: int, release: bool, posted: bool) -> np.ndarray:
        """The group's element-wise max of (a solver raised, the leader's next chunk size,
        stop for a move): exchanged now, or (``posted``) the exchange started at the previous
        chunk boundary.

        Raises:
            SolverError: this rank's solver raised and the other ranks did not come: they are
                inside the solver's own collective, waiting for this one.
        """
        assert self.group is not None
        if not posted:
            self.group.post_control(np.array([float(bool(error)), float(next_chunk), float(release)]))
        patience = max(STUCK_SECONDS, 2 * self.spec.epoch_seconds)
        flags = self.group.control_result(deadline=time.monotonic() + patience if error else None)
        if flags is None:
            raise SolverError(
                f"job {self.job}: its solver raised on this rank ({error}), and the job's other "
                f"ranks did not come within {patience:g} s: they are waiting inside the solver's "
                "collective. A solver must raise on every rank of the job or on none "
                "(docs/solvers.md); the run stops, resume it once the solver is fixed")
        return flags

    def _agree_posted(self) -> np.ndarray:
        """The exchange started at the previous chunk boundary (:meth:`_agree`)."""
        return self._agree("", 0, False, posted=True)


def _peer_raised(iteration: int) -> str:
    """The failure reason of a job whose solver raised on another rank of its group."""
    return (f"solver raised on another rank of the group at iteration {iteration} "
            "(see the log)")


def _ignore(_signum: int, _frame: object) -> None:
    """A worker's handler of the stop signals: rank 0 stops the run."""


def _chunk_size(pace: list[float], chunk_seconds: float) -> int:
    """The leader's next chunk: how many iterations fit in ``chunk_seconds`` at ``pace``, the
    seconds of the latest iterations (at least one)."""
    return max(1, int(chunk_seconds / max(max(pace), 1e-9)))


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
