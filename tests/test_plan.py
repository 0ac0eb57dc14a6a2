"""The epoch length rule shared by the live coordinator and the simulator."""

from __future__ import annotations

import pytest

from slaq_mpi.plan import epoch_length


def test_epoch_is_cut_short_for_the_next_arrival() -> None:
    assert epoch_length(0.0, None, 2.0) == 2.0  # nothing pending
    assert epoch_length(0.0, 5.0, 2.0) == 2.0  # arrives after this epoch
    assert epoch_length(3.2, 4.5, 2.0) == pytest.approx(1.3)  # ends when the job arrives
    assert epoch_length(3.9, 4.0, 2.0) == pytest.approx(0.5)  # never below a quarter epoch
