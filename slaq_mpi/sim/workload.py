"""The simulated jobs of an experiment: arrival, true loss curve and scaling model of each.

Without ``simulation.workload`` the ``jobs:`` list is the workload (arrivals as listed). With it,
``workload.jobs`` jobs arrive as a Poisson process (exponential gaps of mean ``mean_gap``), each
a copy of a ``jobs:`` entry (template) drawn with the ``mix`` weights. Every job replays a curve
drawn from the library for its algorithm (or an analytic curve of its convergence class), and
runs at ``seconds/iter(a) = work/a + overhead + comm*log2(a)`` with ``work`` = the algorithm's
cost per row*feature * rows * features of its dataset * a lognormal jitter * ``work_scale``.
All random choices come from the experiment seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from slaq_mpi._text import count
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies.utility import validate_utility
from slaq_mpi.sim.curves import Curve, CurveLibrary, analytic_curve, extend
from slaq_mpi.sim.scaling import ScalingModel
from slaq_mpi.sim.settings import SimSettings

__all__ = ["SimJob", "build_workload", "stop_iteration"]


@dataclass
class SimJob:
    """One simulated job and the truth about it (only the oracle may look at the truth)."""

    name: str
    algorithm: str
    convergence: str
    arrival: float
    curve: np.ndarray
    l_star: float
    scaling: ScalingModel
    max_cores: int
    stop_iter: int
    max_iterations: int | None
    curve_name: str = ""
    utility: Mapping[str, Any] | None = None
    weight: float = 1.0
    template: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def normalized_curve(self) -> np.ndarray:
        """The true normalized loss after k iterations, k = 0..stop_iter."""
        span = self.curve[0] - self.l_star
        if not span > 0:
            return np.zeros(len(self.curve))
        return (self.curve - self.l_star) / span


def stop_iteration(curve: np.ndarray, max_iterations: int | None, tolerance: float | None,
                   cap: int) -> int:
    """Iterations a job runs before its stop rule holds on the losses it reports.

    The job reports ``curve[0..n-1]`` after n iterations; it stops at the first n with
    ``n >= max_iterations`` or ``|r[n-2] - r[n-1]| <= tolerance * |r[n-2]|`` (config.StopRule).
    """
    limit = min(cap, max_iterations) if max_iterations is not None else cap
    if tolerance is not None:
        c = extend(curve, limit + 1)
        rel = np.abs(c[:-1] - c[1:]) <= tolerance * np.maximum(np.abs(c[:-1]), 1e-300)
        hit = np.flatnonzero(rel[: max(limit - 1, 0)])
        if len(hit):
            return max(2, int(hit[0]) + 2)
    return max(1, limit)


UNREAD_CELLS = 1e6  # rows*features taken for a data file that cannot be read here


def _cells(template: Any, notes: list[str]) -> float:
    """The template's data size (rows*features): its generator's, or its data file's; a file
    that cannot be read here (a cluster's data, simulated on a laptop) counts as
    :data:`UNREAD_CELLS`, with a note."""
    ds = template.dataset
    if ds.generator is not None:
        return float(ds.params.get("rows", 1000)) * float(ds.params.get("features", 100))
    try:
        from slaq_mpi.data.datasets import inspect

        info = inspect(ds.path)
        return float(info.rows) * float(info.features)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same stand-in
        why = "no such file" if not Path(ds.path).is_file() else str(exc)
        notes.append(f"job {template.name}: its data file {ds.path} cannot be read here ({why}); "
                     f"its size is taken as {UNREAD_CELLS:g} rows*features")
        return UNREAD_CELLS


def _convergence(algorithm: str) -> str:
    try:
        from jobs import load_solver

        conv = getattr(load_solver(algorithm), "convergence", "unknown")
    except Exception:
        conv = "unknown"
    return conv if conv in ("sublinear", "linear", "unknown") else "unknown"


def _pick_curve(template: Any, conv: str, settings: SimSettings, library: CurveLibrary,
                rng: np.random.Generator, name: str, notes: list[str]) -> Curve:
    if settings.curves == "library":
        options = library.for_algorithm(template.algorithm)
        if options:
            return options[int(rng.integers(len(options)))]
        note = f"no recorded curve for {template.algorithm!r}: analytic {conv} curves used"
        if note not in notes:
            notes.append(note)
    return analytic_curve("linear" if conv == "linear" else "sublinear", rng, name=name)


MAX_JOB_SECONDS = 1e8  # a job longer than this alone (3 years) is a mistake in the sizes


def _scaling_key(spec: Any, algorithm: str, key: str) -> str | None:
    """The YAML key that set ``algorithm``'s scaling ``key``: its own entry's, else
    ``default``'s; None when neither sets it (the built-in value)."""
    given = spec.simulation.scaling_given
    for entry in (algorithm, "default"):
        if key in (given.get(entry) or {}):
            return f"simulation.scaling.{entry}.{key}"
    return None


def build_workload(spec: Any, settings: SimSettings, library: CurveLibrary,
                   notes: list[str] | None = None) -> list[SimJob]:
    """The simulated jobs of ``spec`` in arrival order (deterministic for ``spec.seed``).

    Raises:
        ConfigError: a job whose work (cost x rows*features x jitter x work_scale) overflows,
            or that would run longer than :data:`MAX_JOB_SECONDS`.
    """
    notes = notes if notes is not None else []
    templates = list(spec.jobs)
    picks = _picks(spec, settings, templates)
    utilities = {t.name: None if t.utility is None else validate_utility(t.utility, f"jobs[{i}].utility")
                 for i, t in enumerate(templates)}
    _note_iteration_caps(templates, {tpl.name for tpl, *_ in picks}, settings, notes)
    out: list[SimJob] = []
    conv_cache: dict[str, str] = {}
    cells_of: dict[str, float] = {}  # per template: its data file is read (or noted) once
    for i, (tpl, arrival, name, jitter) in enumerate(picks):
        rng = np.random.default_rng([spec.seed, 2, i])
        if tpl.algorithm not in conv_cache:
            conv_cache[tpl.algorithm] = _convergence(tpl.algorithm)
        conv = conv_cache[tpl.algorithm]
        curve = _pick_curve(tpl, conv, settings, library, rng, name, notes)
        sc = settings.scaling_for(tpl.algorithm)
        cost = sc.cost if sc.cost is not None else library.cost(tpl.algorithm)
        factor = float(rng.lognormal(0.0, jitter)) if jitter > 0 else 1.0
        if tpl.name not in cells_of:
            cells_of[tpl.name] = _cells(tpl, notes)
        work = _work(name, tpl.algorithm, cost, cells_of[tpl.name], factor, settings)
        stop = stop_iteration(curve.losses, tpl.stop.max_iterations, tpl.stop.tolerance,
                              settings.max_iterations)
        scaling = ScalingModel(work=work, overhead=sc.overhead, comm=sc.comm)
        cores = min(tpl.max_cores or settings.capacity, settings.capacity)
        if settings.horizon is None and settings.max_epochs is None:
            _check_alone(spec, settings, name, tpl.algorithm, scaling, stop, cores)
            _check_widest(spec, settings, name, tpl.algorithm, scaling, stop, cores)
        out.append(SimJob(
            name=name,
            algorithm=tpl.algorithm,
            convergence=conv if conv != "unknown" else curve.convergence,
            arrival=arrival,
            curve=extend(curve.losses, stop + 1),
            l_star=min(curve.l_star, float(np.min(curve.losses))),
            scaling=scaling,
            max_cores=cores,
            stop_iter=stop,
            max_iterations=tpl.stop.max_iterations,
            curve_name=curve.name,
            utility=utilities[tpl.name],
            weight=tpl.weight,
            template=tpl.name,
        ))
    out.sort(key=lambda j: (j.arrival, j.name))
    return out


def _picks(spec: Any, settings: SimSettings, templates: list[Any]) -> list[tuple[Any, float, str, float]]:
    """``(template, arrival, name, size jitter sigma)`` of every job: the ``jobs:`` list as
    given, or the Poisson arrivals of ``simulation.workload``."""
    wl = settings.workload
    if wl is None:
        return [(t, t.arrival, t.name, 0.0) for t in templates]
    rng = np.random.default_rng([spec.seed, 1])
    weights = np.array([wl.mix.get(t.name, 0.0 if wl.mix else 1.0) for t in templates])
    weights = weights / weights.sum()
    gaps = rng.exponential(wl.mean_gap, size=wl.jobs) if wl.mean_gap > 0 else np.zeros(wl.jobs)
    gaps[0] = 0.0
    arrivals = wl.start + np.cumsum(gaps)
    which = rng.choice(len(templates), size=wl.jobs, p=weights)
    width = len(str(wl.jobs - 1))
    return [(templates[w], float(a), f"{templates[w].name}-{i:0{width}d}", wl.size_jitter)
            for i, (w, a) in enumerate(zip(which, arrivals, strict=True))]


def _note_iteration_caps(templates: list[Any], used: set[str], settings: SimSettings,
                         notes: list[str]) -> None:
    """Note the templates in use whose ``stop.max_iterations`` is above the simulator's cap."""
    for t in templates:
        if t.name not in used:  # no copy of it arrives (mix weight 0): nothing to note
            continue
        if t.stop.max_iterations is not None and t.stop.max_iterations > settings.max_iterations:
            notes.append(f"job {t.name}: stop.max_iterations {t.stop.max_iterations} is above "
                         f"simulation.max_iterations {settings.max_iterations}; its simulated "
                         f"copies stop at {settings.max_iterations} iterations")


def _work(name: str, algorithm: str, cost: float, cells: float, factor: float,
          settings: SimSettings) -> float:
    """One-core seconds per iteration of job ``name``; ConfigError if that overflows."""
    work = cost * cells * factor * settings.work_scale
    if not math.isfinite(work):
        raise ConfigError(
            "simulation.work_scale", settings.work_scale,
            f"job {name!r} ({algorithm}) would need {work} one-core seconds per "
            f"iteration (cost {cost:g} s per row*feature x {cells:g} rows*features x size "
            f"jitter {factor:.3g} x work_scale): lower simulation.work_scale, "
            f"simulation.scaling.{algorithm}.cost (or default.cost) or "
            "simulation.workload.size_jitter")
    return work


def _check_alone(spec: Any, settings: SimSettings, name: str, algorithm: str,
                 scaling: ScalingModel, stop: int, cores: int) -> None:
    """ConfigError if the job would run longer than :data:`MAX_JOB_SECONDS` alone on its best
    core count, naming the overhead when that, not the work, makes it long."""
    work = scaling.work
    best = work * math.log(2) / scaling.comm if scaling.comm > 0 else cores  # t(a) is least there
    at = min((1, cores, max(1, min(cores, round(best)))), key=scaling.seconds)
    alone = stop * scaling.seconds(at)
    if alone <= MAX_JOB_SECONDS:
        return
    fixed = scaling.overhead + scaling.comm * math.log2(at)
    if fixed >= work / at:  # the per-iteration overhead, not the work, makes it long
        key = _scaling_key(spec, algorithm, "overhead")
        where, value = (key, scaling.overhead) if key else (
            "simulation.max_iterations", settings.max_iterations)  # built-in overhead: the count
        raise ConfigError(
            where, value,
            f"job {name!r} ({algorithm}) would take {alone:.3g} simulated seconds "
            f"alone ({stop} iterations of {fixed:.3g} s of overhead and communication "
            f"on {count(at, 'core')}, {work / at:.3g} s of work), more than {MAX_JOB_SECONDS:.0e}; "
            f"lower simulation.scaling.{algorithm}.overhead (or default.overhead), "
            "simulation.max_iterations or the job's stop.max_iterations, or set "
            "simulation.horizon, simulation.max_epochs or --max-epochs to simulate part of it")
    raise ConfigError(
        "simulation.work_scale", settings.work_scale,
        f"job {name!r} ({algorithm}) would take {alone:.3g} simulated seconds alone on "
        f"its best core count ({stop} iterations of {work:.3g} one-core seconds), more "
        f"than {MAX_JOB_SECONDS:.0e}; lower simulation.work_scale, "
        f"simulation.scaling.{algorithm}.cost or simulation.workload.size_jitter, or "
        "set simulation.horizon, simulation.max_epochs or --max-epochs to simulate part of it")


def _check_widest(spec: Any, settings: SimSettings, name: str, algorithm: str,
                  scaling: ScalingModel, stop: int, cores: int) -> None:
    """ConfigError if the job would run longer than :data:`MAX_JOB_SECONDS` on every core it
    can take (a policy may give it them), naming the communication cost."""
    widest = stop * scaling.seconds(cores)
    if widest <= MAX_JOB_SECONDS:
        return
    key = _scaling_key(spec, algorithm, "comm")
    where, value = (key, scaling.comm) if key else ("simulation.max_iterations", settings.max_iterations)
    raise ConfigError(
        where, value,
        f"job {name!r} ({algorithm}) would take {widest:.3g} simulated seconds on "
        f"{count(cores, 'core')}, which a policy may give it ({stop} iterations of "
        f"{scaling.seconds(cores):.3g} s, {scaling.comm * math.log2(cores):.3g} s of them "
        f"communication), more than {MAX_JOB_SECONDS:.0e}; lower "
        f"simulation.scaling.{algorithm}.comm (or default.comm) or the job's max_cores, "
        "or set simulation.horizon, simulation.max_epochs or --max-epochs to simulate part of it")
