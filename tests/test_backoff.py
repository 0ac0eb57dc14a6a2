"""The runtime's one way to wait: test, sleep a little longer, test again."""

from __future__ import annotations

import time

import pytest

from slaq_mpi.runtime.backoff import Backoff


def test_a_wait_ends_when_its_test_holds() -> None:
    calls: list[float] = []

    def third_time() -> bool:
        calls.append(time.monotonic())
        return len(calls) == 3

    assert Backoff(first=0.001, longest=0.002).wait(third_time) is True
    assert len(calls) == 3


def test_spins_come_before_the_first_sleep() -> None:
    calls: list[int] = []
    slept: list[int] = []

    def never() -> bool:
        calls.append(1)
        return False

    assert not Backoff(first=0.001, longest=0.001, spins=5).wait(
        never, deadline=time.monotonic() + 0.02, between=lambda: slept.append(len(calls)))
    assert slept and slept[0] == 6  # five spins, then one test before the first sleep


def test_a_wait_gives_up_at_its_deadline_and_sleeps_no_longer() -> None:
    start = time.monotonic()
    assert Backoff(first=0.01, longest=10.0, growth=100.0).wait(
        lambda: False, deadline=start + 0.05) is False
    assert 0.05 <= time.monotonic() - start < 5.0  # the 10 s sleep is cut at the deadline


def test_between_may_give_up_the_wait() -> None:
    def boom() -> None:
        raise RuntimeError("a worker failed")

    with pytest.raises(RuntimeError, match="a worker failed"):
        Backoff(first=0.001, longest=0.001).wait(lambda: False, between=boom)
