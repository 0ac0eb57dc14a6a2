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
    given = (spec.simulation or {}).get("scaling") or {}
    for entry in (algorithm, "default"):
        if key in (given.get(entry) or {}):
            return f"simulation.scaling.{entry}.{key}"
    return None


def build_workload(spec: Any, settings: SimSettings, library: CurveLibrary,
                   notes: list[str] | None = None) -> list[SimJob]:
    """The simulated jobs of ``spec`` in arrival order (deterministic for ``spec.seed``).

    Raises:
        ConfigError: a job whose work (cost x rows*features x jitter x work_scale) overflows.
    """
    notes = notes if notes is not None else []
    templates = list(spec.jobs)
    wl = settings.workload
    picks: list[tuple[Any, float, str, float]] = []  # template, arrival, name, jitter sigma
    if wl is None:
        picks = [(t, t.arrival, t.name, 0.0) for t in templates]
    else:
        rng = np.random.default_rng([spec.seed, 1])
        weights = np.array([wl.mix.get(t.name, 0.0 if wl.mix else 1.0) for t in templates])
        weights = weights / weights.sum()
        gaps = rng.exponential(wl.mean_gap, size=wl.jobs) if wl.mean_gap > 0 else np.zeros(wl.jobs)
        gaps[0] = 0.0
        arrivals = wl.start + np.cumsum(gaps)
        which = rng.choice(len(templates), size=wl.jobs, p=weights)
        width = len(str(wl.jobs - 1))
        picks = [(templates[w], float(a), f"{templates[w].name}-{i:0{width}d}", wl.size_jitter)
                 for i, (w, a) in enumerate(zip(which, arrivals, strict=True))]
    utilities = {t.name: None if t.utility is None else validate_utility(t.utility, f"jobs[{i}].utility")
                 for i, t in enumerate(templates)}
    used = {tpl.name for tpl, *_ in picks}
    for t in templates:
        if t.name not in used:  # no copy of it arrives (mix weight 0): nothing to note
            continue
        if t.stop.max_iterations is not None and t.stop.max_iterations > settings.max_iterations:
            notes.append(f"job {t.name}: stop.max_iterations {t.stop.max_iterations} is above "
                         f"simulation.max_iterations {settings.max_iterations}; its simulated "
                         f"copies stop at {settings.max_iterations} iterations")
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
        cells = cells_of[tpl.name]
        work = cost * cells * factor * settings.work_scale
        if not math.isfinite(work):
            raise ConfigError(
                "simulation.work_scale", settings.work_scale,
                f"job {name!r} ({tpl.algorithm}) would need {work} one-core seconds per "
                f"iteration (cost {cost:g} s per row*feature x {cells:g} rows*features x size "
                f"jitter {factor:.3g} x work_scale): lower simulation.work_scale, "
                f"simulation.scaling.{tpl.algorithm}.cost (or default.cost) or "
                "simulation.workload.size_jitter")
        stop = stop_iteration(curve.losses, tpl.stop.max_iterations, tpl.stop.tolerance,
                              settings.max_iterations)
        scaling = ScalingModel(work=work, overhead=sc.overhead, comm=sc.comm)
        cores = min(tpl.max_cores or settings.capacity, settings.capacity)
        best = work * math.log(2) / sc.comm if sc.comm > 0 else cores  # t(a) is least there
        at = min((1, cores, max(1, min(cores, round(best)))), key=scaling.seconds)
        alone = stop * scaling.seconds(at)
        if alone > MAX_JOB_SECONDS and settings.horizon is None and settings.max_epochs is None:
            fixed = sc.overhead + sc.comm * math.log2(at)
            if fixed >= work / at:  # the per-iteration overhead, not the work, makes it long
                key = _scaling_key(spec, tpl.algorithm, "overhead")
                where, value = (key, sc.overhead) if key else (
                    "simulation.max_iterations", settings.max_iterations)  # built-in overhead: the count
                raise ConfigError(
                    where, value,
                    f"job {name!r} ({tpl.algorithm}) would take {alone:.3g} simulated seconds "
                    f"alone ({stop} iterations of {fixed:.3g} s of overhead and communication "
                    f"on {count(at, 'core')}, {work / at:.3g} s of work), more than {MAX_JOB_SECONDS:.0e}; "
                    f"lower simulation.scaling.{tpl.algorithm}.overhead (or default.overhead), "
                    "simulation.max_iterations or the job's stop.max_iterations, or set "
                    "simulation.horizon, simulation.max_epochs or --max-epochs to simulate part of it")
            raise ConfigError(
                "simulation.work_scale", settings.work_scale,
                f"job {name!r} ({tpl.algorithm}) would take {alone:.3g} simulated seconds alone on "
                f"its best core count ({stop} iterations of {work:.3g} one-core seconds), more "
                f"than {MAX_JOB_SECONDS:.0e}; lower simulation.work_scale, "
                f"simulation.scaling.{tpl.algorithm}.cost or simulation.workload.size_jitter, or "
                "set simulation.horizon, simulation.max_epochs or --max-epochs to simulate part of it")
        widest = stop * scaling.seconds(cores)  # a policy may give it every core it can take
        if widest > MAX_JOB_SECONDS and settings.horizon is None and settings.max_epochs is None:
            key = _scaling_key(spec, tpl.algorithm, "comm")
            where, value = (key, sc.comm) if key else ("simulation.max_iterations", settings.max_iterations)
            raise ConfigError(
                where, value,
                f"job {name!r} ({tpl.algorithm}) would take {widest:.3g} simulated seconds on "
                f"{count(cores, 'core')}, which a policy may give it ({stop} iterations of "
                f"{scaling.seconds(cores):.3g} s, {sc.comm * math.log2(cores):.3g} s of them "
                f"communication), more than {MAX_JOB_SECONDS:.0e}; lower "
                f"simulation.scaling.{tpl.algorithm}.comm (or default.comm) or the job's max_cores, "
                "or set simulation.horizon, simulation.max_epochs or --max-epochs to simulate part of it")
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
            template=tpl.name,
        ))
    out.sort(key=lambda j: (j.arrival, j.name))
    return out
