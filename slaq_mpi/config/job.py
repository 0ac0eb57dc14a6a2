"""One entry of the experiment's ``jobs:`` list, validated into a :class:`JobSpec`: its solver
and hyperparameters, dataset, stop rule and scheduling keys."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slaq_mpi.config.dataset import DatasetFacts, parse_dataset
from slaq_mpi.config.model_size import ModelSizes, model_memory_problem
from slaq_mpi.config.schema import LEFT_OUT, Check, Key, Schema, integers, keyed, numbers, section
from slaq_mpi.data.datasets import DatasetSpec
from slaq_mpi.data.generators import SEED_MAX
from slaq_mpi.errors import ConfigError

__all__ = ["REQUIRED", "JobSpec", "StopRule", "check_name", "parse_job"]

REQUIRED = "this key is required"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_NULL_STOP = ("must be a number; leave the key out for the default (200 iterations when no "
              "tolerance is given)")


@dataclass(frozen=True)
class StopRule:
    """When a job is done: after ``max_iterations``, or once the relative loss change
    |L[k-1] - L[k]| / |L[k-1]| is at or below ``tolerance`` (whichever comes first)."""

    max_iterations: int | None = 200
    tolerance: float | None = None

    def done_after(self, iterations: int, prev_loss: float, loss: float) -> bool:
        """Whether a job is done after ``iterations`` iterations, the last two losses being
        ``prev_loss`` (NaN if unknown) and ``loss``."""
        if self.max_iterations is not None and iterations >= self.max_iterations:
            return True
        if self.tolerance is not None and math.isfinite(prev_loss):
            return abs(prev_loss - loss) <= self.tolerance * max(abs(prev_loss), 1e-300)
        return False


@dataclass(frozen=True)
class JobSpec:
    """One training job of the experiment."""

    name: str
    algorithm: str
    dataset: DatasetSpec
    hyperparameters: Mapping[str, Any]
    arrival: float
    stop: StopRule
    max_cores: int | None
    seed: int
    utility: Mapping[str, Any] | None = None
    weight: float = 1.0  # share of the cluster relative to other jobs (fair: shares, slaq: gains)
    #: why the model would not fit in this machine's memory, as ConfigError arguments
    #: (see :func:`~slaq_mpi.config.experiment.check_memory`)
    memory_problem: tuple[str, Any, str] | None = field(default=None, compare=False, repr=False)


def check_name(val: Any, where: str) -> str:
    """A name of the experiment or a job: 1-64 letters, digits, ``_``, ``.``, ``-``."""
    if not isinstance(val, str) or not _NAME.fullmatch(val):
        raise ConfigError(where, val, "must be 1-64 characters of letters, digits, '_', '.', '-'")
    return val


def parse_job(raw: Any, i: int, seed: int, check_files: bool) -> JobSpec:
    """Validate ``jobs[i]`` of an experiment with seed ``seed`` (``check_files`` as for
    :func:`~slaq_mpi.config.experiment.load`).

    Raises:
        ConfigError: naming the ``jobs[i].*`` key, the bad value and what is allowed.
    """
    where = f"jobs[{i}]"
    job = _JOB.parse(raw, where)
    solver = _solver_class(job["algorithm"], f"{where}.algorithm")
    hyper = _hyperparameters(job["hyperparameters"], f"{where}.hyperparameters", solver)
    data = parse_dataset(job["dataset"], f"{where}.dataset", check_files, solver)
    _check_hyperparameters(solver, hyper, data, f"{where}.hyperparameters")
    stop: StopRule = job["stop"]
    memory_problem = None
    if check_files and data.rows is not None and data.features is not None:
        sizes = ModelSizes(data.rows, data.features, data.top_label, stop.max_iterations, data.spec)
        memory_problem = model_memory_problem(where, job["name"], job["algorithm"], solver, hyper, sizes)
    return JobSpec(
        name=job["name"],
        algorithm=job["algorithm"],
        dataset=data.spec,
        hyperparameters=hyper,
        arrival=job["arrival"],
        stop=stop,
        max_cores=job["max_cores"],
        seed=job.get("seed", seed * 1000 + i),
        utility=job["utility"],
        weight=job["weight"],
        memory_problem=memory_problem,
    )


def _algorithm(val: Any, where: str) -> str:
    if not isinstance(val, str):
        raise ConfigError(where, val, "must be a string")
    return val


def _solver_class(algorithm: str, where: str) -> Any:
    from jobs import ALGORITHMS, load_solver

    try:
        return load_solver(algorithm)
    except KeyError:
        allowed = ", ".join(sorted(ALGORITHMS))
        raise ConfigError(where, algorithm, f"allowed: {allowed}, or path/to/file.py:ClassName") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user's solver file may raise anything on import
        raise ConfigError(where, algorithm, f"the solver file or class does not load "
                          f"({exc.__class__.__name__}: {exc})") from None


def _hyperparameters(given: Mapping[Any, Any], where: str, solver: Any) -> dict[str, Any]:
    """The hyperparameters as given, each of the type of the solver's default (an integer
    where a float is wanted made a float)."""
    hyper: dict[str, Any] = {}
    for key, val in keyed(given, where, set(solver.defaults)).items():
        want = type(solver.defaults[key])
        ok = isinstance(val, want) and not (want is not bool and isinstance(val, bool))
        if (want is float and isinstance(val, int) and not isinstance(val, bool)
                and abs(val) <= sys.float_info.max):
            ok, val = True, float(val)
        if not ok:
            raise ConfigError(f"{where}.{key}", val, f"must be of type {want.__name__}")
        hyper[key] = val
    return hyper


def _check_hyperparameters(solver: Any, hyper: Mapping[str, Any], data: DatasetFacts,
                           where: str) -> None:
    """The solver's own rules for its hyperparameters on this data, and a class count that
    covers the labels."""
    problem = getattr(solver, "hyperparameter_problem", None)  # a user solver may lack it
    params = {**solver.defaults, **hyper}
    found = problem(params, data.rows) if problem is not None else None
    if found is not None:
        key, allowed = found
        raise ConfigError(f"{where}.{key}", params[key],
                          allowed + ("" if key in hyper else " (this is the default; set it)"))
    count = getattr(solver, "class_count", "")  # the hyperparameter that counts classes
    top = data.top_label
    if count and top is not None and 0 < params[count] <= top:
        raise ConfigError(f"{where}.{count}", params[count],
                          f"the labels go up to {top:g}: must be at least {top + 1:g}, or 0 to "
                          "count the classes from the labels")


def _stop(raw: Any, where: str) -> StopRule:
    given = _STOP.parse(section(raw, where), where)
    max_it = given.get("max_iterations", 200 if "tolerance" not in given else None)
    return StopRule(max_iterations=max_it, tolerance=given.get("tolerance"))


def _stop_key(check: Check) -> Key:
    """A key of ``stop:``: checked by ``check``; null is refused (leave the key out instead)."""
    def not_null(val: Any, where: str) -> Any:
        if val is None:
            raise ConfigError(where, val, _NULL_STOP)
        return check(val, where)
    return Key(not_null, default=LEFT_OUT)


_STOP = Schema({
    "max_iterations": _stop_key(integers(1)),
    "tolerance": _stop_key(numbers(0.0, open_lo=True)),
})


def _utility(val: Any, where: str) -> dict[str, float]:
    from slaq_mpi.policies.utility import validate_utility

    return validate_utility(val, where)


_JOB = Schema({  # checked in this order; the solver, hyperparameters and dataset then together
    "name": Key(check_name, nullable=True, required=REQUIRED),
    "algorithm": Key(_algorithm, nullable=True, required=REQUIRED),
    "hyperparameters": Key(section, nullable=True, default={}),
    "dataset": Key(nullable=True, required=REQUIRED),
    "stop": Key(_stop, nullable=True, default=StopRule()),
    "max_cores": Key(integers(1), nullable=True),
    "utility": Key(_utility, nullable=True),
    "weight": Key(numbers(0.0, open_lo=True, hi=1e6), default=1.0),
    "arrival": Key(numbers(0.0), default=0.0),
    "seed": Key(integers(0, SEED_MAX), default=LEFT_OUT),
})
