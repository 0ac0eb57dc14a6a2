"""``slaq status`` output: a :class:`~slaq_mpi.report.status.StatusReport` as a text table
(:func:`format_status`) or as one JSON object (:func:`status_json`)."""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from slaq_mpi._text import count
from slaq_mpi.report.status import REDUCTION_PERCENT, StatusReport, StatusRow

__all__ = ["format_status", "silent_line", "status_json"]

_COUNT_ORDER = ("running", "waiting", "done", "failed", "cancelled")
_REASON_WIDTH = 60


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if math.isfinite(t) else "-"


def _num(fmt: str, x: float) -> str:
    return fmt.format(x) if math.isfinite(x) else "-"


def _counts(report: StatusReport) -> str:
    seen = Counter(r.job.status for r in report.rows)
    order = [s for s in _COUNT_ORDER if seen[s]] + sorted(s for s in seen if s not in _COUNT_ORDER)
    parts = [f"{seen[s]} {s}" for s in order]
    return f"{count(len(report.rows), 'job')}" + (f": {', '.join(parts)}" if parts else "")


def silent_line(report: StatusReport) -> str:
    """The line saying rank 0 has been silent too long (empty when it has not)."""
    if not math.isfinite(report.silent_seconds):
        return ""
    st = report.status
    return (f"rank 0 has been silent for {report.silent_seconds:.0f} s ({report.source} last "
            f"written at {_clock(st.updated)}; a live run writes it at every decision, at least "
            f"every {st.epoch_seconds:g} s): the run may have died; check its Slurm log or squeue")


def _header(report: StatusReport) -> list[str]:
    st = report.status
    flags = "".join((", open" if st.open else "", ", draining" if st.draining else ""))
    lines = [f"{st.name}: {st.state}{flags} (policy {st.policy}, {count(st.workers, 'worker')}, "
             f"epoch {st.epoch_seconds:g} s); {_counts(report)}"]
    util = _num("{:.1%}", st.utilization)
    if math.isfinite(st.last_decision):
        at = st.updated - (st.now - st.last_decision)
        decided = f"last decision at {st.last_decision:.1f} s of the run ({_clock(at)})"
    else:
        decided = "no decision yet"
    lines.append(f"utilization {util}; {decided}; {st.now:.1f} s of the run at the last write "
                 f"({_clock(st.updated)}, {max(report.checked - st.updated, 0.0):.0f} s ago)")
    if report.source != "status.json":
        lines.append(f"note: {report.run_dir} has no status.json (a run from before it, a "
                     f"simulation, or a run not started): shown from metrics.h5 as last saved")
    silent = silent_line(report)
    return lines + ([silent] if silent else [])


def _cells(row: StatusRow, reasons: bool) -> list[str]:
    job = row.job
    if row.predicted_seconds == 0.0:
        predicted = "reached"
    else:
        predicted = _num("{:.1f}", row.predicted_seconds)
    cells = [job.name, job.status, str(job.cores), str(job.iterations),
             _num("{:.3g}", row.loss_ratio), _num("{:.1f}", row.running_seconds), predicted,
             f"{job.weight:g}"]
    if reasons:
        text = job.reason.replace("\n", " ")
        cells.append(text if len(text) <= _REASON_WIDTH else text[:_REASON_WIDTH - 3] + "...")
    return cells


def format_status(report: StatusReport, max_rows: int | None = None) -> str:
    """The run's header lines and one table row per job; with ``max_rows``, at most that many
    rows (running and waiting jobs come first) and a line counting the rest."""
    rows = report.rows if max_rows is None else report.rows[:max(max_rows, 0)]
    reasons = any(r.job.reason for r in rows)
    head = ["job", "status", "cores", "iters", "loss/first", "running s",
            f"t{REDUCTION_PERCENT:g} in s", "weight"] + (["reason"] if reasons else [])
    body = [_cells(r, reasons) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    left = {0, 1, 8}  # text columns

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = _header(report) + [line(head)] + [line(b) for b in body]
    hidden = report.rows[len(rows):]
    if hidden:
        seen = Counter(r.job.status for r in hidden)
        out.append(f"... and {count(len(hidden), 'more job')} "
                   f"({', '.join(f'{n} {s}' for s, n in seen.items())}); `slaq status` without "
                   "--watch lists every job")
    return "\n".join(out)


def _json_number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def status_json(report: StatusReport) -> dict[str, Any]:
    """The report as one JSON-ready object: the status file's keys (``null`` for NaN), with
    per job ``loss_ratio``, ``running_seconds`` and ``predicted_seconds`` (to
    ``reduction_percent`` %), and ``source``, ``checked`` and ``silent_seconds``."""
    st = report.status
    jobs = [{
        "name": r.job.name, "algorithm": r.job.algorithm, "status": r.job.status,
        "weight": r.job.weight, "cores": r.job.cores, "iterations": r.job.iterations,
        "first_loss": _json_number(r.job.first_loss), "last_loss": _json_number(r.job.last_loss),
        "arrival": _json_number(r.job.arrival), "start": _json_number(r.job.start),
        "end": _json_number(r.job.end), "reason": r.job.reason,
        "max_iterations": r.job.max_iterations, "loss_ratio": _json_number(r.loss_ratio),
        "running_seconds": _json_number(r.running_seconds),
        "predicted_seconds": _json_number(r.predicted_seconds),
    } for r in report.rows]
    return {
        "run_dir": str(report.run_dir), "source": report.source, "checked": report.checked,
        "silent_seconds": _json_number(report.silent_seconds),
        "name": st.name, "policy": st.policy, "workers": st.workers,
        "epoch_seconds": st.epoch_seconds, "open": st.open, "draining": st.draining,
        "state": st.state, "updated": st.updated, "now": _json_number(st.now),
        "last_decision": _json_number(st.last_decision),
        "utilization": _json_number(st.utilization), "reduction_percent": REDUCTION_PERCENT,
        "jobs": jobs,
    }
