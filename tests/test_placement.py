"""Sticky placement of cores onto worker ranks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slaq_mpi.runtime.placement import place

WORKERS = list(range(1, 8))


def test_unchanged_allocation_moves_nothing() -> None:
    cur = {"a": (1, 2, 3), "b": (4, 5), "c": (6, 7)}
    ranks, moved = place(cur, {"a": 3, "b": 2, "c": 2}, WORKERS)
    assert ranks == cur and moved == set()


def test_shrink_keeps_lowest_ranks_and_grow_keeps_all() -> None:
    cur = {"a": (1, 2, 3, 4), "b": (5,)}
    ranks, moved = place(cur, {"a": 2, "b": 3}, WORKERS)
    assert ranks["a"] == (1, 2)
    assert set(cur["b"]) <= set(ranks["b"]) and len(ranks["b"]) == 3
    assert moved == {"a", "b"}


def test_new_and_finished_jobs_count_as_moved() -> None:
    ranks, moved = place({"a": (1, 2)}, {"b": 2}, WORKERS)
    assert "a" not in ranks and len(ranks["b"]) == 2
    assert moved == {"a", "b"}


_COUNTS = st.lists(st.integers(0, 4), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(_COUNTS, _COUNTS)
def test_placement_is_a_partition_and_sticky(before: list[int], after: list[int]) -> None:
    names = [f"j{i}" for i in range(max(len(before), len(after)))]
    a0 = {n: c for n, c in zip(names, before, strict=False) if c}
    a1 = {n: c for n, c in zip(names, after, strict=False) if c}
    if sum(a0.values()) > len(WORKERS) or sum(a1.values()) > len(WORKERS):
        return
    cur, _ = place({}, a0, WORKERS)
    ranks, moved = place(cur, a1, WORKERS)
    flat = [r for rs in ranks.values() for r in rs]
    assert len(flat) == len(set(flat)) and set(flat) <= set(WORKERS)
    assert {n: len(r) for n, r in ranks.items()} == a1
    for n, rs in ranks.items():
        if n in cur and len(rs) >= len(cur[n]):
            assert set(cur[n]) <= set(rs)  # a job that does not shrink keeps its ranks
        if n not in moved:
            assert rs == cur[n]
