"""Rank 0's view of whether each training job's ranks still answer (slaq_mpi/runtime/liveness.py):
a job that stops reporting is silent after a bounded time; a healthy slow job never is."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slaq_mpi.errors import RanksLost
from slaq_mpi.runtime.liveness import SILENT_EPOCHS, SILENT_MARGIN, START_SECONDS, Liveness, pace
from slaq_mpi.storage.metrics import JobRecord


def _job(iter_seconds: list[float], cores: int = 2) -> JobRecord:
    job = JobRecord(name="a", algorithm="logreg", convergence="sublinear", arrival=0.0, max_cores=4)
    job.iter_seconds = list(iter_seconds)
    job.cores = [cores] * len(iter_seconds)
    return job


def test_pace_is_the_slowest_recent_iteration_scaled_to_fewer_cores() -> None:
    assert pace(_job([]), 2) is None
    assert pace(_job([0.1, 0.3, 0.2]), 2) == pytest.approx(0.3)
    assert pace(_job([0.1, 0.3, 0.2], cores=4), 2) == pytest.approx(0.6)  # half the cores now
    assert pace(_job([0.1, 0.3, 0.2], cores=2), 4) == pytest.approx(0.3)  # more cores: not faster
    assert pace(_job([9.0] + [0.1] * 20), 2) == pytest.approx(0.1)  # only the recent ones count


def test_a_job_that_stops_reporting_is_silent_after_the_bound() -> None:
    live = Liveness(epoch_seconds=1.0)
    running = {"a": (1, 2), "b": (3,)}
    paces = {"a": 0.01, "b": 0.01}
    assert live.silent(0.0, running, paces) == []  # their clocks start
    bound = SILENT_EPOCHS * 1.0 + SILENT_MARGIN
    t = 0.0
    while t < 30.0:  # "a" reports every epoch, "b" reported once and then never again
        t += 1.0
        live.heard("a", t)
        if t == 1.0:
            live.heard("b", t)
        silent = live.silent(t, running, paces)
        assert silent == (["b"] if t - 1.0 > bound else []), t


def test_the_first_report_after_an_assignment_may_take_longer() -> None:
    live = Liveness(epoch_seconds=1.0)
    running = {"a": (1, 2)}
    live.silent(0.0, running, {"a": 0.01})
    steady = SILENT_EPOCHS * 1.0 + SILENT_MARGIN
    assert live.silent(steady + 1.0, running, {"a": 0.01}) == []
    assert live.silent(steady + START_SECONDS + 0.5, running, {"a": 0.01}) == ["a"]


def test_a_healthy_slow_job_is_never_silent() -> None:
    """Iterations of 25 s on 1 s epochs: the leader reports once per iteration."""
    live = Liveness(epoch_seconds=1.0)
    job = _job([25.0, 24.0, 26.0], cores=2)
    running = {"slow": (1, 2)}
    t = 0.0
    live.silent(t, running, {"slow": pace(job, 2)})
    for _ in range(40):
        for step in range(27):  # rank 0 looks often while the iteration runs
            assert live.silent(t + step, running, {"slow": pace(job, 2)}) == [], t + step
        t += 26.0
        live.heard("slow", t)
        job.iter_seconds.append(26.0)
        job.cores.append(2)


def test_a_job_whose_pace_is_unknown_is_never_silent() -> None:
    live = Liveness(epoch_seconds=1.0)
    live.silent(0.0, {"new": (1,)}, {})
    assert live.silent(1e6, {"new": (1,)}, {"new": None}) == []


def test_a_move_or_an_end_restarts_or_forgets_the_clock() -> None:
    live = Liveness(epoch_seconds=1.0)
    paces = {"a": 0.01}
    live.silent(0.0, {"a": (1, 2)}, paces)
    late = SILENT_EPOCHS + SILENT_MARGIN + START_SECONDS + 1.0
    assert live.silent(late, {"a": (3, 4)}, paces) == []  # moved: assigned anew now
    assert live.silent(late + 1.0, {}, paces) == []  # released or ended
    live.heard("a", late + 2.0)  # a late report of a job no longer training is ignored
    assert live.silent(2 * late + 100.0, {}, paces) == []


@given(epoch=st.floats(0.05, 10.0), iteration=st.floats(0.001, 100.0), n=st.integers(1, 30))
def test_reports_within_their_period_keep_a_job_alive(epoch: float, iteration: float, n: int) -> None:
    """A leader that reports whenever its clock passes an epoch, at an iteration's end (as
    the worker does), with iterations up to its pace, is never silent."""
    live = Liveness(epoch_seconds=epoch)
    running = {"a": (1,)}
    job = _job([iteration])
    t = 0.0
    live.silent(t, running, {"a": pace(job, 1)})
    for _ in range(n):
        gap = math.ceil(epoch / iteration) * iteration  # whole iterations up to the next epoch
        for frac in (0.5, 0.99, 1.0):
            assert live.silent(t + frac * gap, running, {"a": pace(job, 1)}) == []
        t += gap
        live.heard("a", t)


def test_check_names_the_silent_jobs_ranks_and_nodes() -> None:
    live = Liveness(epoch_seconds=1.0)
    jobs = {"a": _job([0.01]), "b": _job([0.01])}
    running = {"a": (1, 2), "b": (5, 6)}
    hosts = {1: "n1", 2: "n1", 5: "n2", 6: "n3"}
    live.check(0.0, running, jobs, hosts)
    live.heard("a", 50.0)
    with pytest.raises(RanksLost, match=r"1 job\(s\) stopped reporting: b \(ranks 5, 6 on n2, n3: "
                                        r"nothing for 51\.0 s"):
        live.check(51.0, running, jobs, hosts)
