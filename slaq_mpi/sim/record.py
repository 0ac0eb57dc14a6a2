"""Record the simulator's curve library by running our solvers serially (no MPI).

``slaq curves record --out FILE`` runs every algorithm of :data:`jobs.ALGORITHMS` on a few
small synthetic datasets and hyperparameter variants (the :data:`RECIPES`; an algorithm without
recipes gets the :data:`KIND_RECIPES` of its solver's ``dataset_kind``),
on one rank with :class:`jobs.base.SerialComm`. Each curve is kept
until its relative loss change falls below ``tolerance``; the run then goes on (up to
``converge_iterations``) to measure the converged loss L*. The median one-core time of an
iteration divided by rows*features is the curve's ``cost_per_cell``. The curves recorded are
merged into the library file: they replace the curves of their algorithms, and every other
algorithm keeps its curves.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jobs import ALGORITHMS, SerialComm, Shard, load_solver
from slaq_mpi.data.generators import GENERATORS
from slaq_mpi.sim.curves import Curve

__all__ = ["RECIPES", "ITERATION_CAPS", "KIND_RECIPES", "record_curve", "record_curves"]

Recipe = tuple[str, dict[str, Any], dict[str, Any]]  # generator, its params, hyperparameters

#: Per algorithm: (generator, generator params, hyperparameters) variants to record.
RECIPES: dict[str, list[Recipe]] = {
    "logreg": [
        ("classification", {"rows": 3000, "features": f, "noise": nz}, {"learning_rate": lr})
        for f, nz, lr in ((10, 0.5, 1.0), (20, 1.0, 2.0), (40, 2.0, 0.5), (80, 0.5, 1.5),
                          (30, 1.5, 1.0), (60, 1.0, 0.8))
    ],
    "kmeans": [
        ("blobs", {"rows": 3000, "features": f, "centers": c, "spread": s}, {"k": k})
        for f, c, s, k in ((5, 4, 1.0, 4), (10, 8, 2.0, 8), (20, 16, 3.0, 12), (8, 6, 2.5, 10),
                           (15, 12, 4.0, 12), (30, 10, 3.0, 8))
    ],
    "lda": [
        ("documents", {"rows": 300, "features": v, "topics": t, "doc_length": 60},
         {"topics": t, "e_step_iterations": 30})
        for v, t in ((200, 4), (300, 6), (250, 8))
    ],
}
#: Iterations recorded at most (for L*), per algorithm: slow solvers get fewer. Iteration caps,
#: not time budgets, keep the library the same on any machine.
ITERATION_CAPS: dict[str, int] = {
    "gbt": 1500, "gbt_classifier": 400, "mlp": 1500, "lda": 150, "gmm": 700,
}
#: Per solver ``dataset_kind``: dataset variants for algorithms without their own recipes.
KIND_RECIPES: dict[str, list[Recipe]] = {
    "classification": [
        ("classification", {"rows": 3000, "features": f, "noise": nz}, {})
        for f, nz in ((10, 0.5), (20, 1.0), (40, 2.0), (60, 0.8))
    ],
    "regression": [
        ("regression", {"rows": 3000, "features": f, "noise": nz}, {})
        for f, nz in ((10, 0.1), (20, 0.5), (40, 1.0), (60, 0.3))
    ],
    "blobs": [
        ("blobs", {"rows": 3000, "features": f, "centers": c, "spread": sp_}, {})
        for f, c, sp_ in ((5, 4, 1.0), (10, 8, 2.0), (20, 8, 3.0), (8, 6, 2.5))
    ],
    "documents": [
        ("documents", {"rows": 600, "features": v, "topics": t, "doc_length": 80}, {"topics": t})
        for v, t in ((300, 5), (500, 10), (400, 8))
    ],
}


def _shard(generator: str, params: Mapping[str, Any], seed: int) -> Shard:
    factory = GENERATORS[generator][0]
    X, y = factory(np.random.default_rng([seed, 0]), params)(
        np.random.default_rng([seed, 1]), int(params["rows"]))
    return Shard(X=X, y=y, row_start=0, n_rows=int(params["rows"]))


def record_curve(algorithm: str, recipe: Recipe, seed: int, max_iterations: int = 4000,
                 converge_iterations: int = 20000, tolerance: float = 1e-8,
                 time_budget: float = 300.0) -> Curve:
    """Run one solver serially and return its curve (raises if the losses are not finite)."""
    generator, gparams, hyper = recipe
    solver_cls = load_solver(algorithm)
    shard = _shard(generator, gparams, seed)
    solver = solver_cls(SerialComm(), shard, dict(hyper), seed)
    losses: list[float] = []
    times: list[float] = []
    keep = None
    began = time.perf_counter()
    for k in range(converge_iterations):
        if time.perf_counter() - began > time_budget:
            break
        t0 = time.perf_counter()
        loss = float(solver.step())
        times.append(time.perf_counter() - t0)
        if not math.isfinite(loss):
            raise FloatingPointError(f"{algorithm}: non-finite loss at iteration {k}")
        losses.append(loss)
        if keep is None and k >= 2 and (
            abs(losses[-2] - loss) <= tolerance * max(abs(losses[-2]), 1e-300) or k + 1 >= max_iterations
        ):
            keep = k + 1
        if keep is not None and k >= 2 and abs(losses[-2] - loss) <= 1e-13 * max(abs(loss), 1e-300):
            break
    keep = keep or len(losses)
    curve = np.array(losses[:keep])
    l_star = float(min(losses))
    cells = float(gparams["rows"]) * float(gparams["features"])
    cost = float(np.median(times[: min(len(times), 50)])) / cells
    name = f"{algorithm}-{generator}-{seed}"
    recipe_text = json.dumps({"generator": generator, **gparams, "hyperparameters": hyper,
                              "seed": seed}, sort_keys=True)
    conv = getattr(solver_cls, "convergence", "sublinear")
    return Curve(name, algorithm, conv if conv in ("sublinear", "linear") else "sublinear",
                 curve, l_star, cost, recipe_text)


def _usable(curve: Curve) -> bool:
    span = curve.losses[0] - curve.l_star
    if not span > 0 or len(curve.losses) < 4:
        return False
    norm = (curve.losses - curve.l_star) / span
    return bool(np.any(norm <= 0.05))


def record_curves(algorithms: list[str] | None = None, seed: int = 0,
                  progress: Callable[[str], None] = print) -> list[Curve]:
    """Record the usable curves of ``algorithms`` (default: all built-in ones)."""
    curves: list[Curve] = []
    for alg in algorithms or sorted(ALGORITHMS):
        kind = getattr(load_solver(alg), "dataset_kind", None)
        if kind is None:
            kind = "classification" if getattr(load_solver(alg), "needs_labels", True) else "blobs"
        recipes = RECIPES.get(alg) or KIND_RECIPES.get(kind, KIND_RECIPES["classification"])
        got = 0
        for i, recipe in enumerate(recipes):
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cap = ITERATION_CAPS.get(alg, 20000)
                    curve = record_curve(alg, recipe, seed * 1000 + i, max_iterations=min(4000, cap),
                                         converge_iterations=cap)
            except Exception as exc:  # a recipe that does not suit this solver
                progress(f"  {alg}: recipe {i} ({recipe[0]}) skipped: {type(exc).__name__}: {exc}")
                continue
            if not _usable(curve):
                progress(f"  {alg}: recipe {i} ({recipe[0]}) skipped: no 95% loss reduction")
                continue
            curves.append(curve)
            got += 1
            progress(f"  {curve.name}: {len(curve.losses)} iterations, L0={curve.losses[0]:.4g} "
                     f"L*={curve.l_star:.4g}, {curve.cost_per_cell:.3g} s/cell "
                     f"({time.perf_counter() - t0:.1f} s)")
        if not got:
            progress(f"  {alg}: no usable curve recorded")
    return curves
