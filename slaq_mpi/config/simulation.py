"""The ``simulation:`` section of an experiment YAML, validated into :class:`SimSettings`.

The experiment parser reads it once, into ``ExperimentSpec.simulation``, without importing the
simulator (``slaq run`` never does). Every key is optional (inside ``workload:``, ``jobs`` and
``mean_gap`` are required)::

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
      time_noise: 0.0          # relative std of each job's speed, drawn at every decision (mean kept)
      reconfigure_seconds: 0.05  # the pause of a moved job (its core count changes), and the
                               #   move cost the policies weigh (ClusterSnapshot.move_seconds)
      epoch_model: fluid       # when a move happens: fluid at the decision, progress carried
                               # over; live like `slaq run` (at the job's next iteration boundary,
                               # a growing job once the cores it gains are free)
      max_epochs: 100          # stop after this many decisions (default: when every job is done)
      horizon: 3600.0          # stop at this simulated time (seconds)
      max_iterations: 20000    # safety cap on iterations of any simulated job
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from slaq_mpi.config.schema import LEFT_OUT, Key, Schema, choice, integers, keyed, numbers
from slaq_mpi.config.values import MAX_RANKS, integer
from slaq_mpi.errors import NO_VALUE, ConfigError
from slaq_mpi.policies.snapshot import DEFAULT_MOVE_SECONDS

__all__ = [
    "CURVE_SOURCES", "EPOCH_MODELS", "ScalingParams", "SimSettings", "WorkloadSettings",
    "check_policy_name", "simulation_settings",
]

CURVE_SOURCES = ("library", "analytic")
EPOCH_MODELS = ("fluid", "live")  # when a move takes effect in simulation (sim/engine.py)
MAX_SECONDS = 1e9  # about 32 years: the largest mean gap or start time of a workload
MAX_WEIGHT = 1e9  # the largest template weight of workload.mix (weights are relative)
MAX_JOBS = 10**6  # jobs a workload may draw

#: Largest ``workload.size_jitter``: the sigma of a lognormal, so 5 already spreads job sizes
#: over a factor of e**(2 * 1.96 * 5) (about 3e8) between the 2.5th and the 97.5th percentile.
MAX_SIZE_JITTER = 5.0


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
    reconfigure_seconds: float = DEFAULT_MOVE_SECONDS
    max_epochs: int | None = None
    horizon: float | None = None
    max_iterations: int = 20000
    epoch_model: str = "fluid"
    #: the keys each ``scaling:`` entry of the YAML gave (by entry: an algorithm or ``default``)
    scaling_given: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def scaling_for(self, algorithm: str) -> ScalingParams:
        """The scaling parameters of ``algorithm`` (its own entry, else ``default``)."""
        return self.scaling.get(algorithm) or self.scaling.get("default") or ScalingParams()


def simulation_settings(raw: Any, *, ranks: int, policy: str, job_names: Collection[str],
                        algorithms: Collection[str]) -> SimSettings:
    """Validate a ``simulation:`` mapping (None: every default) of an experiment with these
    ``ranks``, ``policy``, job names and algorithms (the keys ``workload.mix`` and ``scaling``
    may name). Whether ``curve_file`` is a curve library is the simulator's question
