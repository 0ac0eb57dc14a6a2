"""A lower bound on a simulated workload's normalized-loss job-seconds that no policy can beat.

Every job runs alone on all the cores it may use (its ``max_cores``, at most the capacity, at
the core count of its scaling model's fastest iteration) from the moment it arrives: no policy
can report its k-th iteration earlier than ``arrival + k * fastest`` seconds, so at every time
its reported normalized loss is at least the lowest one of the curve up to that iteration, and
it ends no earlier. Integrated over the same window with the same L*, the bound's job-seconds
are at most any policy's. The bound is on the model's speeds without noise: with
``simulation.time_noise`` above 0 an iteration can run faster than its model, and the bound is
then an estimate, not a guarantee. The clairvoyant ``oracle`` policy is a greedy on true curves,
not an optimum: its job-seconds may lie anywhere above this bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from slaq_mpi.report.evaluation import normalized_loss_job_seconds, reduction_times
from slaq_mpi.sim.workload import SimJob
from slaq_mpi.storage.metrics_schema import JobTrace, RunData

__all__ = ["BOUND_METRICS", "bound_metrics", "bound_run", "fastest_seconds"]

#: The metrics the bound gives (each at most any policy's, see the module's docstring).
BOUND_METRICS = ("normalized_loss_job_s", "mean_time_to_90", "mean_time_to_95")


def fastest_seconds(job: SimJob, capacity: int) -> float:
    """The fewest seconds per iteration ``job`` can run at on up to ``capacity`` cores."""
    top = max(1, min(job.max_cores, capacity))
    return float(np.min(job.scaling.seconds_array(np.arange(1, top + 1))))


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
    return {
        "normalized_loss_job_s": normalized_loss_job_seconds(run, l_star, window),
        "mean_time_to_90": _mean(reduction_times(run, l_star, 90)),
        "mean_time_to_95": _mean(reduction_times(run, l_star, 95)),
    }
