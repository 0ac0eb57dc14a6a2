"""Accuracy of SLAQ's loss prediction on loss curves recorded from every built-in solver.

For every algorithm in ``jobs.ALGORITHMS`` this script generates a synthetic dataset
(``slaq_mpi.data.datasets``; the kind comes from the solver's ``dataset_kind`` attribute, else
``classification`` for labelled solvers and ``blobs`` otherwise), runs the solver serially
(``jobs.base.SerialComm``) for ``--record`` iterations, then keeps running to find the
converged loss ``L*``. From every prefix of the recorded curve that is still converging
(remaining reduction at least ``--active`` of the total) it predicts the loss 10 iterations
ahead with :func:`slaq_mpi.brain.predict.fit_curves` and compares it with the recorded loss.

Prints one JSON line last: ``median_rel_error``, ``p90_rel_error`` (|pred - actual| / |actual|),
``median_norm_error`` (|predicted drop - actual drop| / (L_0 - L*)), ``per_solver``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs import ALGORITHMS, SerialComm, load_solver  # noqa: E402
from slaq_mpi.brain.predict import fit_curves  # noqa: E402
from slaq_mpi.data import (
    datasets,
    generators,  # noqa: E402
)

AHEAD = 10


def dataset_kind(cls: type) -> str:
    """The synthetic dataset kind a solver class wants."""
    kind = getattr(cls, "dataset_kind", None)
    if isinstance(kind, str):
        return kind
    return "classification" if getattr(cls, "needs_labels", True) else "blobs"


def record_curve(
    algorithm: str, seed: int, data_dir: Path, rows: int, record: int, converge: int, budget: float
) -> tuple[np.ndarray, float, str]:
    """Run one solver; return its first ``record`` losses, the converged loss and its class."""
    cls = load_solver(algorithm)
    kind = dataset_kind(cls)
    if kind not in generators.GENERATORS:
        raise LookupError(f"no synthetic generator for dataset kind {kind!r}")
    spec = datasets.DatasetSpec(generator=kind, params={"rows": rows, "features": 20, "seed": seed})
    path = data_dir / f"{algorithm}-{seed}.h5"
    generators.generate(spec, path, seed)
    shard = datasets.read_shard(path, 0, 1)
    if not getattr(cls, "needs_labels", True):
        shard.y = None
    solver = cls(SerialComm(), shard, {}, seed)
    losses: list[float] = []
    start = time.perf_counter()
    for it in range(converge):
        losses.append(float(solver.step()))
        if it >= record and time.perf_counter() - start > budget:
            break
        if it > record and abs(losses[-2] - losses[-1]) <= 1e-13 * max(abs(losses[-1]), 1e-300):
            break
    if len(losses) < record:
        raise RuntimeError(f"only {len(losses)} iterations within the time budget")
    arr = np.asarray(losses, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise FloatingPointError("non-finite loss recorded")
    return arr[:record], float(np.min(arr)), str(getattr(cls, "convergence", "unknown"))


def evaluate(
    curves: list[tuple[np.ndarray, float]], conv: str, active: float, min_prefix: int
) -> dict[str, Any]:
    """Prediction errors over every active prefix of ``curves``."""
    histories: list[np.ndarray] = []
    targets, lasts, totals = [], [], []
    for curve, l_star in curves:
        total = float(curve[0] - l_star)
        if total <= 0:
            continue
        for p in range(min_prefix, len(curve) - AHEAD + 1):
            if curve[p - 1] - l_star < active * total:
                break
            histories.append(curve[:p])
            targets.append(curve[p - 1 + AHEAD])
            lasts.append(curve[p - 1])
            totals.append(total)
    if not histories:
        return {"prefixes": 0}
    fit = fit_curves(histories, [conv] * len(histories))
    pred = fit.predict_loss(float(AHEAD))
    t, last, tot = np.asarray(targets), np.asarray(lasts), np.asarray(totals)
    rel = np.abs(pred - t) / np.maximum(np.abs(t), 1e-300)
    norm = np.abs((last - pred) - (last - t)) / tot
    return {"rel": rel, "norm": norm, "prefixes": len(histories)}


def main(argv: list[str] | None = None) -> int:
    """Record, predict, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="curves per solver (data and model seeds)")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--record", type=int, default=200, help="iterations recorded per curve")
    ap.add_argument("--converge", type=int, default=1500, help="iterations run to find L*")
    ap.add_argument("--budget", type=float, default=15.0, help="seconds per curve at most")
    ap.add_argument("--active", type=float, default=1e-3,
                    help="evaluate prefixes while L_k - L* >= active * (L_0 - L*)")
    ap.add_argument("--min-prefix", type=int, default=3)
    args = ap.parse_args(argv)

    per_solver: dict[str, Any] = {}
    all_rel, all_norm = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in sorted(ALGORITHMS):
            try:
                curves, conv = [], "unknown"
                for seed in range(args.seeds):
                    curve, l_star, conv = record_curve(
                        algorithm, 1000 + seed, Path(tmp), args.rows, args.record, args.converge, args.budget
                    )
                    curves.append((curve, l_star))
                res = evaluate(curves, conv, args.active, args.min_prefix)
            except Exception as exc:  # a solver that cannot run here is reported, not fatal
                per_solver[algorithm] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            if not res["prefixes"]:
                per_solver[algorithm] = {"prefixes": 0, "convergence": conv}
                continue
            all_rel.append(res["rel"])
            all_norm.append(res["norm"])
            per_solver[algorithm] = {
                "convergence": conv,
                "prefixes": res["prefixes"],
                "median_rel_error": round(float(np.median(res["rel"])), 6),
                "p90_rel_error": round(float(np.quantile(res["rel"], 0.9)), 6),
                "median_norm_error": round(float(np.median(res["norm"])), 6),
                "p90_norm_error": round(float(np.quantile(res["norm"], 0.9)), 6),
            }
    rel = np.concatenate(all_rel) if all_rel else np.full(1, np.nan)
    norm = np.concatenate(all_norm) if all_norm else np.full(1, np.nan)
    out = {
        "median_rel_error": round(float(np.median(rel)), 6),
        "p90_rel_error": round(float(np.quantile(rel, 0.9)), 6),
        "median_norm_error": round(float(np.median(norm)), 6),
        "p90_norm_error": round(float(np.quantile(norm, 0.9)), 6),
        "prefixes": int(rel.size) if all_rel else 0,
        "ahead": AHEAD,
        "active_fraction": args.active,
        "per_solver": per_solver,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