(:func:`slaq_mpi.sim.settings.parse_settings`).

    Raises:
        ConfigError: naming the ``simulation.*`` key, the bad value and what is allowed.
    """
    given = Schema({
        "capacity": Key(default=LEFT_OUT),
        "nodes": Key(default=LEFT_OUT),
        "cores_per_node": Key(default=LEFT_OUT),
        "policies": Key(_policies, default=(policy,)),
        "curves": Key(choice(CURVE_SOURCES), default="library"),
        "curve_file": Key(_curve_path, nullable=True),
        "workload": Key(lambda val, where: _workload(val, where, job_names), nullable=True),
        "scaling": Key(lambda val, where: _scaling(val, where, algorithms), nullable=True, default={}),
        "epoch_model": Key(choice(EPOCH_MODELS), default="fluid"),
        "work_scale": Key(numbers(0.0, open_lo=True), default=1.0),
        "time_noise": Key(numbers(0.0), default=0.0),
        "reconfigure_seconds": Key(numbers(0.0), default=DEFAULT_MOVE_SECONDS),
        "max_epochs": Key(integers(1), nullable=True),
        "horizon": Key(numbers(0.0, open_lo=True), nullable=True),
        "max_iterations": Key(integers(1), default=20000),
    }).parse({} if raw is None else raw, "simulation")
    scaling = given.pop("scaling")
    for key in ("capacity", "nodes", "cores_per_node"):
        given.pop(key, None)
    return SimSettings(**given, capacity=_capacity(raw or {}, ranks), scaling=_merged(scaling),
                       scaling_given={alg: frozenset(entry) for alg, entry in scaling.items()})


def _capacity(raw: Mapping[str, Any], ranks: int) -> int:
    """Cores for jobs: ``capacity``, else ``nodes * cores_per_node``, else ``ranks - 1``."""
    w = "simulation"
    node_keys = [k for k in ("nodes", "cores_per_node") if k in raw]
    if "capacity" in raw and node_keys:
        raise ConfigError(f"{w}.{node_keys[0]}", raw[node_keys[0]], "give either capacity or "
                          "nodes with cores_per_node (capacity = nodes * cores_per_node), not both")
    if "capacity" in raw:
        return integer(raw["capacity"], f"{w}.capacity", 1, MAX_RANKS)
    if not node_keys:
        return max(1, int(ranks) - 1)
    for key, other in (("nodes", "cores_per_node"), ("cores_per_node", "nodes")):
        if key not in raw:
            raise ConfigError(f"{w}.{key}", NO_VALUE, f"this key is required with {w}.{other} "
                              "(capacity = nodes * cores_per_node); or give capacity")
    capacity = integer(raw["nodes"], f"{w}.nodes", 1, MAX_RANKS) * integer(
        raw["cores_per_node"], f"{w}.cores_per_node", 1, MAX_RANKS)
    if capacity > MAX_RANKS:
        raise ConfigError(f"{w}.nodes", raw["nodes"], f"nodes * cores_per_node = {capacity}; "
                          f"at most {MAX_RANKS} cores are simulated")
    return capacity


def _policies(val: Any, where: str) -> tuple[str, ...]:
    pols = [val] if isinstance(val, str) else val
    if not isinstance(pols, list) or not pols:
        raise ConfigError(where, pols, "must be a non-empty list of policy names")
    for i, name in enumerate(pols):
        check_policy_name(name, where, must_load=False)
        if name in pols[:i]:
            raise ConfigError(where, name, "it is listed twice; list each policy once")
    return tuple(str(p) for p in pols)


def check_policy_name(name: Any, where: str, must_load: bool = True) -> None:
    """Raise :class:`ConfigError` unless ``name`` is a registered policy (that loads, with
    ``must_load``; else it is not imported)."""
    from slaq_mpi.policies import POLICY_NAMES, SIMULATION_POLICY_NAMES, PolicyError, get_policy

    if not must_load and str(name) in (*POLICY_NAMES, *SIMULATION_POLICY_NAMES):
        return
    try:
        get_policy(str(name))
    except PolicyError as exc:
        raise ConfigError(where, name, str(exc).split("; ", 1)[-1]) from None
    except ImportError as exc:
        if must_load:
            raise ConfigError(where, name, f"this policy does not load here ({exc})") from None


def _curve_path(val: Any, where: str) -> str:
    if not isinstance(val, str) or not val:
        raise ConfigError(where, val, "must be a path to a .npz curve library")
    return os.path.expanduser(val)


def _workload(raw: Any, where: str, job_names: Collection[str]) -> WorkloadSettings:
    given = Schema({
        "jobs": Key(integers(1, MAX_JOBS), required="this key is required: the number of arrivals"),
        "mean_gap": Key(numbers(0.0, hi=MAX_SECONDS),
                        required="this key is required: mean seconds between arrivals"),
        "mix": Key(lambda val, path: _mix(val, path, job_names), nullable=True, default={}),
        "start": Key(numbers(0.0, hi=MAX_SECONDS), default=0.0),
        "size_jitter": Key(_jitter, default=0.3),
    }).parse(raw, where)
    return WorkloadSettings(**given)


def _mix(raw: Any, where: str, job_names: Collection[str]) -> dict[str, float]:
    mix = keyed(raw, where, job_names)
    weights = {str(k): numbers(0.0, hi=MAX_WEIGHT)(v, f"{where}.{k}") for k, v in mix.items()}
    if weights and sum(weights.values()) <= 0:
        raise ConfigError(where, dict(mix), "at least one template weight must be > 0")
    return weights


def _jitter(val: Any, where: str) -> float:
    ok = isinstance(val, int | float) and not isinstance(val, bool) and 0.0 <= val <= MAX_SIZE_JITTER
    if not ok:  # NaN fails the comparison; an integer beyond any float compares exactly
        raise ConfigError(where, val, f"must be a number in [0, {MAX_SIZE_JITTER:g}] (the sigma "
                          "of a lognormal factor on each job's work)")
    return float(val)


_SCALING_ENTRY = Schema({
    "overhead": Key(numbers(0.0), default=LEFT_OUT),
    "comm": Key(numbers(0.0), default=LEFT_OUT),
    "cost": Key(lambda val, where: None if val is None else numbers(0.0, open_lo=True)(val, where),
                default=LEFT_OUT),
})


def _scaling(raw: Any, where: str, algorithms: Collection[str]) -> dict[str, dict[str, Any]]:
    """Each entry's keys as given, checked (an entry left empty gives none)."""
    entries = keyed(raw, where, {*algorithms, "default"})
    return {str(alg): _SCALING_ENTRY.parse({} if entry is None else entry, f"{where}.{alg}")
            for alg, entry in entries.items()}


def _merged(given: Mapping[str, Mapping[str, Any]]) -> dict[str, ScalingParams]:
    """Every entry's parameters: its own, else ``default``'s, else the built-in ones (``cost``
    only from ``default`` where ``default`` gives it)."""
    base = {**ScalingParams().__dict__, **given.get("default", {})}
    return {alg: ScalingParams(**{**base, **entry}) for alg, entry in given.items()}
