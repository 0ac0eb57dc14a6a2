"""One simulated job's timeline: its progress in iterations as a piecewise linear function of
time, and what it records (losses, iteration end times, core counts, attained core-seconds).

Between decisions a job with cores iterates back to back at its scaling model's speed; its
progress ``p`` counts iterations, fractions included, and iteration ``k`` ends when ``p``
reaches ``k``. A decision that changes the job's core count plans a *switch*: the job runs on
its old cores until the switch time, then pauses (a move: checkpoint, new ranks, restore) and
runs on its new count from the end of the pause. The engine (:mod:`slaq_mpi.sim.engine`)
chooses the switch time: the job's next iteration boundary, after the cores it gains are free
(``live``), or the decision itself (``fluid``). A job switched to no cores stops there, its
progress kept.

A policy sees a job's iterations as the live coordinator does, through its reports: the job
reports at the end of its first iteration at least ``report_seconds`` (an epoch) after it
started or last reported, when it is moved (at its switch) and when it ends. A report adds one
``(cores, seconds per iteration)`` observation: the median seconds of the iterations it covers.
"""

from __future__ import annotations

import math

import numpy as np

from slaq_mpi.policies.snapshot import JobSnapshot, job_snapshot
from slaq_mpi.sim.workload import SimJob

__all__ = ["EPS", "JobRun"]

EPS = 1e-9  # progress this close below an iteration's end counts as reaching it (rounding)


