"""The solver protocol every training job follows.

A solver is an iterative, data-parallel algorithm. Each rank of a job's group builds one
solver instance on its own row shard of the dataset; every global quantity is combined with
``comm.allreduce``, so every rank holds the same model and sees the same global loss.

Protocol (see ``docs/solvers.md`` for a worked example):

* ``__init__(comm, shard, params, seed)``: set up the initial model. Must give the same
  model on any number of ranks (draw random numbers from ``seed``, never from the rank).
* ``step() -> float``: run one iteration and return the global loss of the model *before*
  the update (so the first loss is the loss of the initial model).
* ``get_state() -> dict[str, np.ndarray]`` / ``set_state(state)``: the complete model
  state, so that restoring it on any number of ranks continues exactly.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from slaq_mpi.runtime.protocol import GroupComm, ReduceOp

__all__ = ["AT_LEAST_ONE", "NON_NEGATIVE", "POSITIVE", "Allowed", "GroupComm", "ReduceOp", "SerialComm",
           "Shard", "Solver"]

class SerialComm:
    """A one-rank group, for running a solver without MPI (tests, benchmarks, recording)."""

    rank = 0
    size = 1

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Return a copy of ``array``: the reduction over one rank."""
        return np.array(array, dtype=np.float64, copy=True)


@dataclass
class Shard:
    """One rank's rows of a dataset.

    Attributes:
        X: feature rows, a dense ``ndarray`` or a ``scipy.sparse.csr_matrix``.
        y: labels or targets of those rows, or None for unsupervised data.
        row_start: global index of the first row held.
        n_rows: rows in the whole dataset (over all ranks).
    """

    X: np.ndarray | sp.csr_matrix
    y: np.ndarray | None
    row_start: int
    n_rows: int

    @property
    def n_features(self) -> int:
        """Columns of ``X``."""
        return int(self.X.shape[1])

    @property
    def n_local(self) -> int:
        """Rows held by this rank."""
        return int(self.X.shape[0])


@dataclass(frozen=True)
class Allowed:
    """The values one hyperparameter may take: an interval of numbers, or named choices.

    ``Allowed(lo=0)`` is ``>= 0``, ``Allowed(lo=0, lo_open=True)`` is ``> 0``,
    ``Allowed(lo=0, hi=1, hi_open=True)`` is ``in [0, 1)``, ``Allowed(choices=("a", "b"))``
    is one of the names.
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] = ()

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is allowed."""
        if self.choices:
            return value in self.choices
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.lo is None and self.hi is None:
            return "a finite number"
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return (f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}"
                f"{')' if self.hi_open else ']'}")


POSITIVE = Allowed(lo=0, lo_open=True)
NON_NEGATIVE = Allowed(lo=0)
AT_LEAST_ONE = Allowed(lo=1)


class Solver(ABC):
    """Base class of the built-in solvers.

    Class attributes:
        convergence: ``"sublinear"`` (first-order methods) or ``"linear"`` (L-BFGS, EM,
            Lloyd...): chooses the loss-curve family the scheduler fits.
        defaults: every hyperparameter with its default; the YAML may override these only,
            with values of the same type.
        allowed: the values a hyperparameter may take (numbers: an interval; strings: the
            choices). ``slaq validate`` and the constructor refuse any other value.
        row_limited: hyperparameters that must not exceed the dataset's rows (clusters,
            components drawn from distinct rows).
        needs_labels: whether the dataset must carry ``y``.
        class_count: the hyperparameter that, when above 0, is the number of classes: the
            labels must be below it (``slaq validate`` checks it against the data).
        feature_kind: ``"counts"`` if every feature value must be >= 0 (word counts), else
            ``""`` (any finite number); ``slaq validate`` checks the data.
    """

    convergence: ClassVar[str] = "sublinear"
    defaults: ClassVar[dict[str, Any]] = {}
    allowed: ClassVar[dict[str, Allowed]] = {}
    row_limited: ClassVar[tuple[str, ...]] = ()
    needs_labels: ClassVar[bool] = True
    class_count: ClassVar[str] = ""
    feature_kind: ClassVar[str] = ""

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int):
        self.comm = comm
        self.shard = shard
        self.params = {**self.defaults, **params}
        self.seed = seed
        problem = self.hyperparameter_problem(self.params, shard.n_rows)
        if problem is not None:
            key, rule = problem
            raise ValueError(f"{type(self).__name__} {key} {self.params[key]!r}: {rule}")

    @classmethod
    def hyperparameter_problem(cls, params: Mapping[str, Any],
                               rows: int | None) -> tuple[str, str] | None:
        """The first hyperparameter in ``params`` with a value it may not take, and what is
        allowed (``("k", "must be >= 1")``); None if all are fine.

        ``rows`` is the dataset's row count where known (``row_limited`` is then checked).
        """
        for key, value in params.items():
            rule = cls.allowed.get(key)
            if rule is not None and not rule.admits(value):
                return key, f"must be {rule}"
            if key in cls.row_limited and rows is not None and value > rows:
                return key, f"must be at most the dataset's {rows} rows"
        return None

    @classmethod
    def state_bytes(cls, params: Mapping[str, Any], rows: int, features: int,
                    iterations: int | None) -> int:
        """About how many bytes of memory one rank of a job needs for the model, however many
        ranks the job has: every rank holds a full copy of the model state, and a step adds
        buffers of the model's size (gradients, the allreduce message and its result, the
        next model) on top of it.

        Count the arrays of ``__init__`` and ``step`` whose size depends on the hyperparameters
        and ``features`` (or on ``rows`` or ``iterations`` for a state that grows with them),
        8 bytes a float64, at the peak of a step; leave out the rank's rows of data and the
        per-row buffers, which shrink as the job gets more ranks. ``slaq validate`` and
        ``slaq run`` refuse a job whose estimate exceeds this machine's physical memory, before
        any rank starts. Being within a factor of about 2 is enough.

        Args:
            params: every hyperparameter (``defaults`` updated with the YAML's); a class count
                left at 0 is replaced by the count the labels need, where that is known.
            rows: rows of the whole dataset.
            features: columns of the dataset.
            iterations: the job's ``stop.max_iterations`` (None: no cap, only a tolerance).

        The default returns 0 (unknown: nothing is checked); a user solver whose model grows
        with its hyperparameters or the data may override it.
        """
        return 0

    @abstractmethod
    def step(self) -> float:
        """One iteration; returns the global loss of the model before this update."""

    @abstractmethod
    def get_state(self) -> dict[str, np.ndarray]:
        """The complete model state (identical on every rank of the group)."""

    @abstractmethod
    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Replace the model state with one from ``get_state``."""

    def global_sum(self, *values: float | np.ndarray) -> list[np.ndarray]:
        """Allreduce-sum several arrays or scalars in one message."""
        flat = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values]
        total = self.comm.allreduce(np.concatenate([f.ravel() for f in flat]))
        out, at = [], 0
        for f in flat:
            out.append(total[at : at + f.size].reshape(f.shape))
            at += f.size
        return out
