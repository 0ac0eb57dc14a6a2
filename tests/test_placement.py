"""Sticky placement of cores onto worker ranks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slaq_mpi.runtime.placement import assignments, free_per_host, place, span

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


# --- several nodes: rank 0 on n1 beside 3 workers, 4 workers on each of n2 and n3 -------------

MANY = list(range(1, 12))
HOSTS = {r: "n1" if r <= 3 else "n2" if r <= 7 else "n3" for r in MANY}
PER_NODE = 4


def _on(ranks: tuple[int, ...], host: str) -> int:
    return sum(HOSTS[r] == host for r in ranks)


def test_a_job_that_fits_on_one_node_gets_one_node() -> None:
    ranks, _ = place({}, {"a": 4, "b": 3, "c": 4}, MANY, HOSTS)
    assert all(span(r, HOSTS) == 1 for r in ranks.values())


def test_a_growing_job_takes_free_ranks_on_its_own_node_first() -> None:
    cur = {"a": (4, 5), "b": (8, 9, 10)}
    ranks, moved = place(cur, {"a": 4, "b": 3}, MANY, HOSTS)
    assert ranks["a"] == (4, 5, 6, 7) and moved == {"a"}


def test_a_job_moves_whole_to_a_node_with_room_instead_of_adding_one() -> None:
    cur = {"a": (1, 2), "b": (3,), "c": (8, 9, 10, 11)}
    ranks, _ = place(cur, {"a": 3, "b": 1, "c": 4}, MANY, HOSTS)
    assert span(ranks["a"], HOSTS) == 1 and set(ranks["a"]) <= {4, 5, 6, 7}


def test_one_host_keeps_the_single_node_placement() -> None:
    same = dict.fromkeys(WORKERS, "n1")
    cur = {"a": (1, 2, 3, 4), "b": (5,)}
    assert place(cur, {"a": 2, "b": 3}, WORKERS, same) == place(cur, {"a": 2, "b": 3}, WORKERS)


_MANY_COUNTS = st.lists(st.integers(0, 6), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(_MANY_COUNTS, _MANY_COUNTS)
def test_never_more_nodes_than_needed_and_stable(before: list[int], after: list[int]) -> None:
    names = [f"j{i}" for i in range(max(len(before), len(after)))]
    a0 = {n: c for n, c in zip(names, before, strict=False) if c}
    a1 = {n: c for n, c in zip(names, after, strict=False) if c}
    if sum(a0.values()) > len(MANY) or sum(a1.values()) > len(MANY):
        return
    cur, _ = place({}, a0, MANY, HOSTS)
    again, moved0 = place(cur, a0, MANY, HOSTS)
    assert again == cur and moved0 == set()  # stable under no change
    ranks, moved = place(cur, a1, MANY, HOSTS)
    flat = [r for rs in ranks.values() for r in rs]
    assert len(flat) == len(set(flat)) and set(flat) <= set(MANY)
    assert {n: len(r) for n, r in ranks.items()} == a1
    free = free_per_host(ranks, MANY, HOSTS)
    for placed in (cur, ranks):
        for n, rs in placed.items():
            if placed is ranks and n not in moved:
                assert rs == cur[n]  # a job whose ranks do not change carries on
                continue
            if len(rs) <= PER_NODE and span(rs, HOSTS) > 1 and placed is ranks:
                # no node could have held the whole job: its free ranks plus the job's there
                assert all(free[h] + _on(rs, h) < len(rs) for h in free), (n, rs, free)
    for n in moved & set(ranks):
        entry = next(e for e in assignments(0.0, ranks, moved, MANY, HOSTS) if e["job"] == n)
        assert entry["hosts"] == [HOSTS[r] for r in ranks[n]]
