"""PNG figures like the paper's (needs matplotlib, the ``plot`` extra).

* ``avg_normalized_loss.png``: average normalized loss of the active jobs over time, one line
  per run (the paper's Figure 4);
* ``time_to_reduction.png``: mean time to reach each loss-reduction percentage, one line per
  run (Figure 5);
* ``core_share.png``: share of the cores held by the high / medium / low-loss jobs over time,
  one panel per run with three series (Figure 3);
* ``fairness.png``: every job's finish-time fairness ``rho`` and measured speedup, sorted, one
  line per run in each of two panels (docs/policies.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from slaq_mpi.report.evaluation import (  # noqa: E402
    LOSS_GROUPS,
    RunData,
    average_core_shares,
    avg_normalized_loss_series,
    core_share_by_loss_group,
    evaluation_grid,
    reduction_times,
)
from slaq_mpi.report.fairness import rhos, speedups  # noqa: E402

__all__ = ["REDUCTION_PERCENTS", "write_plots"]

REDUCTION_PERCENTS = (10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99)


def _series_count(fig: plt.Figure) -> int:
    return sum(len(ax.lines) + len(ax.collections) for ax in fig.axes)


def _window(runs: Mapping[str, RunData]) -> tuple[float, float]:
    lo = min((j.arrival for r in runs.values() for j in r.jobs.values()), default=0.0)
    grids = [evaluation_grid(r) for r in runs.values()]
    hi = max((float(g[-1]) for g in grids if len(g)), default=lo + 1.0)
    return lo, max(hi, lo + 1.0)


def write_plots(runs: Mapping[str, RunData], l_star: Mapping[str, float],
                out: str | Path) -> dict[Path, int]:
    """Write the four figures into ``out``; returns each file with its number of series."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[Path, int] = {}
    lo, hi = _window(runs)
    step = max(min(r.epoch_seconds for r in runs.values()) / 4.0, (hi - lo) / 4000.0)
    grid = np.arange(lo, hi, step)

    fig, ax = plt.subplots(figsize=(9, 4))
    for label, run in runs.items():
        ax.plot(grid, avg_normalized_loss_series(run, l_star, grid), label=label, linewidth=0.8)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("average normalized loss of active jobs")
    ax.set_ylim(0, 1.05)
    ax.legend()
    written[_save(fig, out / "avg_normalized_loss.png")] = _series_count(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    pct = np.array(REDUCTION_PERCENTS, dtype=float)
    for label, run in runs.items():
        means = []
        for p in pct:
            t = reduction_times(run, l_star, p)
            t = t[~np.isnan(t)]
            means.append(float(t.mean()) if len(t) else np.nan)
        ax.plot(pct, means, marker="o", label=label)
    ax.set_xlabel("loss reduction (%)")
    ax.set_ylabel("mean time to reach it (s)")
    ax.legend()
    written[_save(fig, out / "time_to_reduction.png")] = _series_count(fig)

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.6 * len(runs)), sharex=True, squeeze=False)
    for ax, (label, run) in zip(axes[:, 0], runs.items(), strict=True):
        times, shares = core_share_by_loss_group(run, l_star)
        ok = ~np.isnan(shares[:, 0])
        ax.stackplot(times[ok], shares[ok].T * 100.0, labels=[f"{g} loss" for g in LOSS_GROUPS])
        mean = average_core_shares(run, times, shares) * 100.0  # time-weighted, as the report's table
        ax.set_title(f"{label}: high {mean[0]:.0f}%, medium {mean[1]:.0f}%, low {mean[2]:.0f}% of cores",
                     fontsize=9)
        ax.set_ylabel("% of cores")
        ax.set_ylim(0, 100)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("time (s)")
    written[_save(fig, out / "core_share.png")] = _series_count(fig)

    fig, (ax_rho, ax_speed) = plt.subplots(1, 2, figsize=(10, 4))
    for label, run in runs.items():
        for ax, values in ((ax_rho, rhos(run)), (ax_speed, speedups(run, l_star))):
            v = np.sort(values[~np.isnan(values)])
            ax.plot(np.arange(1, len(v) + 1), v, marker=".", label=label)
    ax_rho.set_ylabel("finish-time fairness rho (lower is fairer)")
    ax_speed.set_ylabel("speedup over the equal share")
    for ax in (ax_rho, ax_speed):
        ax.set_xlabel("jobs, sorted")
        ax.axhline(1.0, color="grey", linewidth=0.6)
    ax_rho.legend(fontsize=8)
    written[_save(fig, out / "fairness.png")] = _series_count(fig)
    return written


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
