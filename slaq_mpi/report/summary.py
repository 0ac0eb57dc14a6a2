"""The table of a run's scalar metrics, and its rows for one run or a comparison of runs.

``SUMMARY_METRICS`` maps a metric's name to a function of ``(run, l_star)``; other modules add
entries to it. :func:`summarize_runs` evaluates runs compared together on the same L* per job
and the same window (:func:`~slaq_mpi.report.evaluation.comparison_window`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from slaq_mpi.report.evaluation import (
    RunData,
    average_normalized_loss,
    common_l_star,
    comparison_window,
    completion_times,
    makespan,
    mean_active_jobs,
    mean_core_shares,
    normalized_loss_job_seconds,
    observed,
    reduction_times,
)
from slaq_mpi.report.fairness import power_mean, rhos, speedups, total_utility

__all__ = ["COUNT_METRICS", "SUMMARY_METRICS", "MetricFn", "json_value", "summarize", "summarize_runs"]


_MEMOS: list[dict[Any, Any]] = []


def _per_run(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(run, l_star, *args)`` computed once per run while :func:`summarize` fills a row:
    the table asks for the same speed-ups, rhos and reduction times several times (min, mean,
    ...). :func:`summarize` forgets the results when its row is done."""
    memo: dict[Any, Any] = {}
    _MEMOS.append(memo)

    def call(run: RunData, l_star: Mapping[str, float], *args: Any) -> Any:
        key = (id(run), id(l_star), args)
        hit = memo.get(key)
        if hit is None or hit[0] is not run or hit[1] is not l_star:  # held: ids not reused
            hit = memo[key] = (run, l_star, fn(run, l_star, *args))
        return hit[2]

    return call


_speedups = _per_run(speedups)
_rhos = _per_run(lambda run, _ls: rhos(run))
_reduction_times = _per_run(reduction_times)
_mean_core_shares = _per_run(mean_core_shares)


def _nanmean(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.mean()) if len(a) else math.nan


def _nanmedian(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(np.median(a)) if len(a) else math.nan


MetricFn = Callable[[RunData, Mapping[str, float]], float]


def _mean_share(group: int) -> MetricFn:
    """The time-weighted mean of a loss group's core share (:func:`mean_core_shares`)."""
    def share(run: RunData, l_star: Mapping[str, float]) -> float:
        return float(_mean_core_shares(run, l_star)[group])

    return share

def _nanmax(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.max()) if len(a) else math.nan


def _nanmin(a: np.ndarray) -> float:
    a = a[~np.isnan(a)]
    return float(a.min()) if len(a) else math.nan


#: Scalar metrics of a run, in report order: name -> f(run, l_star). Extend by adding entries.
SUMMARY_METRICS: dict[str, MetricFn] = {
    "avg_normalized_loss": average_normalized_loss,
    "normalized_loss_job_s": normalized_loss_job_seconds,
    "mean_active_jobs": mean_active_jobs,
    "mean_time_to_90": lambda r, ls: _nanmean(_reduction_times(r, ls, 90)),
    "median_time_to_90": lambda r, ls: _nanmedian(_reduction_times(r, ls, 90)),
    "mean_time_to_95": lambda r, ls: _nanmean(_reduction_times(r, ls, 95)),
    "median_time_to_95": lambda r, ls: _nanmedian(_reduction_times(r, ls, 95)),
    "reached_90": lambda r, ls: float(np.sum(~np.isnan(_reduction_times(r, ls, 90)))),
    "reached_95": lambda r, ls: float(np.sum(~np.isnan(_reduction_times(r, ls, 95)))),
    "median_completion": lambda r, ls: _nanmedian(completion_times(r)),
    "mean_completion": lambda r, ls: _nanmean(completion_times(r)),
    "makespan": lambda r, ls: makespan(r),
    "decision_ms": lambda r, ls: _nanmean(np.asarray(r.decision_ms, dtype=np.float64)),
    "jobs": lambda r, ls: float(len(r.jobs)),
    "core_share_high": _mean_share(0),
    "core_share_medium": _mean_share(1),
    "core_share_low": _mean_share(2),
    "total_utility": lambda r, ls: total_utility(r),
    "max_rho": lambda r, ls: _nanmax(_rhos(r, ls)),
    "mean_rho": lambda r, ls: _nanmean(_rhos(r, ls)),
    "min_speedup": lambda r, ls: _nanmin(_speedups(r, ls)),
    "mean_speedup": lambda r, ls: _nanmean(_speedups(r, ls)),
    "p_mean_speedup": lambda r, ls: power_mean(_speedups(r, ls)),
}

#: Metrics that count jobs: whole numbers in JSON output.
COUNT_METRICS = frozenset({"jobs", "reached_90", "reached_95"})


def json_value(name: str, value: float | None) -> float | int | None:
    """A metric as JSON output shows it: ``None`` when not finite, counts as integers."""
    if value is None or not math.isfinite(value):
        return None
    return int(value) if name in COUNT_METRICS else float(value)


def summarize(run: RunData, l_star: Mapping[str, float],
              metrics: Mapping[str, MetricFn] | None = None) -> dict[str, float]:
    """Every metric of ``metrics`` (default :data:`SUMMARY_METRICS`) for one run."""
    table = SUMMARY_METRICS if metrics is None else metrics
    run = observed(run)
    try:
        out = {name: float(fn(run, l_star)) for name, fn in table.items()}
    finally:
        for memo in _MEMOS:
            memo.clear()
    return out


def summarize_runs(runs: Mapping[str, RunData], l_star: Mapping[str, float] | None = None,
                   window: tuple[float, float] | None = None,
                   metrics: Mapping[str, MetricFn] | None = None,
                   ) -> tuple[dict[str, dict[str, float]], tuple[float, float] | None]:
    """:func:`summarize` every run of a comparison, on the same L* and the same window.

    ``l_star`` defaults to :func:`common_l_star` of the runs; ``window`` (of the average
    normalized loss) to :func:`comparison_window` when there are two runs or more, else each
    run's own. Returns the rows by label and the window used (None: each run's own).
    """
    ls = common_l_star(runs.values()) if l_star is None else l_star
    if window is None and len(runs) > 1:
        window = comparison_window(runs.values())
    table = dict(SUMMARY_METRICS if metrics is None else metrics)
    if window is not None and window[1] > window[0]:
        for key, fn in (("avg_normalized_loss", average_normalized_loss),
                        ("normalized_loss_job_s", normalized_loss_job_seconds),
                        ("mean_active_jobs", mean_active_jobs)):
            table[key] = partial(fn, window=window)
    else:
        window = None
    return {label: summarize(run, ls, table) for label, run in runs.items()}, window
