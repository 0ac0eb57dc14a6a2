"""How the runtime moves jobs between rank sets (runtime/transitions.py): only the jobs whose
ranks change stop, a job starts only on free ranks, and no order of placements deadlocks."""

from __future__ import annotations

import random

from slaq_mpi.runtime.transitions import Transitions


def _settle(t: Transitions) -> list[tuple[str, str]]:
    """Carry the placement out as the coordinator does, every release asked answered at once
    and every released job's checkpoint written next; returns the actions in order."""
    actions: list[tuple[str, str]] = []
    for _ in range(100):
        release, start = t.steps()
        actions += [("release", j) for j in release] + [("start", j) for j in start]
        if not release and not start and not t.releasing and not t.unsaved:
            return actions
        for job in sorted(t.unsaved):
            t.saved(job)
        for job in sorted(t.releasing):
            t.ended(job, finished=False)
    raise AssertionError(f"no progress: {t.running} -> {t.target}, releasing {t.releasing}")


def test_unmoved_jobs_are_left_alone_and_a_grown_job_waits_for_free_ranks() -> None:
    t = Transitions()
    t.retarget({"a": (1, 2), "b": (3, 4), "c": (5, 6)})
    assert _settle(t) == [("start", "a"), ("start", "b"), ("start", "c")]
    t.retarget({"a": (1, 2), "b": (3,), "c": (4, 5, 6)})  # b shrinks, c grows into b's rank
    release, start = t.steps()
    assert (release, start) == (["b"], [])  # c trains on until rank 4 is free; a never stops
    t.ended("b", finished=False)
    release, start = t.steps()
    assert (release, start) == (["c"], ["b"])
    t.ended("c", finished=False)
    assert t.steps() == ([], ["c"])
    assert t.running == {"a": (1, 2), "b": (3,), "c": (4, 5, 6)}


def test_jobs_waiting_on_each_others_ranks_are_released_together() -> None:
    t = Transitions()
    t.retarget({"a": (1, 2), "b": (3, 4)})
    _settle(t)
    t.retarget({"a": (1, 3), "b": (2, 4)})
    assert t.steps() == (["a", "b"], [])


def test_a_finished_job_leaves_the_placement_and_is_never_restarted() -> None:
    t = Transitions()
    t.retarget({"a": (1, 2), "b": (3,)})
    _settle(t)
    assert t.ended("a", finished=True) == (1, 2)
    assert t.steps() == ([], [])
    assert "a" not in t.target and "a" not in t.running


