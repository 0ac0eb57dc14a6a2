"""Lower bounds on a simulated workload's normalized-loss job-seconds that no policy can beat.

The bound reported is the larger of two, each below every policy's job-seconds:

*Alone*: every job runs alone on all the cores it may use (its ``max_cores``, at most the capacity, at
the core count of its scaling model's fastest iteration) from the moment it arrives: no policy
can report its k-th iteration earlier than ``arrival + k * fastest`` seconds, so at every time
its reported normalized loss is at least the lowest one of the curve up to that iteration, and
it ends no earlier. Integrated over the same window with the same L*, the bound's job-seconds
are at most any policy's. It ignores that the jobs share the cluster.

*Capacity* (:func:`capacity_job_seconds`): a job's normalized loss, while it is active, is at
least the sum of the drops ``d_k`` of its running-minimum curve (the last one down to 0, at its
end) over the iterations ``k`` it has not finished. Every iteration is a unit of work: it takes
at least ``c`` core-seconds (the fewest its scaling model spends on an iteration, on any core
count), it cannot start before ``arrival + (k - 1) * fastest`` and the cluster gives at most
``capacity`` core-seconds per second. Any policy's run, its cores counted as the units they
serve (pauses and waits only waste them), is a preemptive schedule of these units on one
machine of speed ``capacity``, in blocks: a job's iterations, which run in order, are cut into
consecutive blocks at the vertices of the least concave majorant of its summed drops, so that
no first iterations of a block weigh more on average than the block; a block is one unit (its
weight, work and first release the sums and the first of its iterations'), and as its
iterations run in order, its weight by its unserved fraction is at most theirs. Its last block
holds the drop to 0 at the job's end with the iterations that lead to it: ending a job costs
all of them. Without the order of the blocks (a relaxation): for every such schedule and time,
the weight of the units not yet complete is at least their weight times their unprocessed
fraction, and the preemptive schedule that always serves the released unit with the largest
weight per second of work makes that sum the smallest at every time at once (the exchange
argument of the mean-busy-time relaxation of one-machine scheduling with release dates). Its
integral over the window is therefore below every policy's job-seconds; it binds when the
cluster is loaded, where the alone bound does not.

The bounds are on the model's speeds without noise: with
``simulation.time_noise`` above 0 an iteration can run faster than its model, and the bounds are
then estimates, not a guarantee. The clairvoyant ``oracle`` policy is a greedy on true curves,
not an optimum: its job-seconds may lie anywhere above this bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from slaq_mpi.report.evaluation import normalized_loss, normalized_loss_job_seconds, reduction_times
from slaq_mpi.sim.workload import SimJob
from slaq_mpi.storage.metrics_schema import JobTrace, RunData

__all__ = ["BOUND_METRICS", "bound_metrics", "bound_run", "capacity_job_seconds", "fastest_seconds",
           "least_core_seconds"]

#: The metrics the bound gives (each at most any policy's, see the module's docstring).
BOUND_METRICS = ("normalized_loss_job_s", "mean_time_to_90", "mean_time_to_95")


def fastest_seconds(job: SimJob, capacity: int) -> float:
    """The fewest seconds per iteration ``job`` can run at on up to ``capacity`` cores."""
    top = max(1, min(job.max_cores, capacity))
    return float(np.min(job.scaling.seconds_array(np.arange(1, top + 1))))


def least_core_seconds(job: SimJob, capacity: int) -> float:
    """The fewest core-seconds an iteration of ``job`` takes on up to ``capacity`` cores."""
    top = max(1, min(job.max_cores, capacity))
    cores = np.arange(1, top + 1)
    return float(np.min(cores * job.scaling.seconds_array(cores)))


def _drops(job: SimJob, l_star: float) -> np.ndarray:
    """``d_1 .. d_S`` (S: the job's stop iteration): the drop of the job's running-minimum
    normalized loss at its k-th iteration, the last one down to 0 (the job ends there)."""
    n = max(int(job.stop_iter), 1)
    curve = np.asarray(job.curve[:n], dtype=np.float64)
    shown = np.concatenate(([1.0], normalized_loss(curve, float(curve[0]), l_star)))
    low = np.minimum.accumulate(shown)  # after k iterations the loss shown is at least low[k]
    return np.append(-np.diff(low[:n]), low[n - 1])


def _blocks(cum: np.ndarray) -> np.ndarray:
    """The last iteration of each block: the vertices after 0 of the least concave majorant of
    ``cum`` (a job's drops summed up to each iteration, ``cum[0] = 0``). Within a block no
    first iterations weigh more, on average, than the whole block."""
    hull: list[int] = [0]
    for k in range(1, len(cum)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b when it lies on or below the chord from a to k
            if (cum[b] - cum[a]) * (k - a) <= (cum[k] - cum[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(k)
    return np.array(hull[1:], dtype=np.int64)


def capacity_job_seconds(jobs: Sequence[SimJob], capacity: int, l_star: Mapping[str, float],
                         window: tuple[float, float] | None) -> float:
    """The capacity bound on normalized-loss job-seconds (see the module's docstring): the
    integral over ``window`` (None: until every unit is served) of the weight of the units
    not yet served, by fractions, under the preemptive largest-weight-per-work-first schedule.
    """
    if not jobs or capacity <= 0:
        return 0.0
    lo = min(j.arrival for j in jobs) if window is None else window[0]
    hi = math.inf if window is None else window[1]
    rel, wt, work, start = [], [], [], []
    for job in jobs:
        if job.arrival >= hi:
            continue
        cum = np.concatenate(([0.0], np.cumsum(_drops(job, l_star.get(job.name, 0.0)))))
        ends = _blocks(cum)
        first = np.concatenate(([0], ends[:-1]))
        weight = cum[ends] - cum[first]
        keep = weight > 0
        first, ends, weight = first[keep], ends[keep], weight[keep]
        rel.append(job.arrival + first * fastest_seconds(job, capacity))
        wt.append(weight)
        work.append((ends - first) * (least_core_seconds(job, capacity) / capacity))
        start.append(np.full(len(weight), max(job.arrival, lo)))
    if not rel:
        return 0.0
    order = np.argsort(np.concatenate(rel), kind="stable")
    r = np.concatenate(rel)[order].tolist()
    w = np.concatenate(wt)[order]
    p = np.concatenate(work)[order]
    waiting = float(np.dot(w, np.concatenate(start)[order]))
    total = float(w.sum())
    rate = (w / p).tolist()
    left = p.tolist()
    served = served_t = 0.0  # sums over pieces of rate * length, and of rate * length * midpoint
    ready: list[tuple[float, int]] = []
    n, i, t = len(r), 0, r[0]
    while t < hi:
        if not ready:
            if i >= n:
                break
            t = max(t, r[i])
            if t >= hi:
                break
        while i < n and r[i] <= t:
            heapq.heappush(ready, (-rate[i], i))
            i += 1
        k = ready[0][1]
        until = min(r[i] if i < n else math.inf, hi)
        if t + left[k] <= until:  # the unit is served in full
            until = t + left[k]
            piece = left[k]
            heapq.heappop(ready)
        else:
            piece = until - t
            left[k] -= piece
        served += rate[k] * piece
        served_t += rate[k] * piece * (t + until) / 2.0
        t = until
    end = t if math.isinf(hi) else hi
    return total * end - waiting - (end * served - served_t)


def _trace(job: SimJob, capacity: int) -> JobTrace:
    """``job`` alone on its fastest core count from its arrival, reporting at each iteration
    the lowest loss of its curve so far."""
    n = max(int(job.stop_iter), 1)
    tpi = fastest_seconds(job, capacity)
    times = job.arrival + tpi * np.arange(1, n + 1, dtype=np.float64)
    loss = np.minimum.accumulate(np.asarray(job.curve[:n], dtype=np.float64))
    return JobTrace(
        name=job.name, algorithm=job.algorithm, arrival=job.arrival, loss=loss, time=times,
        cores=np.full(n, min(job.max_cores, capacity), dtype=np.int32),
        iter_seconds=np.full(n, tpi), start=job.arrival, end=float(times[-1]), status="done",
        reason="", convergence=job.convergence, l_star=job.l_star, max_cores=job.max_cores,
        attained_core_seconds=0.0, throughput=np.zeros((0, 2)), utility=None,
        scaling=(job.scaling.work, job.scaling.overhead, job.scaling.comm),
    )


def bound_run(jobs: Sequence[SimJob], capacity: int) -> RunData:
    """The bound as a run's traces: every job alone on its fastest cores from its arrival (its
    allocation rows are left empty: the jobs overlap, no cluster could hold them)."""
    traces = {j.name: _trace(j, capacity) for j in jobs}
    end = max((t.end for t in traces.values()), default=0.0)
    return RunData(
        name="bound", policy="bound", seed=0, capacity=capacity, epoch_seconds=1.0,
        mode="simulate", config="", jobs=traces, job_names=[j.name for j in jobs],
        epoch_time=np.zeros(0), alloc=np.zeros((0, len(jobs)), dtype=np.int32),
        decision_ms=np.zeros(0), pause_ms=np.zeros(0), moved=np.zeros(0, dtype=np.int8),
        stopped=end,
    )


def _mean(values: Iterable[float]) -> float:
    arr = np.asarray(list(values), dtype=np.float64)
    arr = arr[~np.isnan(arr)]
    return float(arr.mean()) if len(arr) else float("nan")


def bound_metrics(jobs: Sequence[SimJob], capacity: int, l_star: Mapping[str, float],
                  window: tuple[float, float] | None) -> dict[str, float]:
    """:data:`BOUND_METRICS` of the workload ``jobs``, on the L* and the window of the runs it
    is compared with (``window`` None: the bound's own span, for a run with no window)."""
    run = bound_run(jobs, capacity)
    alone = normalized_loss_job_seconds(run, l_star, window)
    return {
        "normalized_loss_job_s": max(alone, capacity_job_seconds(jobs, capacity, l_star, window)),
        "mean_time_to_90": _mean(reduction_times(run, l_star, 90)),
        "mean_time_to_95": _mean(reduction_times(run, l_star, 95)),
    }
