"""The discrete-event simulator: epochs of ``epoch_seconds`` over ``capacity`` cores.

At the start of every epoch (of ``epoch_seconds``, shortened to end at the next arrival as
the live coordinator does: :func:`slaq_mpi.runtime.timing.epoch_length`) the jobs that have arrived are
admitted, the policy is called on a
:class:`~slaq_mpi.policies.snapshot.ClusterSnapshot` built exactly as the live coordinator builds it
(losses reported so far, one observed ``(cores, seconds/iteration)`` pair per epoch run,
attained core-seconds), and every job then iterates at its scaling model's speed until the
epoch ends. An epoch in which jobs meet their stop rule is cut short by the live
coordinator's rule (:func:`slaq_mpi.runtime.timing.cut_time`), so the finished jobs' cores are given
out again at once (live, the other jobs stop at their next check, up to an eighth of an epoch
later; here at once), and it ends with the last of its jobs if they all finish. With the
``fluid`` epoch model (default) progress inside an unfinished iteration carries over to the
next epoch and no job holds up the others; with ``live`` the simulator does what the MPI
runtime does: every running job completes at least one whole iteration per epoch, starts none
that would end after the deadline, and the next epoch begins when the slowest job has
reported. Epochs in which no job is active are skipped (time jumps to the next arrival).
With a ``horizon`` the simulation stops there: the epoch it falls in is cut short to end at it
(under ``live``, the iterations that epoch must complete may still end after it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from slaq_mpi.errors import ContractError, SlaqError
from slaq_mpi.policies.snapshot import (
    ClusterSnapshot,
    JobSnapshot,
    checked_allocation,
    cluster_snapshot,
    job_snapshot,
    utility_pairs,
)
from slaq_mpi.report.evaluation import JobTrace, RunData
from slaq_mpi.runtime.timing import cut_time, epoch_length
from slaq_mpi.sim.settings import EPOCH_MODELS
from slaq_mpi.sim.workload import SimJob

__all__ = ["EPOCH_MODELS", "SimulationError", "simulate"]


class SimulationError(SlaqError, RuntimeError):
    """A policy returned an allocation the simulator cannot apply."""


class _State:
    __slots__ = ("job", "col", "n", "frac", "cores", "attained", "losses", "throughput",
                 "t_chunks", "c_chunks", "s_chunks", "start", "end", "rng")

    def __init__(self, job: SimJob, col: int, seed: int):
        self.job = job
        self.col = col
        self.n = 0
        self.frac = 0.0
        self.cores = 0
        self.attained = 0.0
        self.losses: list[float] = []
        self.throughput: list[tuple[int, float]] = []
        self.t_chunks: list[np.ndarray] = []
        self.c_chunks: list[int] = []
        self.s_chunks: list[float] = []
        self.start = math.nan
        self.end = math.nan
        self.rng = np.random.default_rng([seed, 3, col])

    def snapshot(self, capacity: int) -> JobSnapshot:
        """What a policy may know about this job now, on ``capacity`` cores."""
        job = self.job
        return job_snapshot(
            job.name, losses=self.losses, throughput=self.throughput, cores=self.cores,
            max_cores=job.max_cores, capacity=capacity, convergence=job.convergence,
            arrival=job.arrival, attained_core_seconds=self.attained, utility=job.utility,
            max_iterations=job.max_iterations)


def _snapshot(active: Sequence[_State], capacity: int, now: float, length: float) -> ClusterSnapshot:
    """What the policy sees at the decision at ``now`` for an epoch of ``length`` seconds."""
    return cluster_snapshot(capacity, now, length, (s.snapshot(capacity) for s in active))


def _speed(s: _State, cores: int, noise: float) -> float:
    """Seconds per iteration of job ``s`` on ``cores`` cores this epoch (one noise draw).

    ``noise`` is the relative standard deviation of the job's speed (iterations per second):
    the speed is multiplied by a lognormal factor of mean 1, so noise changes no job's mean
    speed."""
    tpi = s.job.scaling.seconds(cores)
    if noise > 0:
        sigma = math.sqrt(math.log1p(noise * noise))
        tpi *= math.exp(sigma * float(s.rng.standard_normal()) + 0.5 * sigma * sigma)
    return tpi


def _penalty(s: _State, cores: int, reconfigure: float) -> float:
    """Seconds job ``s`` loses this epoch to a change of its core count (checkpoint, restore).

    A job that has iterated restores from its checkpoint whenever its count changes, also
    when it comes back from a pause (0 cores), as a live run does."""
    return reconfigure if (cores != s.cores and s.n > 0) else 0.0


def _finish(s: _State, epoch: float, tpi: float, penalty: float, live: bool) -> float:
    """Seconds into an epoch of ``epoch`` seconds at which job ``s`` would meet its stop rule
    at ``tpi`` seconds per iteration (``inf`` if it would not finish in it). An offset, not a
    time: ``now + x - now`` can lose the last iteration of a fast job to rounding."""
    left = s.job.stop_iter - s.n
    if left <= 0:
        return 0.0
    frac = 0.0 if live else s.frac
    done = penalty + (left - frac) * tpi
    if done <= epoch + 1e-9 * tpi or (live and left == 1):
        return done
    return math.inf


def _cut(length: float, ends: list[tuple[float, int]], epoch_seconds: float,
         capacity: int) -> float:
    """The length of an epoch of ``length`` seconds cut short for the jobs that finish in it,
    as the live coordinator cuts it: ``ends`` holds ``(seconds into the epoch, cores)`` of
    those jobs, and the cut (:func:`slaq_mpi.runtime.timing.cut_time`) comes at the first finish from
    which the cores freed so far make one worth it."""
    freed = 0
    for at, cores in sorted(ends):
        freed += cores
        cut = cut_time(0.0, length, at, epoch_seconds, freed, capacity)
        if cut is not None:
            return max(cut, at)
    return length


def _advance(s: _State, cores: int, now: float, epoch: float, tpi: float, penalty: float,
             live: bool) -> float:
    """Run job ``s`` on ``cores`` cores (``tpi`` seconds per iteration, the first ``penalty``
    seconds lost to a move) for the epoch starting at ``now``.

    Returns when the job's last iteration of the epoch ended (``now`` if none did).
    fluid: iterations run back to back across epoch boundaries (progress carries over).
    live: as the MPI runtime does, at least one whole iteration, and no iteration is started
    that would end after the deadline; the caller makes the epoch last until every job is done.
    """
    job = s.job
    s.cores = cores
    if cores <= 0:
        return now
    if math.isnan(s.start):
        s.start = now
    avail = epoch - penalty
    last = now
    if live:
        progress = max(avail / tpi, 1.0)
        s.frac = 0.0
    else:
        progress = s.frac + max(avail, 0.0) / tpi
    m = min(int(progress + 1e-9), job.stop_iter - s.n)
    if m > 0:
        ends = now + penalty + (np.arange(1, m + 1) - s.frac) * tpi
        s.losses.extend(job.curve[s.n : s.n + m].tolist())
        s.t_chunks.append(ends)
        s.c_chunks.append(m)
        s.s_chunks.append(tpi)
        s.throughput.append((cores, tpi))
        s.n += m
        last = float(ends[-1])
        if s.n >= job.stop_iter:
            s.end = last
    if not live:
        s.frac = 0.0 if not math.isnan(s.end) else max(0.0, progress - m)
        held_until = s.end if not math.isnan(s.end) else now + epoch
        s.attained += cores * (held_until - now)
    return last


def simulate(jobs: Sequence[SimJob], policy: Any, *, capacity: int, epoch_seconds: float,
             name: str = "sim", seed: int = 0, config_text: str = "",
             time_noise: float = 0.0, reconfigure_seconds: float = 0.0,
             max_epochs: int | None = None, horizon: float | None = None,
             progress: Callable[[str], None] | None = None,
             progress_seconds: float = 2.0, epoch_model: str = "fluid") -> RunData:
    """Simulate ``jobs`` under ``policy`` and return the run's traces (metrics.h5 content).

    ``policy`` follows the policy contract; if it has ``bind_truth(jobs)`` (the oracle), it is
    first given the true jobs. Deterministic for a given workload and ``seed``.
    ``epoch_model`` is ``fluid`` or ``live`` (see :func:`_advance`).
    """
    if epoch_model not in EPOCH_MODELS:
        raise ValueError(f"epoch_model must be one of {EPOCH_MODELS}, not {epoch_model!r}")
    pname = str(getattr(policy, "name", type(policy).__name__))
    if hasattr(policy, "bind_truth"):
        policy.bind_truth({j.name: j for j in jobs})
    sim = _Simulation(jobs, seed, capacity, epoch_seconds, epoch_model == "live")
    last_print = time.perf_counter()
    while sim.going():
        if max_epochs is not None and sim.epochs >= max_epochs:
            break
        if horizon is not None and sim.now >= horizon:
            break
        if not sim.admit(horizon):
            break
        alloc, length = sim.decide(policy, pname, horizon)
        sim.run_epoch(alloc, length, time_noise, reconfigure_seconds)
        if progress is not None and time.perf_counter() - last_print >= progress_seconds:
            last_print = time.perf_counter()
            progress(f"  {pname}: t={sim.now:,.0f} s, epoch {sim.epochs}, {len(sim.active)} active, "
                     f"{sim.done}/{len(sim.states)} done")
    return sim.result(name=name, policy=pname, seed=seed, config_text=config_text)


class _Simulation:
    """One simulation between its epochs: the jobs, the clock and what was recorded."""

    def __init__(self, jobs: Sequence[SimJob], seed: int, capacity: int, epoch_seconds: float,
                 live: bool) -> None:
        self.states = [_State(j, i, seed) for i, j in enumerate(jobs)]
        self.pending = sorted(self.states, key=lambda s: (s.job.arrival, s.col))
        self.nxt = 0  # the first pending job that has not arrived
        self.active: list[_State] = []
        self.capacity = capacity
        self.epoch_seconds = epoch_seconds
        self.live = live
        self.epoch_t: list[float] = []
        self.rows: list[dict[int, int]] = []
        self.decision: list[float] = []
        self.now, self.epochs, self.done = 0.0, 0, 0

    def going(self) -> bool:
        """Whether a job is still to arrive or to finish."""
        return self.nxt < len(self.pending) or bool(self.active)

    def admit(self, horizon: float | None) -> bool:
        """Admit the jobs that have arrived, jumping an idle cluster's clock to the next
        arrival (the next decision is then, as live); False if that is past ``horizon`` (the
        run ends there)."""
        pending = self.pending
        if not self.active and pending[self.nxt].job.arrival > self.now:
            self.now = pending[self.nxt].job.arrival
            if horizon is not None and self.now >= horizon:
                self.now = horizon
                return False
        while self.nxt < len(pending) and pending[self.nxt].job.arrival <= self.now:
            self.active.append(pending[self.nxt])
            self.nxt += 1
        return True

    def decide(self, policy: Any, pname: str, horizon: float | None) -> tuple[dict[str, int], float]:
        """The policy's checked allocation for the next epoch, and that epoch's length."""
        upcoming = self.pending[self.nxt].job.arrival if self.nxt < len(self.pending) else None
        length = epoch_length(self.now, upcoming, self.epoch_seconds)
        if horizon is not None:
            length = min(length, horizon - self.now)  # the last epoch ends at the horizon
        snap = _snapshot(self.active, self.capacity, self.now, length)
        t0 = time.perf_counter()
        raw = policy.allocate(snap)
        self.decision.append((time.perf_counter() - t0) * 1000.0)
        try:
            return checked_allocation(raw, snap, pname), length
        except ContractError as exc:
            raise SimulationError(str(exc)) from None

    def run_epoch(self, alloc: dict[str, int], length: float, noise: float,
                  reconfigure: float) -> None:
        """Run every active job on its cores for an epoch of ``length`` seconds (shorter if
        jobs finish in it), then move the clock to the next decision."""
        row: dict[int, int] = {}
        speed: dict[int, tuple[float, float]] = {}
        finishing: list[tuple[float, int]] = []
        for s in self.active:
            c = alloc.get(s.job.name, 0)
            if c:
                row[s.col] = c
                tpi, pen = _speed(s, c, noise), _penalty(s, c, reconfigure)
                speed[s.col] = (tpi, pen)
                at = _finish(s, length, tpi, pen, self.live)
                if math.isfinite(at):
                    finishing.append((at, c))
        if finishing and len(finishing) == len(speed):  # all report early: the next epoch starts
            length = min(length, max(at for at, _ in finishing))
        elif finishing:  # a job frees its cores mid-epoch: re-decide then if worth it
            length = _cut(length, finishing, self.epoch_seconds, self.capacity)
        now = self.now
        ends: list[float] = []
        for s in self.active:
            tpi, pen = speed.get(s.col, (math.inf, 0.0))
            ends.append(_advance(s, alloc.get(s.job.name, 0), now, length, tpi, pen, self.live))
        self.epoch_t.append(now)
        self.rows.append(row)
        step = length
        if self.live:
            step = max(length, max(ends, default=now) - now)
            for s in self.active:
                held = (s.end if not math.isnan(s.end) else now + step) - now
                s.attained += s.cores * held
        still = [s for s in self.active if math.isnan(s.end)]
        self.done += len(self.active) - len(still)
        self.active = still
        self.now += step
        self.epochs += 1

    def result(self, *, name: str, policy: str, seed: int, config_text: str) -> RunData:
        """The run's traces, as metrics.h5 holds them."""
        alloc_arr = np.zeros((len(self.rows), len(self.states)), dtype=np.int32)
        for e, row in enumerate(self.rows):
            for col, c in row.items():
                alloc_arr[e, col] = c
        return RunData(
            name=name, policy=policy, seed=seed, capacity=self.capacity,
            epoch_seconds=self.epoch_seconds, mode="simulate", config=config_text,
            jobs={s.job.name: _trace(s) for s in self.states},
            job_names=[s.job.name for s in self.states],
            epoch_time=np.array(self.epoch_t, dtype=np.float64), alloc=alloc_arr,
            decision_ms=np.array(self.decision, dtype=np.float64),
            pause_ms=np.full(len(self.rows), np.nan), moved=_moved(alloc_arr), stopped=self.now,
        )


