"""Whether a job's model fits in this machine's memory, from its solver's ``state_bytes``
estimate: the check ``slaq validate`` and ``slaq run`` make before any rank starts, and the
advice it gives (which YAML key to change, and to what)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slaq_mpi.config.memory import format_bytes, memory_here
from slaq_mpi.data.datasets import DatasetSpec
from slaq_mpi.errors import ConfigError

__all__ = ["ModelSizes", "model_memory_problem"]


@dataclass(frozen=True)
class ModelSizes:
    """What a job's model size depends on besides its hyperparameters."""

    rows: int
    features: int
    top_label: float | None
    iterations: int | None
    dataset: DatasetSpec


Needs = Callable[..., int]
"""A model's estimated bytes: ``needs(values, rows=, features=, iterations=, labels=)``, the
job's own sizes where not given (``labels=False``: the default class count, not the labels')."""


def model_memory_problem(where: str, job: str, algorithm: str, solver: Any,
                         hyper: Mapping[str, Any], sizes: ModelSizes) -> tuple[str, Any, str] | None:
    """Whether a job's model state cannot fit in this machine's physical memory, by the
    solver's ``state_bytes`` estimate: ``(key, value, problem)`` for the ConfigError naming the
    hyperparameter whose default would save the most (or the stop rule, the dataset or the
    algorithm), the estimate, the memory and the largest value that fits; None if it fits.
    A user solver without the method, or a platform that does not tell its memory, passes.

    Raises:
        ConfigError: the solver's ``state_bytes`` raised for the job's own values.
    """
    estimate = getattr(solver, "state_bytes", None)
    here = memory_here()
    if estimate is None or here is None:
        return None
    memory, said = here
    needs = _needs(solver, estimate, sizes)
    try:
        need = needs(hyper)
    except Exception as exc:  # noqa: BLE001 - a user's solver may raise anything
        raise ConfigError(f"{where}.algorithm", algorithm, f"its state_bytes raised "
                          f"{exc.__class__.__name__}: {exc}") from None
    if need <= memory:
        return None
    key, fits = _smaller_value(hyper, solver, needs, need, memory)
    try:
        one_row = needs(hyper, 1)
    except Exception:  # noqa: BLE001 - a user's solver may refuse one row: size not to blame
        one_row = need
    held = "its rows of data, " if one_row < need else ""  # a solver that densifies its data
    shape = f"{sizes.rows} rows x {sizes.features} features" if held else f"{sizes.features} features"
    what = (f"job {job!r}: {algorithm}" + (f" with {key} {hyper[key]!r}" if key is not None else "")
            + f" on {shape} needs about {format_bytes(need)} on every rank for {held}its model "
            f"and a step's buffers; {said}")
    if key is None:  # no hyperparameter set in the YAML can make it fit: the data is too big
        return _data_problem(where, algorithm, what, hyper, sizes, needs, one_row <= memory, memory)
    return f"{where}.hyperparameters.{key}", hyper[key], what + (
        f"; {key} must be at most {fits} to fit at all" if fits is not None
        else f"; a smaller {key} fits")


def _needs(solver: Any, estimate: Callable[..., Any], sizes: ModelSizes) -> Needs:
    """The job's :data:`Needs`, by the solver's ``state_bytes``."""
    count = getattr(solver, "class_count", "")

    def needs(values: Mapping[str, Any], rows: int = sizes.rows, features: int = sizes.features,
              iterations: int | None = sizes.iterations, labels: bool = True) -> int:
        params = {**solver.defaults, **values}
        if labels and count and params[count] == 0 and sizes.top_label is not None:
            params[count] = int(sizes.top_label) + 1  # the classes the labels need
        return int(estimate(params, rows, features, iterations))

    return needs