def test_random_placements_never_share_a_rank_and_always_settle() -> None:
    rng = random.Random(31)
    t = Transitions()
    for _ in range(300):
        ranks = list(range(1, 13))
        rng.shuffle(ranks)
        target, at = {}, 0
        for job in rng.sample("abcdefg", rng.randint(0, 7)):
            n = rng.randint(1, 3)
            if at + n <= len(ranks):
                target[job] = tuple(sorted(ranks[at:at + n]))
                at += n
        t.retarget(target)
        pace = rng.choice([None, {j: rng.choice([0.01, 0.1, 1.0, 3.0]) for j in "abcdefg"}])
        release, start = t.steps(pace)
        busy = [r for rs in t.running.values() for r in rs]
        assert len(busy) == len(set(busy)), t.running
        for job in rng.sample(sorted(t.releasing), len(t.releasing) // 2):  # some answer late
            t.ended(job, finished=False)
        for job in rng.sample(sorted(t.unsaved), len(t.unsaved) // 2):  # some written late
            t.saved(job)
    _settle(t)
    assert t.running == t.target


def test_a_restart_takes_the_state_from_its_holder_or_waits_for_the_checkpoint() -> None:
    t = Transitions()
    t.retarget({"a": (2, 3), "b": (4, 5)})
    _settle(t)
    t.retarget({"a": (1, 2, 3), "b": (5,)})  # a grows with its leader, b shrinks off it
    assert t.steps() == (["a", "b"], [])
    t.ended("a", finished=False)
    t.ended("b", finished=False)
    assert t.steps() == ([], ["a"])  # a's new ranks hold its holder: at once, from memory
    assert t.source("a") == 2
    assert "b" in t.unsaved and t.source("b") == -1  # b's holder 4 is not among its ranks
    assert t.steps() == ([], [])  # so b waits for its checkpoint
    t.saved("b")
    assert t.steps() == ([], ["b"]) and t.source("b") == -1


def test_a_holder_given_other_work_drops_the_state_it_held() -> None:
    t = Transitions()
    t.retarget({"a": (1, 2), "b": (3,)})
    _settle(t)
    t.retarget({"b": (3,)})
    t.steps()
    t.ended("a", finished=False)  # rank 1 holds a's state
    t.retarget({"b": (1, 3)})
    assert t.steps() == (["b"], [])
    t.ended("b", finished=False)
    assert t.steps() == ([], ["b"]) and t.source("b") == 3
    assert "a" not in t.holders  # rank 1 trains b now
    t.retarget({"a": (1, 2), "b": (3,)})
    assert t.steps() == (["b"], [])
    t.ended("b", finished=False)
    t.saved("b")
    assert t.steps() == ([], ["b"])  # a waits: its state is on disk only once rank 1 says so
    t.saved("a")
    assert t.steps() == ([], ["a"]) and t.source("a") == -1


def test_a_job_growing_into_quick_stopping_ranks_stops_with_them() -> None:
    t = Transitions()
    t.retarget({"a": (1, 2), "b": (3, 4), "c": (5, 6)})
    _settle(t)
    t.retarget({"a": (1,), "b": (2, 3, 4), "c": (5,), "d": (6,)})  # b grows into a's rank 2
    # a stops quickly: b stops too
    assert t.steps({"a": 0.01, "b": 0.01, "c": 0.05}) == (["a", "b", "c"], [])
    t2 = Transitions()
    t2.retarget({"a": (1, 2), "b": (3, 4)})
    _settle(t2)
    t2.retarget({"a": (1,), "b": (2, 3, 4)})
    assert t2.steps({"a": 1.0, "b": 0.01}) == (["a"], [])  # a may take long to stop: b trains on


def test_a_growing_job_stops_with_its_donors_when_that_idles_fewer_rank_seconds() -> None:
    # b holds 2 ranks and gains 1: with a, its 2 ranks wait (0.5 - b) s for a; after a, the
    # gained rank waits b s for b; before a (a trains on until b has stopped), b's 2 ranks
    # wait 0.5 s for a
    for pace, released in (({"a": 0.5, "b": 0.5}, ["a", "b"]), ({"a": 0.5, "b": 2.0}, ["b"]),
                           ({"a": 0.5, "b": 0.4}, ["a", "b"]), ({"a": 0.5, "b": 0.3}, ["a"]),
                           ({"a": 0.5}, ["a", "b"]), ({"b": 0.3}, ["a"])):
        t = Transitions()
        t.retarget({"a": (1, 2), "b": (3, 4)})
        _settle(t)
        t.retarget({"a": (1,), "b": (2, 3, 4)})  # b grows into a's rank 2
        assert t.steps(pace) == (released, []), pace


def test_a_slow_job_growing_into_quick_ranks_stops_first_and_its_donor_trains_until_then() -> None:
    t = Transitions()
    t.retarget({"a": (1, 2, 3, 4, 5), "b": (6,), "c": (7, 8)})
    _settle(t)
    t.retarget({"a": (1, 2), "b": (3, 4, 5, 6), "c": (7, 8)})  # b (1 rank, slow) gains 3 of a's
    pace = {"a": 0.04, "b": 1.2, "c": 0.5}
    assert t.steps(pace) == (["b"], [])  # a trains on: its ranks would wait ~1.2 s for b
    assert t.steps(pace) == ([], [])  # still so while b has not stopped
    t.ended("b", finished=False)
    assert t.steps(pace) == (["a"], [])  # now a stops: b's one rank waits ~0.04 s for it
    t.ended("a", finished=False)
    assert t.steps(pace) == ([], ["a", "b"])
    assert t.running == {"a": (1, 2), "b": (3, 4, 5, 6), "c": (7, 8)}
    # a donor freeing ranks for two growers is not held back for either
    t2 = Transitions()
    t2.retarget({"a": (1, 2, 3), "b": (4,), "c": (5,)})
    _settle(t2)
    t2.retarget({"a": (1,), "b": (2, 4), "c": (3, 5)})
    assert t2.steps({"a": 0.04, "b": 1.2, "c": 1.2}) == (["a", "b", "c"], [])
