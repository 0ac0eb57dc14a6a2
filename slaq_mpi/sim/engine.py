"""The discrete-event simulator of the asynchronous runtime, over ``capacity`` cores.

Jobs iterate continuously; the policy decides on rank 0's clock
(:mod:`slaq_mpi.runtime.timing`): ``epoch_seconds`` after the previous decision, at once when
a job arrives, and at once when a job meets its stop rule (its cores are free at that moment),
but no sooner than :data:`~slaq_mpi.runtime.timing.SIMULATED_GAP_SHARE` of an epoch after the
previous decision (live, the time a decision takes), so a burst is decided together.
At each decision the arrived jobs are admitted and the policy is called on a
:class:`~slaq_mpi.policies.snapshot.ClusterSnapshot` built as the live coordinator builds it
(the losses each job has reported, one observed ``(cores, seconds/iteration)`` pair per
report, about one an epoch (:mod:`slaq_mpi.sim.timeline`), attained core-seconds, and the move
cost as ``move_seconds``). A job whose core count stays the same never stops. A job whose count
changes is moved (:mod:`slaq_mpi.sim.timeline`): it pauses ``reconfigure_seconds`` (a job
that never ran starts without a pause) and then runs on its new count. When the move happens
is the epoch model:

* ``live`` (what the MPI runtime does): the job finishes its current iteration on its old
  cores; a job that grows keeps iterating on its old cores until the cores it gains are free
  (the free ones at once, then those of the jobs that shrink, each at its own next iteration
  boundary, earliest first, given to the growing jobs in arrival order) and moves at its
  next iteration boundary after that. The runtime also lets a growing job stop with its
  donors, or before them while they train on, when that idles fewer ranks (docs/runtime.md);
  this model does not, so it overstates how long a slow growing job's gained cores wait;
* ``fluid``: every move takes effect at the decision, and the progress made in the current
  iteration carries over to the new core count (an ideal runtime that stops nothing midway).

When no job is active the clock jumps to the next arrival. With a ``horizon`` the simulation
stops there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from slaq_mpi.errors import ContractError, SlaqError
from slaq_mpi.policies.snapshot import ClusterSnapshot, checked_allocation, cluster_snapshot, utility_pairs
from slaq_mpi.report.evaluation import JobTrace, RunData
from slaq_mpi.runtime.timing import SIMULATED_GAP_SHARE, next_decision
from slaq_mpi.sim.settings import EPOCH_MODELS
from slaq_mpi.sim.timeline import JobRun
from slaq_mpi.sim.workload import SimJob

__all__ = ["EPOCH_MODELS", "SimulationError", "simulate"]


class SimulationError(SlaqError, RuntimeError):
    """A policy returned an allocation the simulator cannot apply."""


def _snapshot(active: Sequence[JobRun], capacity: int, now: float, epoch_seconds: float,
              move_seconds: float) -> ClusterSnapshot:
    """What the policy sees at the decision at ``now``."""
    return cluster_snapshot(capacity, now, epoch_seconds, (s.snapshot(capacity) for s in active),
                            move_seconds)


def simulate(jobs: Sequence[SimJob], policy: Any, *, capacity: int, epoch_seconds: float,
             name: str = "sim", seed: int = 0, config_text: str = "",
             time_noise: float = 0.0, reconfigure_seconds: float = 0.0,
             max_epochs: int | None = None, horizon: float | None = None,
             progress: Callable[[str], None] | None = None,
             progress_seconds: float = 2.0, epoch_model: str = "fluid") -> RunData:
    """Simulate ``jobs`` under ``policy`` and return the run's traces (metrics.h5 content).

    ``policy`` follows the policy contract; if it has ``bind_truth(jobs)`` (the oracle), it is
    first given the true jobs. ``reconfigure_seconds`` is the pause of a moved job (the
    snapshot's ``move_seconds``); ``max_epochs`` stops after that many decisions.
    Deterministic for a given workload and ``seed``. ``epoch_model`` is ``live`` or ``fluid``
    (when a move takes effect: see the module's docstring).
    """
    if epoch_model not in EPOCH_MODELS:
        raise ValueError(f"epoch_model must be one of {EPOCH_MODELS}, not {epoch_model!r}")
    pname = str(getattr(policy, "name", type(policy).__name__))
    if hasattr(policy, "bind_truth"):
        policy.bind_truth({j.name: j for j in jobs})
    sim = _Simulation(jobs, seed, capacity, epoch_seconds, epoch_model == "live",
                      float(reconfigure_seconds), float(time_noise))
    last_print = time.perf_counter()
    while sim.going():
        if max_epochs is not None and sim.epochs >= max_epochs:
            break
        if horizon is not None and sim.now >= horizon:
            break
        if not sim.admit(horizon):
            break
        sim.plan(sim.decide(policy, pname))
        sim.run_until(sim.next_time(horizon))
        if progress is not None and time.perf_counter() - last_print >= progress_seconds:
            last_print = time.perf_counter()
            progress(f"  {pname}: t={sim.now:,.0f} s, decision {sim.epochs}, {len(sim.active)} active, "
                     f"{sim.done}/{len(sim.states)} done")
    return sim.result(name=name, policy=pname, seed=seed, config_text=config_text)


class _Simulation:
    """One simulation between its decisions: the jobs, the clock and what was recorded."""

    def __init__(self, jobs: Sequence[SimJob], seed: int, capacity: int, epoch_seconds: float,
                 live: bool, move: float, noise: float) -> None:
        self.states = [JobRun(j, i, seed, epoch_seconds) for i, j in enumerate(jobs)]
        self.pending = sorted(self.states, key=lambda s: (s.job.arrival, s.col))
        self.nxt = 0  # the first pending job that has not arrived
        self.active: list[JobRun] = []
        self.capacity = capacity
        self.epoch_seconds = epoch_seconds
        self.live, self.move, self.noise = live, move, noise
        self.epoch_t: list[float] = []
        self.rows: list[dict[int, int]] = []
        self.decision: list[float] = []
        self.paused: list[bool] = []
        self.changed: list[bool] = []
        self.freed = False  # whether a job ended since the last decision
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
            state = pending[self.nxt]
            state.t0 = state.clock = self.now
            self.active.append(state)
            self.nxt += 1
        return True

    def decide(self, policy: Any, pname: str) -> dict[str, int]:
        """The policy's checked allocation at this decision."""
        snap = _snapshot(self.active, self.capacity, self.now, self.epoch_seconds, self.move)
        t0 = time.perf_counter()
        raw = policy.allocate(snap)
        self.decision.append((time.perf_counter() - t0) * 1000.0)
        try:
            return checked_allocation(raw, snap, pname)
        except ContractError as exc:
            raise SimulationError(str(exc)) from None

    def plan(self, alloc: dict[str, int]) -> None:
        """Record the decision and plan every job's switch to its new core count."""
        now = self.now
        row: dict[int, int] = {}
        paid, changed = False, self.freed  # a job that ended since left its ranks
        free = self.capacity
        releases: list[tuple[float, int]] = []  # (when, cores) that shrinking jobs free
        growing: list[tuple[JobRun, int, float]] = []
        for s in self.active:
            if self.noise > 0 and (s.running or s.job.name in alloc):
                s.redraw(self.noise)
            free -= s.running
            cores = alloc.get(s.job.name, 0)
            if cores:
                row[s.col] = cores
            changed = changed or cores != s.cores
            if cores == s.running:
                s.plan(cores, now, 0.0)
                continue
            pause = self.move if cores > 0 and s.started else 0.0
            paid = paid or (pause > 0 and cores != s.cores)
            if not self.live:
                s.plan(cores, now, pause)
            elif cores < s.running:
                at = s.boundary(now)
                releases.append((at, s.running - cores))
                s.plan(cores, at, pause)
            else:
                growing.append((s, cores, pause))
        if growing:
            self._grow(growing, [(now, free), *sorted(releases)])
        self.epoch_t.append(now)
        self.rows.append(row)
        self.paused.append(paid)
        self.changed.append(changed)
        self.freed = False

    def _grow(self, growing: list[tuple[JobRun, int, float]],
              releases: list[tuple[float, int]]) -> None:
        """Plan the growing jobs' switches (``live``): each takes the cores it gains from
        ``releases`` (when, how many), earliest first, and moves at its first iteration
        boundary once the last of them is free."""
        k = 0
        left = releases[0][1]
        for s, cores, pause in growing:
            need = cores - s.running
            ready = self.now
            while need > 0 and k < len(releases):
                take = min(need, left)
                need -= take
                left -= take
                ready = max(ready, releases[k][0])
                if left <= 0:
                    k += 1
                    left = releases[k][1] if k < len(releases) else 0
            s.plan(cores, s.boundary(ready), pause)

    def next_time(self, horizon: float | None) -> float:
        """The next decision: the regular or arrival one (:func:`next_decision`), or the first
        end of a job, if sooner, but not within the least gap between decisions; at most
        ``horizon``."""
        upcoming = self.pending[self.nxt].job.arrival if self.nxt < len(self.pending) else None
        gap = SIMULATED_GAP_SHARE * self.epoch_seconds
        due = next_decision(self.now, upcoming, self.epoch_seconds, gap)
        ends = min((s.finish_time() for s in self.active), default=math.inf)
        due = min(due, max(ends, self.now + gap))
        if horizon is not None:
            due = min(due, horizon)
        return max(due, self.now)

    def run_until(self, until: float) -> None:
        """Run every active job to ``until``; the jobs that meet their stop rule by then end."""
        still = []
        for s in self.active:
            s.advance(until, finish=s.finish_time() <= until)
            if math.isnan(s.end):
                still.append(s)
        self.done += len(self.active) - len(still)
        self.freed = self.freed or len(still) < len(self.active)
        self.active = still
        self.now = until
        self.epochs += 1

    def result(self, *, name: str, policy: str, seed: int, config_text: str) -> RunData:
        """The run's traces, as metrics.h5 holds them."""
        alloc_arr = np.zeros((len(self.rows), len(self.states)), dtype=np.int32)
        for e, row in enumerate(self.rows):
            for col, c in row.items():
                alloc_arr[e, col] = c
        pause = np.where(np.array(self.paused, dtype=bool), self.move * 1000.0, np.nan)
        return RunData(
            name=name, policy=policy, seed=seed, capacity=self.capacity,
            epoch_seconds=self.epoch_seconds, mode="simulate", config=config_text,
            jobs={s.job.name: _trace(s) for s in self.states},
            job_names=[s.job.name for s in self.states],
            epoch_time=np.array(self.epoch_t, dtype=np.float64), alloc=alloc_arr,
            decision_ms=np.array(self.decision, dtype=np.float64),
            pause_ms=pause.astype(np.float64), moved=np.array(self.changed, dtype=np.int8),
            stopped=self.now,
        )


def _trace(s: JobRun) -> JobTrace:
    job = s.job
    n = len(s.losses)
    times = np.concatenate(s.t_chunks) if s.t_chunks else np.zeros(0)
    cores = np.repeat(np.array(s.k_chunks, dtype=np.int32), s.c_chunks)
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