class JobRun:
    """A simulated job's state: what it has done, what it runs on, the switch it will make.

    Attributes:
        n: iterations done (losses recorded).
        p: progress at ``t0`` (iterations, with the fraction of the current one).
        t0: when progress was last brought up to date, or when a pause ends (then later than
            ``clock``).
        clock: the time the job's record was last brought up to date.
        running: cores it iterates on now (0: none); ``tpi`` its seconds per iteration there.
        cores: cores the last decision gave it (what a policy sees as held).
        switch: when it leaves ``running`` for ``cores`` (inf: no switch pending); ``resume``
            when it runs again after the pause, ``tpi_next`` its speed then.
    """

    __slots__ = ("job", "col", "rng", "n", "p", "t0", "clock", "running", "tpi", "cores",
                 "switch", "resume", "tpi_next", "factor", "attained", "losses", "throughput",
                 "t_chunks", "c_chunks", "s_chunks", "k_chunks", "start", "end", "shown",
                 "report_seconds", "report_due", "unreported", "_seen")

    def __init__(self, job: SimJob, col: int, seed: int, report_seconds: float = 0.0):
        self.job = job
        self.col = col
        self.report_seconds = report_seconds
        self.report_due = math.inf  # when the job reports next (at an iteration's end)
        self.shown = 0  # iterations reported: what a policy sees
        self.unreported: list[tuple[float, int]] = []  # (seconds per iteration, iterations)
        self.rng = np.random.default_rng([seed, 3, col])
        self.n = 0
        self.p = 0.0
        self.t0 = self.clock = job.arrival
        self.running = self.cores = 0
        self.tpi = self.tpi_next = math.inf
        self.switch = self.resume = math.inf
        self.factor = 1.0
        self.attained = 0.0
        self.losses: list[float] = []
        self.throughput: list[tuple[int, float]] = []
        self.t_chunks: list[np.ndarray] = []
        self.c_chunks: list[int] = []
        self.s_chunks: list[float] = []
        self.k_chunks: list[int] = []
        self.start = math.nan
        self.end = math.nan
        self._seen: tuple[tuple[float, ...], tuple[tuple[int, float], ...]] | None = None

    def history(self) -> tuple[tuple[float, ...], tuple[tuple[int, float], ...]]:
        """The losses and throughput observations reported so far, as tuples kept until the
        job's next report (a snapshot then reuses them instead of copying every loss again)."""
        if self._seen is None or len(self._seen[0]) != self.shown:
            self._seen = (tuple(self.losses[: self.shown]), tuple(self.throughput))
        return self._seen

    def snapshot(self, capacity: int) -> JobSnapshot:
        """What a policy may know about this job now, on ``capacity`` cores."""
        job = self.job
        losses, throughput = self.history()
        return job_snapshot(
            job.name, losses=losses, throughput=throughput, cores=self.cores,
            max_cores=job.max_cores, capacity=capacity, convergence=job.convergence,
            arrival=job.arrival, attained_core_seconds=self.attained, utility=job.utility,
            max_iterations=job.max_iterations, weight=job.weight)

    @property
    def started(self) -> bool:
        """Whether the job has run (a move then pauses it; a first start does not)."""
        return self.running > 0 or self.n > 0 or self.p > 0

    def seconds(self, cores: int) -> float:
        """Seconds per iteration on ``cores`` at the current speed draw (inf for 0)."""
        return self.job.scaling.seconds(cores) * self.factor if cores > 0 else math.inf

    def redraw(self, noise: float) -> None:
        """Draw the job's speed until the next decision: a lognormal factor of mean 1 on its
        iterations per second, of relative standard deviation ``noise``."""
        sigma = math.sqrt(math.log1p(noise * noise))
        self.factor = math.exp(sigma * float(self.rng.standard_normal()) + 0.5 * sigma * sigma)
        self.tpi = self.seconds(self.running)

    def boundary(self, at: float) -> float:
        """The first iteration boundary at or after ``at`` (``at`` itself for a job that holds
        no cores or is paused then, at a boundary)."""
        if self.running <= 0 or at < self.t0:
            return at
        reached = self.p + (at - self.t0) / self.tpi
        k = math.ceil(reached - EPS)
        return max(at, self.t0 + (k - self.p) * self.tpi)

    def plan(self, cores: int, at: float, pause: float) -> None:
        """Hold ``cores`` from this decision on: switch at ``at`` and run again ``pause``
        seconds later; a job that stays on the cores it runs on cancels a pending switch."""
        self.cores = cores
        if cores == self.running:
            self.switch = self.resume = math.inf
            return
        self.switch, self.resume = at, at + pause
        self.tpi_next = self.seconds(cores)

    def finish_time(self) -> float:
        """When the job would meet its stop rule if nothing else were decided (inf: never)."""
        stop = self.job.stop_iter
        t, p = self.t0, self.p
        if self.switch < math.inf:
            if self.running > 0 and self.switch > t:
                at_switch = p + (self.switch - t) / self.tpi
                if at_switch + EPS >= stop:
                    return t + (stop - p) * self.tpi
                p = at_switch
            return self.resume + (stop - p) * self.tpi_next if self.cores > 0 else math.inf
        return t + (stop - p) * self.tpi if self.running > 0 else math.inf

    def advance(self, until: float, finish: bool = False) -> None:
        """Run the job to ``until`` (through its switch, if due); ``finish``: it meets its
        stop rule by then (``until`` is its :meth:`finish_time`), whatever the rounding."""
        if self.switch <= until:
            self._run(self.switch, finish and self.finish_time() <= self.switch)
            self._hold(self.switch)
            if not math.isnan(self.end):
                return
            self._report(self.n)  # a moved job reports as it is released
            self.running, self.tpi = self.cores, self.tpi_next
            self.t0, self.switch = self.resume, math.inf
            self.report_due = self.resume + self.report_seconds if self.running > 0 else math.inf
            if self.running > 0 and math.isnan(self.start):
                self.start = self.t0
        self._run(until, finish)
        self._hold(until)

    def _hold(self, until: float) -> None:
        """Count the cores held up to ``until`` (up to the end, for a job that ended)."""
        stop = until if math.isnan(self.end) else min(until, self.end)
        if stop > self.clock:
            self.attained += self.running * (stop - self.clock)
        self.clock = until

    def _run(self, until: float, finish: bool) -> None:
        """Record the iterations that end by ``until`` (all up to the stop rule if ``finish``)."""
        if self.running <= 0 or not math.isnan(self.end) or (until <= self.t0 and not finish):
            return
        job = self.job
        reached = self.p + (until - self.t0) / self.tpi
        last = job.stop_iter if finish else min(int(reached + EPS), job.stop_iter)
        if last > self.n:
            ends = self.t0 + (np.arange(self.n + 1, last + 1) - self.p) * self.tpi
            if finish:
                ends = np.minimum(ends, until)
            self.losses.extend(job.curve[self.n : last].tolist())
            self.t_chunks.append(ends)
            self.c_chunks.append(last - self.n)
            self.s_chunks.append(self.tpi)
            self.k_chunks.append(self.running)
            self._reports(ends)
            self.n = last
            if last >= job.stop_iter:
                self.end = float(ends[-1])
                self._report(last)
        self.p = max(reached, float(self.n))
        self.t0 = until

    def _reports(self, ends: np.ndarray) -> None:
        """The reports sent among the new iterations ending at ``ends`` (iterations
        ``n + 1 ...``): at the first iteration ending at or after each report's due time."""
        done = 0
        while True:
            i = int(np.searchsorted(ends, self.report_due - EPS * self.report_seconds))
            if i >= len(ends):
                break
            self.unreported.append((self.tpi, i + 1 - done))
            self._report(self.n + i + 1)
            self.report_due = float(ends[i]) + self.report_seconds
            done = i + 1
        if done < len(ends):
            self.unreported.append((self.tpi, len(ends) - done))

    def _report(self, upto: int) -> None:
        """Report the iterations up to ``upto``: their losses, and one observation of the
        median seconds per iteration of those since the last report, on ``running`` cores."""
        if upto <= self.shown or not self.unreported:
            return
        spans = sorted(self.unreported)
        middle = sum(count for _, count in spans) // 2  # as the live report: sorted(...)[n // 2]
        median = spans[-1][0]
        for seconds, count in spans:
            if middle < count:
                median = seconds
                break
            middle -= count
        self.throughput.append((self.running, median))
        self.unreported = []
        self.shown = upto
