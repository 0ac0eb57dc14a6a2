"""Rank 0's record of a run: a fresh one, one read back for ``--resume``, and what a policy
sees of it at a decision. No MPI: the record is plain data."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from jobs import load_solver
from slaq_mpi.config.experiment import ExperimentSpec, JobSpec
from slaq_mpi.data.datasets import fingerprint
from slaq_mpi.policies.snapshot import (
    DEFAULT_MOVE_SECONDS,
    ClusterSnapshot,
    cluster_snapshot,
    job_snapshot,
)
from slaq_mpi.storage import checkpoint, journal
from slaq_mpi.storage.metrics import JobRecord, RunRecord

STATE_FILE = "state.json"


def _say(msg: str) -> None:
    print(msg, flush=True)


def new_record(spec: ExperimentSpec, capacity: int) -> RunRecord:
    """An empty record for a fresh run of ``spec``."""
    jobs = {
        j.name: JobRecord(
            name=j.name,
            algorithm=j.algorithm,
            convergence=load_solver(j.algorithm).convergence,
            arrival=j.arrival,
            max_cores=min(j.max_cores or capacity, capacity),
        )
        for j in spec.jobs
    }
    prints = {p: fingerprint(p) for p in {j.dataset.path for j in spec.jobs if j.dataset.path}}
    attrs = {
        "name": spec.name, "policy": spec.policy, "seed": spec.seed, "capacity": capacity,
        "epoch_seconds": spec.epoch_seconds, "mode": "run", "config": spec.source,
        "workdir": os.getcwd(),  # where config.yaml's relative paths point (for --resume)
        "data_files": json.dumps({j.name: [j.dataset.path, prints[j.dataset.path]]
                                  for j in spec.jobs if j.dataset.path}, sort_keys=True),
    }
    return RunRecord(attrs=attrs, jobs=jobs)


def resume_record(run_dir: Path) -> tuple[RunRecord, int, float]:
    """Read a run's record back, add the reports of its journal taken after that save, and
    roll every job to its newest good checkpoint.

    Iterations recorded after that checkpoint are dropped (they run again). A corrupt
    checkpoint is renamed to ``*.corrupt`` and reported in one line. Returns the record, the
    next epoch number and the experiment time reached.
    """
    record = RunRecord.read(run_dir / "metrics.h5")
    if "epoch" in record.attrs and "elapsed" in record.attrs:  # saved with the history
        state = {"epoch": record.attrs["epoch"], "elapsed": record.attrs["elapsed"]}
    else:  # a record saved without them: state.json holds them
        state = json.loads((run_dir / STATE_FILE).read_text())
    if "journal" in record.attrs:
        # the experiment's clock goes on from the latest report taken, not from the save
        taken = journal.replay(record, journal.entries(run_dir, int(record.attrs["journal"])))
        state["elapsed"] = max(float(state.get("elapsed", 0.0)), taken)
    for job in record.jobs.values():
        if job.status in ("done", "failed", "cancelled"):
            continue
        job.status = "waiting"
        if job.iterations > 0:
            _roll_back(run_dir, job)
    epoch = int(state.get("epoch", 0))
    record.truncate_epochs(epoch)  # rows of an epoch that never finished
    return record, epoch, float(state.get("elapsed", 0.0))


def _roll_back(run_dir: Path, job: JobRecord) -> None:
    """Forget the iterations of ``job`` after its newest good checkpoint (corrupt ones are
    renamed aside, with one line each)."""
    ckpt, bad = checkpoint.latest(run_dir, job.name, at_most=job.iterations)
    keep = ckpt.iteration if ckpt else 0
    for path, _why in bad:
        path.rename(path.with_name(path.name + ".corrupt"))
    newest = max((int(f.stem) for f in checkpoint.job_dir(run_dir, job.name).glob("*.h5")
                  if f.stem.isdigit()), default=keep)
    checkpoint.drop_after(run_dir, job.name, keep)  # written after the last save
    if bad:
        names = ", ".join(f"{p.name} ({why})" for p, why in bad)
        fallback = f"resuming from {ckpt.path.name}" if ckpt else "no good checkpoint: restarting it"
        _say(f"job {job.name}: corrupt checkpoint {names}; {fallback} at iteration {keep}")
    later = f"; its newest checkpoint, at iteration {newest}, came after the last save" \
        if newest > keep else ""
    _say(f"job {job.name}: continues from iteration {keep} "
         f"({job.iterations - keep} recorded iterations will run again{later})")
    job.truncate(keep)


def snapshot(active: Iterable[JobRecord], jobs: Mapping[str, JobSpec],
             ranks: Mapping[str, Sequence[int]], capacity: int, now: float,
             epoch_seconds: float, move_seconds: float = DEFAULT_MOVE_SECONDS) -> ClusterSnapshot:
    """What the policy sees at a decision: the ``active`` jobs' records, their specs in
    ``jobs`` (by name) and the ``ranks`` each job holds now, on ``capacity`` worker ranks;
    ``move_seconds`` is what a move costs a moved job (the median pause measured)."""
    return cluster_snapshot(capacity, now, epoch_seconds, (
        job_snapshot(
            j.name, losses=j.loss, throughput=j.throughput, cores=len(ranks.get(j.name, ())),
            max_cores=j.max_cores, capacity=capacity, convergence=j.convergence,
            arrival=j.arrival, attained_core_seconds=j.attained_core_seconds,
            utility=jobs[j.name].utility, max_iterations=jobs[j.name].stop.max_iterations,
            weight=jobs[j.name].weight)
        for j in active), move_seconds=move_seconds)
