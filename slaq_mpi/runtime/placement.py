"""Mapping cores per job to concrete worker ranks, moving as few ranks as possible and, when
the ranks are on several nodes, spanning as few nodes as possible."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["assignments", "free_per_host", "place", "span"]


def place(
    current: Mapping[str, Sequence[int]],
    alloc: Mapping[str, int],
    workers: Sequence[int],
    hosts: Mapping[int, str] | None = None,
) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Sticky placement.

    Args:
        current: ranks each job holds now.
        alloc: cores each job should hold next (jobs absent or 0 hold none).
        workers: every worker rank.
        hosts: the host of each worker rank; None (or one host for all): every rank is on one
            node.

    Returns:
        The ranks of every job with cores next epoch, and the set of jobs whose rank set
        changes (these must checkpoint and re-split; all others carry on in memory).

    A job whose core count does not change keeps its ranks. On one node, a job keeps its
    lowest-numbered ranks when it shrinks and keeps all of them when it grows, taking the
    lowest free ranks (next to its own where possible). On several nodes, a job that changes
    is moved anyway, so it is placed on as few nodes as it can be: on one node with room for
    all its cores if there is one (its own node first, else the fullest that fits), else on
    its own nodes first and then on the nodes with the most free ranks.
    """
    if hosts is None or len({hosts[r] for r in workers}) <= 1:
        return _place_on_one_node(current, alloc, workers)
    return _place_on_nodes(current, alloc, workers, hosts)


def _moved(current: Mapping[str, Sequence[int]], result: Mapping[str, tuple[int, ...]]) -> set[str]:
    return {job for job in set(current) | set(result)
            if tuple(sorted(current.get(job, ()))) != result.get(job, ())}


def _place_on_one_node(
    current: Mapping[str, Sequence[int]], alloc: Mapping[str, int], workers: Sequence[int],
) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    nxt: dict[str, list[int]] = {}
    for job, ranks in current.items():
        want = alloc.get(job, 0)
        if want > 0:
            nxt[job] = sorted(ranks)[:want]
    used = {r for ranks in nxt.values() for r in ranks}
    free = sorted(r for r in workers if r not in used)
    for job in sorted(alloc, key=lambda j: (-(alloc[j] - len(nxt.get(j, []))), j)):
        need = alloc[job] - len(nxt.get(job, []))
        if need <= 0:
            continue
        have = nxt.setdefault(job, [])
        anchor = min(have) if have else (free[0] if free else 0)
        free.sort(key=lambda r: (abs(r - anchor), r))
        take, free = free[:need], free[need:]
        if len(take) < need:
            raise ValueError(f"allocation asks for more cores than the {len(workers)} workers")
        have.extend(take)
    result = {job: tuple(sorted(r)) for job, r in nxt.items() if r}
    return result, _moved(current, result)


def _place_on_nodes(
    current: Mapping[str, Sequence[int]], alloc: Mapping[str, int], workers: Sequence[int],
    hosts: Mapping[int, str],
) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    if sum(max(0, c) for c in alloc.values()) > len(workers):
        raise ValueError(f"allocation asks for more cores than the {len(workers)} workers")
    result: dict[str, tuple[int, ...]] = {}
    for job, ranks in current.items():  # unchanged jobs stay where they are
        if alloc.get(job, 0) == len(ranks) and ranks:
            result[job] = tuple(sorted(ranks))
    used = {r for ranks in result.values() for r in ranks}
    free: dict[str, list[int]] = {}
    for r in sorted(workers):
        if r not in used:
            free.setdefault(hosts[r], []).append(r)
    order = sorted((j for j, c in alloc.items() if c > 0 and j not in result),
                   key=lambda j: (-alloc[j], j))
    for job in order:
        result[job] = _take(alloc[job], free, set(current.get(job, ())), hosts)
    return result, _moved(current, result)


def _take(need: int, free: dict[str, list[int]], mine: set[int],
          hosts: Mapping[int, str]) -> tuple[int, ...]:
    """``need`` ranks from ``free`` (host -> free ranks, lowest first; taken ones are removed),
    on as few hosts as possible, preferring the job's own ranks ``mine`` and their hosts."""
    own = Counter(hosts[r] for r in mine)
    fits = [h for h, rs in free.items() if len(rs) >= need]
    if fits:
        # one node: the one with most of the job's ranks, else the fullest that fits
        chosen = [min(fits, key=lambda h: (-own[h], len(free[h]), h))]
    else:
        chosen = sorted((h for h in free if free[h]), key=lambda h: (-own[h], -len(free[h]), h))
    taken: list[int] = []
    for h in chosen:
        k = min(need - len(taken), len(free[h]))
        ranks = sorted(free[h], key=lambda r: (r not in mine, r))
        taken += ranks[:k]
        free[h] = sorted(ranks[k:])
        if len(taken) == need:
            break
    return tuple(sorted(taken))


def span(ranks: Sequence[int], hosts: Mapping[int, str]) -> int:
    """How many nodes ``ranks`` are on."""
    return len({hosts.get(r, "?") for r in ranks})


def free_per_host(placement: Mapping[str, Sequence[int]], workers: Sequence[int],
                  hosts: Mapping[int, str]) -> dict[str, int]:
    """The worker ranks no job holds in ``placement``, counted per host."""
    used = {r for ranks in placement.values() for r in ranks}
    out = {hosts.get(r, "?"): 0 for r in workers}
    for r in workers:
        if r not in used:
            out[hosts.get(r, "?")] += 1
    return out


def assignments(t: float, placement: Mapping[str, Sequence[int]], moved: set[str],
                workers: Sequence[int], hosts: Mapping[int, str]) -> list[dict[str, Any]]:
    """One entry per job of ``moved`` that ``placement`` gives ranks: when (``t``), its ranks,
    their hosts and the free worker ranks per host beside it (what metrics.h5 keeps)."""
    free = free_per_host(placement, workers, hosts)
    return [{"time": round(t, 6), "job": job, "ranks": list(placement[job]),
             "hosts": [hosts.get(r, "?") for r in placement[job]], "free": free}
            for job in sorted(moved) if job in placement]
