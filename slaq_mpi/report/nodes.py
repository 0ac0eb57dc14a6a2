"""How many nodes each job of a run on several nodes spanned (``slaq report``'s node lines)."""

from __future__ import annotations

from collections.abc import Mapping

from slaq_mpi.storage.metrics_schema import RunData

__all__ = ["node_span_lines", "node_spans"]


def node_spans(run: RunData) -> dict[str, tuple[int, int, list[str]]]:
    """Per job of ``run`` placed on ranks of several hosts: (fewest nodes, most nodes, every
    host it ran on) over its placements; empty for a run on one node."""
    spans: dict[str, tuple[int, int, list[str]]] = {}
    for p in run.placements or []:
        job, hosts = str(p["job"]), [str(h) for h in p["hosts"]]
        n = len(set(hosts))
        lo, hi, seen = spans.get(job, (n, n, []))
        spans[job] = (min(lo, n), max(hi, n), sorted(set(seen) | set(hosts)))
    return spans


def node_span_lines(runs: Mapping[str, RunData]) -> list[str]:
    """One line per run on several nodes: each job's node span (``job:N`` or ``job:LO-HI``
    nodes over its placements) and the hosts of the run."""
    lines = []
    for label, run in runs.items():
        spans = node_spans(run)
        if not spans:
            continue
        hosts = sorted({h for _lo, _hi, hs in spans.values() for h in hs})
        parts = [f"{job}:{lo}" if lo == hi else f"{job}:{lo}-{hi}"
                 for job, (lo, hi, _hs) in sorted(spans.items())]
        lines.append(f"nodes per job ({label}, hosts {', '.join(hosts)}): {' '.join(parts)}")
    return lines
