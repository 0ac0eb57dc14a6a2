"""The decision timing rules shared by the live coordinator, the simulator and the evaluation."""

from __future__ import annotations

import pytest

from slaq_mpi.runtime.timing import next_decision


def test_rank_0_decides_an_epoch_after_its_last_decision_or_at_the_next_arrival() -> None:
    assert next_decision(0.0, None, 2.0) == 2.0  # nothing pending
    assert next_decision(3.0, 7.0, 2.0) == 5.0  # arrives after the regular decision
    assert next_decision(3.0, 5.0, 2.0) == 5.0  # at the same time: one decision
    assert next_decision(3.2, 4.5, 2.0) == pytest.approx(4.5)  # at the arrival, however soon
    assert next_decision(3.2, 3.2000001, 2.0) == pytest.approx(3.2000001)
    assert next_decision(3.2, 1.0, 2.0) == 3.2  # an arrival already due: at once, never earlier


@pytest.mark.slow  # starts a Python process
def test_the_simulator_and_the_evaluation_load_the_timing_rules_without_mpi() -> None:
    import subprocess
    import sys

    code = ("import sys, slaq_mpi.runtime.timing, slaq_mpi.sim.engine, slaq_mpi.report.evaluation; "
            "print(sorted(m for m in sys.modules if m.startswith('mpi4py')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_simulated_decision_comes_no_sooner_than_the_least_gap() -> None:
    assert next_decision(3.0, 3.01, 2.0, min_gap=0.0625) == pytest.approx(3.0625)
    assert next_decision(3.0, 3.5, 2.0, min_gap=0.0625) == 3.5  # farther than the gap: at it
    assert next_decision(3.0, None, 2.0, min_gap=0.0625) == 5.0
    assert next_decision(3.0, 3.01, 0.05, min_gap=0.0625) == pytest.approx(3.05)  # never past an epoch
