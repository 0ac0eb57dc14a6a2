"""Rank 0's bookkeeping of one epoch's reports, and when it asks to cut the epoch short."""

from __future__ import annotations

import time

from slaq_mpi.runtime.epoch_reports import EpochReports
from slaq_mpi.runtime.messages import Report


def _report(job: str, cores: int, status: str = "running", ago: float = 0.0) -> Report:
    end = time.time() - ago
    return Report(job, 0, cores, [1.0], [0.1], [end], end - 0.1, end + 1.0, status)


def test_every_running_job_reports_once() -> None:
    reports = EpochReports({"a", "b"}, time.monotonic(), 2.0, 2.0, 8)
    assert not reports.complete and reports.missing == ["a", "b"]
    reports.add(_report("b", 4))
    assert reports.missing == ["a"] and reports.cut_at is None
    reports.add(_report("a", 4))
    assert reports.complete and reports.missing == [] and reports.cut_wall is None


def test_a_job_that_finishes_early_with_enough_cores_cuts_the_epoch() -> None:
    started = time.monotonic() - 1.0  # 1 s into a 4 s epoch on 8 cores
    reports = EpochReports({"a", "b", "c"}, started, 4.0, 4.0, 8)
    reports.add(_report("a", 4, "done"))
    assert reports.cut_at is not None and reports.cut_at >= started + 1.0  # not before a quarter
    reports.cut_sent()
    assert reports.cut_at is None and reports.cut_wall is not None
    reports.add(_report("b", 2, "failed"))  # once asked, no second cut
    assert reports.cut_at is None


def test_cores_freed_by_several_jobs_add_up_to_a_cut() -> None:
    started = time.monotonic() - 1.0
    reports = EpochReports({"a", "b", "c"}, started, 4.0, 4.0, 64)  # a cut needs 8 cores idle 1 s here
    reports.add(_report("a", 2, "done"))
    assert reports.cut_at is None  # 2 cores for 3 s: not worth a pause of all 64
    reports.add(_report("b", 2, "done"))
    assert reports.cut_at is not None  # 4 cores for 3 s: it is
