"""Rank 0's side of ``slaq add``, ``slaq cancel`` and ``slaq drain``: the requests in the run's
spool (:mod:`slaq_mpi.storage.spool`), checked again against the run as it is now and carried
out between decisions. No MPI: the coordinator polls :meth:`Admission.poll` and decides at once
when it reports a change.

A request that cannot be carried out (a duplicate name, a data file gone, a job that already
ended) is answered ``refused`` with the reason, and nothing of the run changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from jobs import load_solver
from slaq_mpi.config.added import new_jobs, record_added
from slaq_mpi.config.experiment import ExperimentSpec, check_memory
from slaq_mpi.data.generators import materialize
from slaq_mpi.errors import ConfigError, DataError
from slaq_mpi.storage import spool
from slaq_mpi.storage.metrics import JobRecord, RunRecord

POLL_SECONDS = 0.25  # how often rank 0 looks into the spool
ENDED = ("done", "failed", "cancelled")


class Admission:
    """The requests of a run whose spec is ``spec`` and record ``record``, in ``run_dir``;
    ``capacity`` worker ranks; ``say`` prints a line of rank 0's log."""

    def __init__(self, spec: ExperimentSpec, record: RunRecord, run_dir: Path, capacity: int,
                 say: Callable[[str], None], draining: bool = False) -> None:
        self.spec = spec
        self.record = record
        self.run_dir = run_dir
        self.capacity = capacity
        self.say = say
        self.draining = draining
        self.data: dict[str, str] = {}  # dataset path of every job added
        self._next = 0.0
        spool.make_spool(run_dir)

    def poll(self, now: float) -> bool:
        """Carry out the requests waiting in the spool (at most every :data:`POLL_SECONDS`);
        whether the jobs or the run's state changed (then decide at once)."""
        if time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + POLL_SECONDS
        changed = False
        for req in spool.requests(self.run_dir):
            if not isinstance(req, spool.Request):
                path, why = req
                self.say(f"slaq: refused request {path.name}: {why}")
                spool.answer(path, False, why)
                continue
            try:
                detail = self._carry_out(req, now)
            except (ConfigError, DataError) as exc:
                self.say(f"slaq: refused {req.kind} request: {exc}")
                spool.answer(req.path, False, str(exc))
                continue
            spool.answer(req.path, True, **detail)
            changed = True
        return changed

    def _carry_out(self, req: spool.Request, now: float) -> dict[str, Any]:
        if req.kind == "drain":
            self.draining = True
            self.say("slaq: draining: no more jobs are accepted; the run ends when its jobs are done")
            return {}
        if req.kind == "cancel":
            return {"jobs": self._cancel(list(req.body), now)}
        if self.draining:
            raise ConfigError("slaq add", "jobs", "the run is draining: it accepts no more jobs")
        return {"jobs": self._admit(list(req.body), now)}

    def _admit(self, entries: list[dict[str, Any]], now: float) -> list[str]:
        """Add the job ``entries``, arriving ``now`` plus the ``arrival`` each asks for."""
        spec = new_jobs(self.spec, self.run_dir, entries)
        added = spec.jobs[len(self.spec.jobs):]
        check_memory(replace(spec, jobs=added))
        data = {j.name: str(materialize(j.dataset, self.run_dir / "data", j.seed)) for j in added}
        added = tuple(replace(j, arrival=now + j.arrival) for j in added)
        record_added(self.run_dir, [{**e, "arrival": j.arrival} for e, j in zip(entries, added, strict=True)])
        self.spec = replace(spec, jobs=(*self.spec.jobs, *added))
        self.data.update(data)
        for job in added:
            self.record.jobs[job.name] = JobRecord(
                name=job.name, algorithm=job.algorithm,
                convergence=load_solver(job.algorithm).convergence, arrival=job.arrival,
                max_cores=min(job.max_cores or self.capacity, self.capacity))
            self.say(f"slaq: added job {job.name} ({job.algorithm}), arriving at t={job.arrival:.1f}s")
        return [j.name for j in added]

    def _cancel(self, names: list[str], now: float) -> list[str]:
        """End the jobs ``names`` as ``cancelled`` (their ranks go to the others at the next
        decision; their last checkpoint is kept)."""
        for name in names:
            job = self.record.jobs.get(str(name))
            if job is None:
                raise ConfigError("slaq cancel", name, f"the run has no such job; its jobs: "
                                  f"{', '.join(self.record.jobs)}")
            if job.status in ENDED:
                raise ConfigError("slaq cancel", name, f"the job has already ended ({job.status})")
        for name in names:
            job = self.record.jobs[str(name)]
            job.status, job.reason, job.end = "cancelled", "cancelled by slaq cancel", now
            self.say(f"slaq: job {name} cancelled")
        return [str(n) for n in names]
