"""A resumed run's jobs that no longer fit its ranks (slaq_mpi/runtime/fit.py): each fails with a
clear reason, kept in the record, while the run and the other jobs go on."""

from __future__ import annotations

from dataclasses import replace

from slaq_mpi.config.experiment import parse
from slaq_mpi.runtime.fit import fail_unfit, memory_problems, unfit_jobs
from slaq_mpi.runtime.history import snapshot
from slaq_mpi.storage.metrics import JobRecord, RunRecord

RAW = {"name": "x", "ranks": 12, "jobs": [
    {"name": n, "algorithm": "logreg", "max_cores": 8,
     "dataset": {"generator": "classification", "rows": 50, "features": 3}} for n in ("a", "b", "c")]}


def _record() -> RunRecord:
    jobs = {n: JobRecord(name=n, algorithm="logreg", convergence="sublinear", arrival=0.0, max_cores=8)
            for n in ("a", "b", "c")}
    jobs["c"].status = "done"
    return RunRecord(attrs={}, jobs=jobs)


def test_a_rank_names_the_jobs_its_node_cannot_hold() -> None:
    spec = parse(RAW, check_files=False)
    assert memory_problems(spec) == {}  # tiny models fit
    big = ("jobs[1].dataset", 10**12, "needs about 3.6 TiB on every rank; this machine has 8 GiB")
    spec = replace(spec, jobs=(spec.jobs[0], replace(spec.jobs[1], memory_problem=big), spec.jobs[2]))
    assert memory_problems(spec) == {"b": "jobs[1].dataset: 1000000000000 is not allowed; needs about "
                                          "3.6 TiB on every rank; this machine has 8 GiB"}


def test_the_first_node_that_cannot_hold_a_job_is_named() -> None:
    unfit = unfit_jobs([("n1", {}), ("n2", {"b": "too big for n2"}), ("n2", {"b": "too big for n2"}),
                        ("n3", {"b": "too big for n3", "c": "c too"})])
    assert unfit == {"b": "its model no longer fits the memory of n2, where the resumed run has "
                          "ranks: too big for n2",
                     "c": "its model no longer fits the memory of n3, where the resumed run has "
                          "ranks: c too"}
    assert unfit_jobs([]) == {}


def test_an_unfit_job_fails_with_its_reason_and_the_others_go_on() -> None:
    record, said = _record(), []
    failed = fail_unfit(record, {"b": "its model no longer fits", "c": "ended anyway", "zz": "unknown"},
                        42.0, said.append)
    assert failed == ["b"]
    assert (record.jobs["b"].status, record.jobs["b"].reason, record.jobs["b"].end) == \
        ("failed", "its model no longer fits", 42.0)
    assert record.jobs["a"].status == "waiting" and record.jobs["c"].status == "done"
    assert said == ["job b failed: its model no longer fits"]


def test_max_cores_beyond_the_ranks_left_is_a_bound_not_a_failure() -> None:
    """A job of max_cores 8 resumed on 3 worker ranks is offered those 3 (no job is unfit)."""
    spec = parse(RAW, check_files=False)
    record = _record()
    snap = snapshot([record.jobs["a"], record.jobs["b"]], {j.name: j for j in spec.jobs}, {}, 3, 0.0, 1.0)
    assert [j.max_cores for j in snap.jobs] == [3, 3]
