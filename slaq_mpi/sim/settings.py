"""The ``simulation:`` mapping of an experiment YAML, validated into :class:`SimSettings`.

Every key is optional (inside ``workload:``, ``jobs`` and ``mean_gap`` are required)::

    simulation:
      capacity: 640            # cores for jobs (default: nodes * cores_per_node, else ranks - 1)
      nodes: 20                # instead of capacity: both nodes and cores_per_node, and
      cores_per_node: 32       #   capacity = nodes * cores_per_node
      policies: [fair, slaq]   # what `slaq simulate` runs when no --policy is given (each once)
      curves: library          # library (recorded from our solvers) | analytic
      curve_file: path.npz     # another recorded library (default: the packaged one)
      workload:                # absent: the `jobs:` list is the workload, arrivals as listed
        jobs: 160              # N arrivals, each a copy of one `jobs:` entry (a template)
        mean_gap: 15.0         # Poisson arrivals: exponential gaps with this mean (seconds)
        start: 0.0             # first arrival time
        mix: {logreg-a: 2}     # template weights; a template left out has weight 0 (no mix: all equal)
        size_jitter: 0.3       # sigma of a lognormal factor on each job's work, 0 to 5
      work_scale: 1.0          # multiplies every job's work (calibration knob)
      scaling:                 # seconds/iter(a) = work/a + overhead + comm * log2(a)
        default: {overhead: 0.05, comm: 0.01}
        kmeans: {overhead: 0.08, cost: 2.0e-9}   # cost: 1-core seconds per row*feature
      time_noise: 0.0          # relative std of each job's speed, drawn every epoch (mean kept)
      reconfigure_seconds: 0.0 # time lost by a job whose core count changes
      epoch_model: fluid       # fluid: iterations flow across epochs; live: like `slaq run`
                               # (>= 1 whole iteration per epoch; the slowest job sets its end)
      max_epochs: 100          # stop early (default: when every job is done)
      horizon: 3600.0          # stop at this simulated time (seconds); the epoch it falls in
                               # is cut to end there (live: each running job still does one iteration)
      max_iterations: 20000    # safety cap on iterations of any simulated job
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slaq_mpi.config.values import MAX_RANKS, integer, number
from slaq_mpi.errors import NO_VALUE, ConfigError, DataError

__all__ = ["ScalingParams", "SimSettings", "WorkloadSettings", "parse_settings"]

_KEYS = {
    "capacity", "nodes", "cores_per_node", "policies", "curves", "curve_file", "workload",
    "work_scale", "scaling", "time_noise", "reconfigure_seconds", "max_epochs", "horizon",
    "max_iterations", "epoch_model",
}
_WORKLOAD_KEYS = {"jobs", "mean_gap", "start", "mix", "size_jitter"}
_SCALING_KEYS = {"overhead", "comm", "cost"}
CURVE_SOURCES = ("library", "analytic")


@dataclass(frozen=True)
class ScalingParams:
    """Per-algorithm scaling model parameters (None: use the default / library value)."""

    overhead: float = 0.05
    comm: float = 0.01
    cost: float | None = None


@dataclass(frozen=True)
class WorkloadSettings:
    """N Poisson arrivals drawn from the `jobs:` templates."""

    jobs: int
    mean_gap: float
    start: float = 0.0
    mix: Mapping[str, float] = field(default_factory=dict)
    size_jitter: float = 0.3


@dataclass(frozen=True)
class SimSettings:
    """Validated simulator settings."""

    capacity: int
    policies: tuple[str, ...]
    curves: str = "library"
    curve_file: str | None = None
    workload: WorkloadSettings | None = None
    work_scale: float = 1.0
    scaling: Mapping[str, ScalingParams] = field(default_factory=dict)
    time_noise: float = 0.0
    reconfigure_seconds: float = 0.0
    max_epochs: int | None = None
    horizon: float | None = None
    max_iterations: int = 20000
    epoch_model: str = "fluid"

    def scaling_for(self, algorithm: str) -> ScalingParams:
        """The scaling parameters of ``algorithm`` (its own entry, else ``default``)."""
        return self.scaling.get(algorithm) or self.scaling.get("default") or ScalingParams()


EPOCH_MODELS = ("fluid", "live")  # how an epoch ends in simulation (sim/engine.py's _advance)
MAX_SECONDS = 1e9  # about 32 years: the largest mean gap or start time of a workload
MAX_WEIGHT = 1e9  # the largest template weight of workload.mix (weights are relative)


#: Largest ``workload.size_jitter``: the sigma of a lognormal, so 5 already spreads job sizes
#: over a factor of e**(2 * 1.96 * 5) (about 3e8) between the 2.5th and the 97.5th percentile.
MAX_SIZE_JITTER = 5.0


def _jitter(val: Any, where: str) -> float:
    ok = isinstance(val, int | float) and not isinstance(val, bool) and math.isfinite(val)
    if not ok or not 0.0 <= val <= MAX_SIZE_JITTER:
        raise ConfigError(where, val, f"must be a number in [0, {MAX_SIZE_JITTER:g}] (the sigma "
                          "of a lognormal factor on each job's work)")
    return float(val)


MAX_JOBS = 10**6  # jobs a workload may draw


def _keys(raw: Any, where: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "must be a mapping of key: value")
    for key in raw:
        if key not in allowed:
            shown = ", ".join(sorted(allowed))
            raise ConfigError(f"{where}.{key}", NO_VALUE, f"unknown key; allowed keys: {shown}")
    return raw


def parse_settings(spec: Any, check_files: bool = True) -> SimSettings:
    """Validate ``spec.simulation`` (an :class:`~slaq_mpi.config.experiment.ExperimentSpec`);
    ``check_files=False`` leaves out whether ``curve_file`` exists.

    Raises:
        ConfigError: naming the ``simulation.*`` key, the bad value and what is allowed.
    """
    raw = _keys(spec.simulation or {}, "simulation", _KEYS)
    w = "simulation"
    node_keys = [k for k in ("nodes", "cores_per_node") if k in raw]
    if "capacity" in raw and node_keys:
        raise ConfigError(f"{w}.{node_keys[0]}", raw[node_keys[0]], "give either capacity or "
                          "nodes with cores_per_node (capacity = nodes * cores_per_node), not both")
    if "capacity" in raw:
        capacity = integer(raw["capacity"], f"{w}.capacity", 1, MAX_RANKS)
    elif node_keys:
        for key, other in (("nodes", "cores_per_node"), ("cores_per_node", "nodes")):
            if key not in raw:
                raise ConfigError(f"{w}.{key}", NO_VALUE, f"this key is required with {w}.{other} "
                                  "(capacity = nodes * cores_per_node); or give capacity")
        capacity = integer(raw["nodes"], f"{w}.nodes", 1, MAX_RANKS) * integer(
            raw["cores_per_node"], f"{w}.cores_per_node", 1, MAX_RANKS)
        if capacity > MAX_RANKS:
            raise ConfigError(f"{w}.nodes", raw["nodes"], f"nodes * cores_per_node = {capacity}; "
                              f"at most {MAX_RANKS} cores are simulated")
    else:
        capacity = max(1, int(spec.ranks) - 1)
    pols = raw.get("policies", [spec.policy])
    if isinstance(pols, str):
        pols = [pols]
    if not isinstance(pols, list) or not pols:
        raise ConfigError(f"{w}.policies", pols, "must be a non-empty list of policy names")
    for i, p in enumerate(pols):
        check_policy_name(p, f"{w}.policies", must_load=False)
        if p in pols[:i]:
            raise ConfigError(f"{w}.policies", p, "it is listed twice; list each policy once")
    curves = raw.get("curves", "library")
    if curves not in CURVE_SOURCES:
        raise ConfigError(f"{w}.curves", curves, f"allowed: {', '.join(CURVE_SOURCES)}")
    curve_file = raw.get("curve_file")
    if curve_file is not None and (not isinstance(curve_file, str) or not curve_file):
        raise ConfigError(f"{w}.curve_file", curve_file, "must be a path to a .npz curve library")
    if curve_file is not None:
        curve_file = os.path.expanduser(curve_file)
    if check_files and curve_file is not None and Path(curve_file).is_dir():
        raise ConfigError(f"{w}.curve_file", curve_file, "is a directory; give the .npz file that "
                          "`slaq curves record --out FILE` wrote")
    if check_files and curve_file is not None and not Path(curve_file).is_file():
        raise ConfigError(f"{w}.curve_file", curve_file, "the file does not exist (relative paths "
                          "are read from the working directory; write one with "
                          "`slaq curves record --out FILE`)")
    if check_files and curve_file is not None:
        from slaq_mpi.sim.curves import CurveLibrary

        try:
            CurveLibrary.load(curve_file)
        except DataError:
            raise ConfigError(f"{w}.curve_file", curve_file, "not a curve library (the .npz file "
                              "`slaq curves record --out FILE` writes)") from None
    workload = None
    if raw.get("workload") is not None:
        workload = _workload(raw["workload"], spec)
    scaling: dict[str, ScalingParams] = {}
    sc = _keys(raw.get("scaling", {}) or {}, f"{w}.scaling", set(_algorithm_names(spec)) | {"default"})
    for alg, params in sc.items():
        p = _keys(params or {}, f"{w}.scaling.{alg}", _SCALING_KEYS)
        base = ScalingParams()
        scaling[alg] = ScalingParams(
            overhead=number(p.get("overhead", base.overhead), f"{w}.scaling.{alg}.overhead", 0.0),
            comm=number(p.get("comm", base.comm), f"{w}.scaling.{alg}.comm", 0.0),
            cost=None if p.get("cost") is None else number(p["cost"], f"{w}.scaling.{alg}.cost", 0.0, True),
        )
    if "default" in scaling:
        d = scaling["default"]
        given = sc["default"] or {}
        for alg in list(scaling):
            if alg == "default":
                continue
            own = sc[alg] or {}
            s = scaling[alg]
            scaling[alg] = ScalingParams(
                overhead=s.overhead if "overhead" in own else d.overhead,
                comm=s.comm if "comm" in own else d.comm,
                cost=s.cost if "cost" in own else (d.cost if "cost" in given else None),
            )
    epoch_model = raw.get("epoch_model", "fluid")
    if epoch_model not in EPOCH_MODELS:
        raise ConfigError(f"{w}.epoch_model", epoch_model, f"allowed: {', '.join(EPOCH_MODELS)}")
    max_epochs = raw.get("max_epochs")
    horizon = raw.get("horizon")
    return SimSettings(
        capacity=capacity,
        policies=tuple(str(p) for p in pols),
        curves=str(curves),
        curve_file=curve_file,
        workload=workload,
        work_scale=number(raw.get("work_scale", 1.0), f"{w}.work_scale", 0.0, True),
        scaling=scaling,
        time_noise=number(raw.get("time_noise", 0.0), f"{w}.time_noise", 0.0),
        reconfigure_seconds=number(raw.get("reconfigure_seconds", 0.0), f"{w}.reconfigure_seconds", 0.0),
        max_epochs=None if max_epochs is None else integer(max_epochs, f"{w}.max_epochs", 1),
        horizon=None if horizon is None else number(horizon, f"{w}.horizon", 0.0, True),
        max_iterations=integer(raw.get("max_iterations", 20000), f"{w}.max_iterations", 1),
        epoch_model=str(epoch_model),
    )


def check_policy_name(name: Any, where: str, must_load: bool = True) -> None:
    """Raise :class:`ConfigError` unless ``name`` is a registered policy (that loads)."""
    from slaq_mpi.policies import PolicyError, get_policy

    try:
        get_policy(str(name))
    except PolicyError as exc:
        raise ConfigError(where, name, str(exc).split("; ", 1)[-1]) from None
    except ImportError as exc:
        if must_load:
            raise ConfigError(where, name, f"this policy does not load here ({exc})") from None


def _algorithm_names(spec: Any) -> list[str]:
    from jobs import ALGORITHMS

    return [*ALGORITHMS, *(j.algorithm for j in spec.jobs)]


def _workload(raw: Any, spec: Any) -> WorkloadSettings:
    w = "simulation.workload"
    wl = _keys(raw, w, _WORKLOAD_KEYS)
    if "jobs" not in wl:
        raise ConfigError(f"{w}.jobs", NO_VALUE, "this key is required: the number of arrivals")
    if "mean_gap" not in wl:
        raise ConfigError(f"{w}.mean_gap", NO_VALUE, "this key is required: mean seconds between arrivals")
    names = {j.name for j in spec.jobs}
    mix = _keys(wl.get("mix", {}) or {}, f"{w}.mix", names)
    weights = {str(k): number(v, f"{w}.mix.{k}", 0.0, hi=MAX_WEIGHT) for k, v in mix.items()}
    if weights and sum(weights.values()) <= 0:
        raise ConfigError(f"{w}.mix", dict(mix), "at least one template weight must be > 0")
    return WorkloadSettings(
        jobs=integer(wl["jobs"], f"{w}.jobs", 1, MAX_JOBS),
        mean_gap=number(wl["mean_gap"], f"{w}.mean_gap", 0.0, hi=MAX_SECONDS),
        start=number(wl.get("start", 0.0), f"{w}.start", 0.0, hi=MAX_SECONDS),
        mix=weights,
        size_jitter=_jitter(wl.get("size_jitter", 0.3), f"{w}.size_jitter"),
    )
