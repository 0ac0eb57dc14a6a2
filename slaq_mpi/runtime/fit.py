"""Which jobs of a resumed run no longer fit the ranks it resumes on, and failing them.

A run resumes on other ranks than it ran on: fewer after a node was lost, or on other nodes
(a requeue, a resubmission) whose memory (or whose cgroup's limit) may be smaller. Every rank
checks each job's model against its own node's memory as it reads the config
(:func:`memory_problems`); on a fresh start such a job refuses the whole run (bad input), but
on a resume the run has already begun: the job that no longer fits on some rank is failed,
with the rank's reason, and the others go on (:func:`fail_unfit`).

A job's ``max_cores`` is an upper bound, never a need: on fewer ranks the policy gives it at
most the ranks there are (:func:`slaq_mpi.policies.snapshot.job_snapshot`), so it never makes a
job unfit. Plain functions, no MPI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.errors import ConfigError
from slaq_mpi.storage.metrics import RunRecord

__all__ = ["fail_unfit", "memory_problems", "unfit_jobs"]


def memory_problems(spec: ExperimentSpec) -> dict[str, str]:
    """This rank's problem with each job whose model does not fit its node's memory, by job."""
    return {job.name: str(ConfigError(*job.memory_problem)) for job in spec.jobs
            if job.memory_problem is not None}


def unfit_jobs(per_rank: Iterable[tuple[str, Mapping[str, str]]]) -> dict[str, str]:
    """Every job some rank cannot hold, with the first such rank's node and problem:
    ``per_rank`` gives each rank's ``(host, memory_problems)``."""
    unfit: dict[str, str] = {}
    for host, problems in per_rank:
        for job, problem in problems.items():
            unfit.setdefault(job, f"its model no longer fits the memory of {host}, where the "
                                  f"resumed run has ranks: {problem}")
    return unfit


def fail_unfit(record: RunRecord, unfit: Mapping[str, str], now: float,
               say: Callable[[str], None]) -> list[str]:
    """Fail each job of ``record`` in ``unfit`` that has not ended, at experiment time
    ``now``, with its reason (kept in metrics.h5 and status.json), saying so in one line
    each. Returns the jobs failed."""
    failed = []
    for name, why in unfit.items():
        job = record.jobs.get(name)
        if job is None or job.status in ("done", "failed", "cancelled"):
            continue
        job.status, job.reason, job.end = "failed", why, now
        failed.append(name)
        say(f"job {name} failed: {why}")
    return failed