def _data_problem(where: str, algorithm: str, what: str, hyper: Mapping[str, Any],
                  sizes: ModelSizes, needs: Needs, fewer_rows: bool,
                  memory: int) -> tuple[str, Any, str]:
    """The ConfigError arguments when no hyperparameter can make the model fit: the algorithm
    (not even 1 row x 1 feature fits), the stop rule (a model that grows as it iterates), or
    the dataset's rows (``fewer_rows``: one row fits; a job starts on one rank, which holds
    every row) or features."""
    try:  # the model alone: 1 row x 1 feature, 1 iteration, the default class count
        bare = needs(hyper, 1, 1, 1, labels=False)
        capped = needs(hyper, 1, 1, 1)
        grown = needs(hyper, 1, 1)
    except Exception:  # noqa: BLE001 - a user's solver may refuse such sizes
        bare = capped = grown = 0
    if bare > memory:  # no data is small enough: the model's own size (or its estimate)
        return (f"{where}.algorithm", algorithm,
                f"{what}; even 1 row x 1 feature would need about {format_bytes(bare)}, by the "
                "solver's state_bytes estimate: set smaller hyperparameters, or check that estimate")
    if capped <= memory < grown and sizes.iterations:
        return (f"{where}.stop.max_iterations", sizes.iterations,
                f"{what}; its model grows with the iterations run: "
                + _fewer_iterations(needs, hyper, sizes.iterations, memory))
    data = sizes.dataset
    at: str
    value: Any
    if data.generator is None:
        at, value = f"{where}.dataset.path", data.path
    elif fewer_rows:
        at, value = f"{where}.dataset.rows", sizes.rows
    else:
        at, value = f"{where}.dataset.features", sizes.features
    return at, value, what + ("; use fewer rows or features" if fewer_rows
                              else "; use a smaller model or fewer features")


def _fewer_iterations(needs: Needs, hyper: Mapping[str, Any], iterations: int, memory: int) -> str:
    """How many iterations fit with the job's data (the largest, by bisection), as advice."""
    try:
        if needs(hyper, iterations=1) > memory:
            return "use fewer (and less data: one iteration does not fit either)"
        lo, hi = 1, iterations  # needs(lo) fits, needs(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if needs(hyper, iterations=mid) <= memory else (lo, mid)
    except Exception:  # noqa: BLE001 - a user's estimate may refuse a count in between
        return "use fewer"
    return f"it must be at most {lo} to fit"


def _smaller_value(hyper: Mapping[str, Any], solver: Any, needs: Needs, need: int,
                   memory: int) -> tuple[str | None, int | None]:
    """The hyperparameter set in the YAML whose default saves the most among those that can
    make the model fit (at their default, or an integer at 1), with (for an integer) the
    largest value below the YAML's that fits; ``(None, None)`` when none can. An estimate
    that raises for a value counts as not fitting."""

    def fits(values: Mapping[str, Any]) -> bool:
        try:
            return bool(needs(values) <= memory)
        except Exception:  # noqa: BLE001 - a user's estimate may refuse values in between
            return False

    def saved(key: str) -> int:
        try:
            return need - int(needs({**hyper, key: solver.defaults[key]}))
        except Exception:  # noqa: BLE001
            return 0

    def can_fit(key: str) -> bool:
        value = hyper[key]
        smallest = isinstance(value, int) and not isinstance(value, bool) and value > 1
        return fits({**hyper, key: solver.defaults[key]}) or (smallest and fits({**hyper, key: 1}))

    keys = sorted((k for k in hyper if saved(k) > 0), key=saved, reverse=True)
    key = next((k for k in keys if can_fit(k)), None)
    if key is None:
        return None, None
    value = hyper[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 1:
        return key, None
    lo, hi = 0, value  # the largest value in [1, value) that fits (lo 0: none)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits({**hyper, key: mid}) else (lo, mid)
    rule = solver.allowed.get(key) if isinstance(getattr(solver, "allowed", None), Mapping) else None
    return key, (lo if lo >= 1 and (rule is None or rule.admits(lo)) else None)
