"""``draws.png``: each policy's per-draw change against the baseline, one point per draw, one
panel per metric (needs matplotlib, the ``plot`` extra). Read from the JSON that
``slaq simulate --draws K --out DIR`` writes (``DIR/draws.json``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from slaq_mpi.report.draws import DRAW_METRICS  # noqa: E402

__all__ = ["DRAWS_PLOT", "write_draws_plot"]

DRAWS_PLOT = "draws.png"


def write_draws_plot(payload: Mapping[str, Any], out: Path) -> Path:
    """Write ``out/draws.png`` from a ``--draws`` JSON payload; return its path. The points of
    a policy are spread sideways by draw so that equal values stay visible; the bar is the
    median."""
    base = payload["baseline"]
    names = [p for p in payload["policies"] if p != base]
    change = payload["change_vs_baseline_pct"]
    fig, axes = plt.subplots(1, len(DRAW_METRICS), figsize=(4 * len(DRAW_METRICS), 4), squeeze=False)
    n = len(payload["seeds"])
    spread = np.linspace(-0.25, 0.25, n) if n > 1 else np.zeros(1)
    for ax, (key, header, _) in zip(axes[0], DRAW_METRICS, strict=True):
        for i, name in enumerate(names):
            vals = np.array([np.nan if v is None else v for v in change[name][key]], dtype=np.float64)
            ax.scatter(i + spread, vals, s=14, alpha=0.7)
            if np.isfinite(vals).any():
                med = float(np.nanmedian(vals))
                ax.plot([i - 0.35, i + 0.35], [med, med], color="black", linewidth=1.5)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(names)), names)
        ax.set_title(header)
        ax.set_ylabel(f"change against {base} per draw, %")
    fig.suptitle(f"{n} workload draws (seeds {payload['seeds'][0]}-{payload['seeds'][-1]})")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / DRAWS_PLOT
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
