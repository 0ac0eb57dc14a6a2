"""An experiment over several workload draws: every policy on the workloads of seeds
``first .. first + count - 1``, the draws run in parallel processes.

A draw is the experiment with only its ``seed`` changed: the seed draws the workload (arrival
times, job mix, sizes, curves) and the simulator's noise. Each draw is summarized as
``slaq simulate`` summarizes one run (:func:`~slaq_mpi.report.summary.summarize_runs`: the same
L* and the common window of its policies), with the workload's bound
(:func:`~slaq_mpi.sim.bound.bound_metrics`). The result of a draw depends on its seed only, so
the draws are the same whatever the number of processes.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from slaq_mpi.report.evaluation import common_l_star, comparison_window
from slaq_mpi.report.summary import summarize_runs
from slaq_mpi.sim.bound import bound_metrics
from slaq_mpi.sim.run import run_workload

__all__ = ["Draw", "DrawSet", "default_jobs", "run_draw", "run_draws"]


@dataclass(frozen=True)
class Draw:
    """One workload draw: per policy its summary row, and the workload's bound."""

    seed: int
    rows: dict[str, dict[str, float]]
    bound: dict[str, float]
    window: tuple[float, float] | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DrawSet:
    """Every draw of an experiment, in seed order; ``policies[0]`` is the baseline."""

    policies: list[str]
    draws: list[Draw]

    @property
    def seeds(self) -> list[int]:
        """The seeds of the draws, in order."""
        return [d.seed for d in self.draws]

    def values(self, policy: str, metric: str) -> np.ndarray:
        """``metric`` of ``policy`` on each draw (NaN where it is not defined); the policy
        ``bound`` gives the bound's metrics."""
        return np.array([(d.bound if policy == "bound" else d.rows[policy]).get(metric, math.nan)
                         for d in self.draws], dtype=np.float64)


def default_jobs() -> int:
    """The number of processes used by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run_draw(spec: Any, policies: Sequence[str], seed: int, max_epochs: int | None = None) -> Draw:
    """Every policy of ``policies`` on the workload of ``spec`` drawn with ``seed``."""
    notes: list[str] = []
    work, runs = run_workload(replace(spec, seed=seed), policies, max_epochs=max_epochs,
                              progress=lambda line: notes.append(line) if line.startswith("note:")
                              else None)
    rows, window = summarize_runs(runs)
    bound = bound_metrics(work.jobs, work.capacity, common_l_star(runs.values()),
                          comparison_window(runs.values()))
    return Draw(seed, rows, bound, window, tuple(notes))


def run_draws(spec: Any, policies: Sequence[str], first: int, count: int, jobs: int | None = None,
              max_epochs: int | None = None,
              progress: Callable[[str], None] | None = None) -> DrawSet:
    """:func:`run_draw` for seeds ``first .. first + count - 1`` on ``jobs`` processes (default
    :func:`default_jobs`; 1: in this process); a progress line as each draw ends."""
    seeds = list(range(first, first + count))
    workers = min(jobs or default_jobs(), count)
    start = time.perf_counter()
    done: dict[int, Draw] = {}

    def _report(draw: Draw) -> None:
        done[draw.seed] = draw
        if progress is not None:
            base = policies[0]
            t90 = draw.rows[base].get("mean_time_to_90", math.nan)
            progress(f"draw {len(done)}/{count} (seed {draw.seed}) done after "
                     f"{time.perf_counter() - start:.0f} s: {base} mean t90 {t90:.1f} s")

    if progress is not None:
        progress(f"simulating {', '.join(policies)} on {count} workload draws "
                 f"(seeds {seeds[0]}-{seeds[-1]}) in {workers} process{'es' if workers > 1 else ''}")
    if workers <= 1:
        for seed in seeds:
            _report(run_draw(spec, policies, seed, max_epochs))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(run_draw, spec, list(policies), s, max_epochs) for s in seeds]
            for fut in as_completed(futures):
                _report(fut.result())
    return DrawSet(list(policies), [done[s] for s in seeds])
