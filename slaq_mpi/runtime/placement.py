"""Mapping cores per job to concrete worker ranks, moving as few ranks as possible."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def place(
    current: Mapping[str, Sequence[int]],
    alloc: Mapping[str, int],
    workers: Sequence[int],
) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Sticky placement.

    Args:
        current: ranks each job holds now.
        alloc: cores each job should hold next (jobs absent or 0 hold none).
        workers: every worker rank.

    Returns:
        The ranks of every job with cores next epoch, and the set of jobs whose rank set
        changes (these must checkpoint and re-split; all others carry on in memory).

    A job keeps its lowest-numbered ranks when it shrinks and keeps all of them when it
    grows, taking the lowest free ranks (next to its own where possible).
    """
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
    moved = {
        job for job in set(current) | set(result)
        if tuple(sorted(current.get(job, ()))) != result.get(job, ())
    }
    return result, moved
