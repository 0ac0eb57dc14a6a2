"""Adding a job leader's report to rank 0's record of the run. Plain bookkeeping, no MPI:
the coordinator calls :func:`absorb` for every report its link hands over."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from slaq_mpi.runtime.messages import Report
from slaq_mpi.storage.journal import Journal, entry
from slaq_mpi.storage.metrics import JobRecord, RunRecord


def absorb(record: RunRecord, report: Report, to_now: Callable[[float], float],
           journal: Journal | None = None) -> float | None:
    """Add ``report``'s iterations and status to its job's record, and to ``journal``.

    ``to_now`` turns a wall-clock time (``time.time()``) into experiment seconds. Returns the
    experiment time at which the report's first iteration started (None if it holds none).
    """
    job = record.jobs[report.job]
    before = len(job.loss)
    first = _absorb(job, report, to_now)
    if journal is not None and (len(job.loss) > before or report.status != "running"):
        journal.add(entry(job, before, to_now(time.time())))
    return first


def _absorb(job: JobRecord, report: Report, to_now: Callable[[float], float]) -> float | None:
    n = len(report.losses)
    first = None
    if n:
        first = to_now(report.end_times[0] - report.iter_seconds[0])
        if math.isnan(job.start):
            job.start = first
        job.loss.extend(report.losses)
        job.time.extend(to_now(t) for t in report.end_times)
        job.cores.extend([report.cores] * n)
        job.iter_seconds.extend(report.iter_seconds)
        job.throughput.append((report.cores, sorted(report.iter_seconds)[n // 2]))
        job.attained_core_seconds += report.cores * sum(report.iter_seconds)
    if report.status != "running":
        job.status, job.reason = report.status, report.reason
        job.end = job.time[-1] if n else to_now(time.time())
    return first
