"""The decision timing rules shared by the live coordinator, the simulator and the evaluation."""

from __future__ import annotations

import pytest

from slaq_mpi.runtime.timing import arrival_wait, epoch_length, next_decision


def test_rank_0_decides_an_epoch_after_its_last_decision_or_at_the_next_arrival() -> None:
    assert next_decision(0.0, None, 2.0) == 2.0  # nothing pending
    assert next_decision(3.0, 7.0, 2.0) == 5.0  # arrives after the regular decision
    assert next_decision(3.0, 5.0, 2.0) == 5.0  # at the same time: one decision
    assert next_decision(3.2, 4.5, 2.0) == pytest.approx(4.5)  # at the arrival, however soon
    assert next_decision(3.2, 3.2000001, 2.0) == pytest.approx(3.2000001)
    assert next_decision(3.2, 1.0, 2.0) == 3.2  # an arrival already due: at once, never earlier


def test_epoch_is_cut_short_for_the_next_arrival() -> None:
    assert epoch_length(0.0, None, 2.0) == 2.0  # nothing pending
    assert epoch_length(0.0, 5.0, 2.0) == 2.0  # arrives after this epoch
    assert epoch_length(3.2, 4.5, 2.0) == pytest.approx(1.3)  # ends when the job arrives
    assert epoch_length(3.9, 4.0, 2.0) == pytest.approx(0.5)  # never below a quarter epoch


def test_a_decision_waits_for_an_arrival_a_moment_away() -> None:
    # workers end the epoch cut short for an arrival at 1.0 s a few ms early: wait for it
    assert arrival_wait(0.996, 1.0, 1.0) == pytest.approx(0.004)
    assert arrival_wait(2.0 - 2.0 / 32, 2.0, 2.0) == pytest.approx(2.0 / 32)  # up to 1/32 epoch
    assert arrival_wait(1.9, 2.0, 2.0) == 0.0  # further: decide now, the epoch ends at it
    assert arrival_wait(1.0, 1.0, 2.0) == 0.0 and arrival_wait(1.0, None, 2.0) == 0.0


def test_an_epoch_is_cut_when_a_job_finishes_with_enough_of_it_left() -> None:
    from slaq_mpi.runtime.timing import cut_time

    # an epoch of 2 s from t=10 on 64 cores: the floor is a quarter of epoch_seconds (0.5 s),
    # and the freed cores must idle at least 64 * 2 / 32 = 4 core-seconds otherwise
    assert cut_time(10.0, 2.0, 11.0, 2.0, 8, 64) == pytest.approx(11.0)  # cut when it finished
    assert cut_time(10.0, 2.0, 10.1, 2.0, 8, 64) == pytest.approx(10.5)  # not before 0.5 s
    assert cut_time(10.0, 2.0, 11.5, 2.0, 8, 64) == pytest.approx(11.5)  # 0.5 s left: 4 core-s
    assert cut_time(10.0, 2.0, 11.6, 2.0, 64, 64) is None  # too little left for a decision
    assert cut_time(10.0, 0.8, 10.2, 2.0, 64, 64) is None  # an epoch already short for an arrival
    assert cut_time(10.0, 2.0, 11.0, 2.0, 3, 64) is None  # 3 cores for 1 s: not worth a pause
    assert cut_time(10.0, 2.0, 11.0, 2.0, 4, 64) == pytest.approx(11.0)  # 4 cores: it is


@pytest.mark.slow  # starts a Python process
def test_the_simulator_and_the_evaluation_load_the_timing_rules_without_mpi() -> None:
    import subprocess
    import sys

    code = ("import sys, slaq_mpi.runtime.timing, slaq_mpi.sim.engine, slaq_mpi.report.evaluation; "
            "print(sorted(m for m in sys.modules if m.startswith('mpi4py')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
