"""Scheduling policies: pure functions of a :class:`~slaq_mpi.policies.snapshot.ClusterSnapshot`.

``get_policy(name, **params)`` returns an object with
``allocate(snapshot) -> dict[job_id, cores]``. Jobs missing from the result, or given 0,
wait for the next epoch. The live coordinator and the simulator call the same objects.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from typing import Any, Protocol

from slaq_mpi.policies.snapshot import ClusterSnapshot

__all__ = ["Policy", "PolicyError", "POLICY_NAMES", "get_policy", "LIVE_POLICY_NAMES",
           "SIMULATION_POLICY_NAMES"]


class Policy(Protocol):
    """The policy contract."""

    name: str

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id for the next epoch; the sum never exceeds ``snapshot.capacity``."""
        ...


class PolicyError(ValueError):
    """An unknown policy name or a bad policy parameter."""


# name -> (module, class). Modules are imported on first use.
_REGISTRY: dict[str, tuple[str, str]] = {
    "fair": ("slaq_mpi.policies.fair", "FairPolicy"),
    "fifo": ("slaq_mpi.policies.fifo", "FifoPolicy"),
    "finish-time-fair": ("slaq_mpi.policies.finish_time_fair", "FinishTimeFairPolicy"),
    "goodput": ("slaq_mpi.policies.goodput", "GoodputPolicy"),
    "slaq": ("slaq_mpi.policies.slaq", "SlaqPolicy"),
    "utility": ("slaq_mpi.policies.utility", "UtilityPolicy"),
}
# Policies that need information only a simulator has (the future of every loss curve).
_SIMULATION_ONLY: dict[str, tuple[str, str]] = {"oracle": ("slaq_mpi.sim.oracle", "OraclePolicy")}

POLICY_NAMES: tuple[str, ...] = tuple(sorted(_REGISTRY))
LIVE_POLICY_NAMES: tuple[str, ...] = POLICY_NAMES
SIMULATION_POLICY_NAMES: tuple[str, ...] = tuple(sorted(_SIMULATION_ONLY))


def _check_params(name: str, cls: type, params: dict[str, Any]) -> None:
    """Names and types of ``params`` against the policy's constructor (bool, int, float, str)."""
    init = cls.__init__  # type: ignore[misc]
    sig = inspect.signature(init)
    known = [p.name for p in sig.parameters.values()
             if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    hints = typing.get_type_hints(init)
    for key, value in params.items():
        if key not in known:
            allowed = ", ".join(known) or "none"
            raise PolicyError(f"policy {name!r} has no parameter {key!r}; allowed: {allowed}")
        want = hints.get(key)
        if want is bool:
            ok = isinstance(value, bool)
        elif want is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif want is float:
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and abs(value) <= sys.float_info.max)  # not NaN, inf or an integer beyond any float
        elif want is str:
            ok = isinstance(value, str)
        else:
            ok = True  # other annotations are checked by the policy itself
        if not ok:
            kind = {bool: "true or false", int: "an integer", float: "a finite number",
                    str: "a string"}[typing.cast(type, want)]
            raise PolicyError(f"policy {name!r} parameter {key} is {value!r}; it must be {kind} "
                              "(docs/policies.md gives each parameter's range)")


def get_policy(name: str, **params: Any) -> Policy:
    """Build the policy called ``name`` with its parameters.

    Raises:
        PolicyError: unknown name, or parameters (or values) the policy does not accept.
    """
    entry = _REGISTRY.get(name) or _SIMULATION_ONLY.get(name)
    if entry is None:
        allowed = ", ".join(sorted({*_REGISTRY, *_SIMULATION_ONLY}))
        raise PolicyError(f"unknown policy {name!r}; allowed: {allowed}")
    module, cls_name = entry
    cls = getattr(importlib.import_module(module), cls_name)
    _check_params(name, cls, params)
    try:
        return cls(**params)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"bad parameters for policy {name!r}: {exc}") from None