def _moved(alloc: np.ndarray) -> np.ndarray:
    """Whether any job's core count changed at each epoch (the first epoch counts as moved)."""
    if len(alloc) == 0:
        return np.zeros(0, dtype=np.int8)
    change = np.any(alloc[1:] != alloc[:-1], axis=1)
    return np.concatenate(([True], change)).astype(np.int8)


def _trace(s: _State) -> JobTrace:
    job = s.job
    n = len(s.losses)
    times = np.concatenate(s.t_chunks) if s.t_chunks else np.zeros(0)
    cores = np.repeat(np.array([c for c, _ in s.throughput], dtype=np.int32), s.c_chunks)
    secs = np.repeat(np.array(s.s_chunks, dtype=np.float64), s.c_chunks)
    if not math.isnan(s.end):
        status = "done"
    elif n or s.cores:
        status = "running"
    else:
        status = "waiting"
    return JobTrace(
        name=job.name, algorithm=job.algorithm, arrival=job.arrival,
        loss=np.array(s.losses, dtype=np.float64), time=times, cores=cores.astype(np.int32),
        iter_seconds=secs, start=s.start, end=s.end, status=status, reason="",
        convergence=job.convergence, l_star=job.l_star, max_cores=job.max_cores,
        attained_core_seconds=s.attained,
        throughput=np.array(s.throughput, dtype=np.float64).reshape(-1, 2),
        utility=dict(utility_pairs(job.utility)) or None,
        scaling=(job.scaling.work, job.scaling.overhead, job.scaling.comm),
    )
