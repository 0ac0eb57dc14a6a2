"""Simulate an experiment under several policies, and compare a simulation with a real run."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from slaq_mpi._text import count
from slaq_mpi.config.saved import read_run
from slaq_mpi.errors import DataError
from slaq_mpi.policies import get_policy
from slaq_mpi.policies.snapshot import DEFAULT_MOVE_SECONDS
from slaq_mpi.policies.utility import validate_utility
from slaq_mpi.report.evaluation import observed_end
from slaq_mpi.sim.curves import CurveLibrary, extend
from slaq_mpi.sim.engine import simulate
from slaq_mpi.sim.scaling import ScalingModel, fit_scaling
from slaq_mpi.sim.settings import SimSettings, parse_settings
from slaq_mpi.sim.workload import SimJob, build_workload, stop_iteration
from slaq_mpi.storage.metrics import JobTrace, RunData, write_metrics

__all__ = ["Comparison", "SimWorkload", "compare_with_run", "measured_move_seconds", "prepare",
           "read_real_run", "run_policies", "run_workload", "share_difference"]


def prepare(spec: Any, library: CurveLibrary | None = None, notes: list[str] | None = None,
            max_epochs: int | None = None) -> tuple[SimSettings, list[SimJob]]:
    """Validated settings and the simulated workload of ``spec``; ``max_epochs`` (as
    ``--max-epochs``) replaces ``simulation.max_epochs``."""
    settings = parse_settings(spec)
    if max_epochs is not None:
        settings = replace(settings, max_epochs=max_epochs)
    if library is None:
        library = CurveLibrary.load(settings.curve_file)
    return settings, build_workload(spec, settings, library, notes)


def run_policies(spec: Any, policies: Sequence[str] | None = None, out: str | Path | None = None,
                 progress: Callable[[str], None] | None = None, max_epochs: int | None = None,
                 library: CurveLibrary | None = None) -> dict[str, RunData]:
    """Simulate ``spec`` under each policy on the same workload; write OUT/<policy>/metrics.h5."""
    return run_workload(spec, policies, out, progress, max_epochs, library)[1]


def run_workload(spec: Any, policies: Sequence[str] | None = None, out: str | Path | None = None,
                 progress: Callable[[str], None] | None = None, max_epochs: int | None = None,
                 library: CurveLibrary | None = None,
                 ) -> tuple[SimWorkload, dict[str, RunData]]:
    """As :func:`run_policies`, also returning the workload simulated (for its bound)."""
    notes: list[str] = []
    settings, jobs = prepare(spec, library, notes, max_epochs)
    for note in notes:
        if progress:
            progress(f"note: {note}")
    names = list(policies) if policies else list(settings.policies)
    runs: dict[str, RunData] = {}
    for name in names:
        params = dict(spec.policy_params) if name == spec.policy else {}
        policy = get_policy(name, **params)
        if progress:
            progress(f"simulating {name}: {count(len(jobs), 'job')} on {settings.capacity} cores, "
                     f"epoch {spec.epoch_seconds:g} s")
        run = simulate(
            jobs, policy, capacity=settings.capacity, epoch_seconds=spec.epoch_seconds,
            name=spec.name, seed=spec.seed, config_text=spec.source,
            time_noise=settings.time_noise, reconfigure_seconds=settings.reconfigure_seconds,
            max_epochs=settings.max_epochs,
            horizon=settings.horizon, progress=progress, epoch_model=settings.epoch_model,
        )
        run.policy = name
        runs[name] = run
        if out is not None:
            write_metrics(Path(out) / name / "metrics.h5", run)
    return SimWorkload(jobs, settings.capacity), runs


@dataclass(frozen=True)
class SimWorkload:
    """The jobs of a simulation and the cores they shared."""

    jobs: list[SimJob]
    capacity: int


def _shares_at(run: RunData, t: np.ndarray, names: list[str]) -> np.ndarray:
    """(len(t), len(names)) core shares of ``run`` at times ``t`` (the epoch in force; a job
    that has ended holds none, also after the run's last epoch)."""
    out = np.zeros((len(t), len(names)))
    if len(run.epoch_time) == 0 or run.capacity <= 0:
        return out
    idx = np.searchsorted(run.epoch_time, t, side="right") - 1
    cols = {n: i for i, n in enumerate(run.job_names)}
    for k, name in enumerate(names):
        if name in cols:
            end = run.jobs[name].end
            ok = (idx >= 0) & ~(t >= end)  # end is NaN while the job has not ended
            out[ok, k] = run.alloc[idx[ok], cols[name]] / run.capacity
    return out


def share_difference(real: RunData, sim: RunData) -> float:
    """Mean over the real run's epochs of the total-variation distance of core shares.

    At each epoch start t of ``real``, both runs' allocations (the epoch in force at t) are
    turned into shares of the capacity per job; the distance is half the sum over jobs of
    ``|share_real - share_sim|``: the fraction of the cores the two runs gave differently.
    """
    names = sorted(set(real.job_names) | set(sim.job_names))
    t = np.asarray(real.epoch_time, dtype=np.float64)
    if len(t) == 0:
        return math.nan
    diff = np.abs(_shares_at(real, t, names) - _shares_at(sim, t, names)).sum(axis=1) / 2.0
    return float(diff.mean())


@dataclass
class Comparison:
    """A real run against its calibrated simulation."""

    real: RunData
    simulated: RunData
    scaling: dict[str, ScalingModel]
    mean_share_difference: float


def measured_move_seconds(run: RunData) -> float:
    """The move cost a run measured: the median of its decisions' move pauses (``pause_ms``,
    NaN where a decision moved no job), in seconds; else
    :data:`~slaq_mpi.policies.snapshot.DEFAULT_MOVE_SECONDS`."""
    pauses = np.asarray(run.pause_ms, dtype=np.float64)
    pauses = pauses[np.isfinite(pauses) & (pauses >= 0)]
    return float(np.median(pauses)) / 1000.0 if pauses.size else DEFAULT_MOVE_SECONDS


def read_real_run(run_dir: str | Path) -> RunData:
    """The metrics of a real run (``slaq run``), refusing a simulated one.

    A simulation's jobs need not be the ``jobs:`` entries of its config (a workload names
    copies of them, ``urgent-03``), so it cannot be calibrated as a real run is.

    Raises:
        DataError: not a metrics file (:func:`~slaq_mpi.config.saved.read_run`), or one of
            ``slaq simulate``.
    """
    real = read_run(run_dir)
    if real.mode == "simulate":
        raise DataError(f"{run_dir} is a simulated run (its metrics.h5 has mode 'simulate'); "
                        "sim-check compares a real run (slaq run) with its simulation")
    return real


def _replayed_job(tr: JobTrace, tpl: Any, model: ScalingModel, capacity: int,
                  utility: dict[str, float] | None) -> SimJob | None:
    """A real run's job as the simulator replays it: the losses it reported (to where it
    failed, or on to its stop rule), at the scaling ``model`` fitted to it; None for a job
    that failed before reporting a finite loss. ``tpl`` is its ``jobs:`` entry (None: none)."""
    curve = np.asarray(tr.loss, dtype=np.float64)
    stop = tpl.stop if tpl is not None else None
    if tr.status == "failed":  # it ended where it failed (its last loss may be NaN/inf)
        n_stop = len(curve)
        curve = curve[np.isfinite(curve)]
        if len(curve) == 0:
            return None
    else:
        n_stop = stop_iteration(curve, stop.max_iterations if stop else None,
                                stop.tolerance if stop else None, len(curve))
        if tr.status != "done":
            n_stop = max(n_stop, len(curve))
    return SimJob(
        name=tr.name, algorithm=tr.algorithm, convergence=tr.convergence, arrival=tr.arrival,
        curve=extend(curve, n_stop + 1), l_star=float(np.min(curve)), scaling=model,
        max_cores=min((tpl.max_cores if tpl and tpl.max_cores else capacity), capacity),
        stop_iter=n_stop, max_iterations=stop.max_iterations if stop else None, utility=utility,
    )


def compare_with_run(run_dir: str | Path, progress: Callable[[str], None] | None = None,
                     out: str | Path | None = None, epoch_model: str = "live") -> Comparison:
    """Calibrate the simulator from a real run's metrics.h5, simulate it, compare allocations.

    Each job replays the losses it really reported (so curves are exact), arrives when it
    really arrived, and runs at a scaling model fitted to its observed (cores, seconds per
    iteration); the run's own policy, capacity and epoch length are used, by default the
    ``live`` epoch model of the MPI runtime, and as the move cost the run's measured one
    (:func:`measured_move_seconds`). Each job keeps its ``utility:`` spec from the run's
    config, as in ``slaq simulate``.

    Raises:
        DataError: ``run_dir`` holds no metrics, or those of a simulation (:func:`read_real_run`).
        ConfigError: a ``utility:`` spec of the run's config that is not valid.
    """
    import yaml

    from slaq_mpi.config import experiment as cfg

    real = read_real_run(run_dir)
    # the run's own loader: its config may write 1e-4, which YAML 1.1's safe_load reads as text
    raw = yaml.load(real.config, Loader=cfg.yaml_loader())  # noqa: S506 - a safe loader
    spec = cfg.parse(raw, check_files=False)
    templates = {j.name: j for j in spec.jobs}
    utilities = {j.name: validate_utility(j.utility, f"jobs[{i}].utility")
                 for i, j in enumerate(spec.jobs) if j.utility is not None}
    fitted: dict[str, ScalingModel] = {}
    jobs: list[SimJob] = []
    for name, tr in real.jobs.items():
        if len(tr.loss) == 0:
            continue
        try:
            fitted[name] = fit_scaling(zip(tr.cores.tolist(), tr.iter_seconds.tolist(), strict=True))
        except ValueError:
            fitted[name] = ScalingModel(work=1.0)
        job = _replayed_job(tr, templates.get(name), fitted[name], real.capacity, utilities.get(name))
        if job is not None:
            jobs.append(job)
    jobs.sort(key=lambda j: (j.arrival, j.name))
    policy = get_policy(real.policy, **(dict(spec.policy_params) if real.policy == spec.policy else {}))
    end = observed_end(real)  # the simulation covers what the real run observed
    horizon = end if math.isfinite(end) else None
    sim = simulate(jobs, policy, capacity=real.capacity, epoch_seconds=real.epoch_seconds,
                   name=real.name, seed=real.seed, config_text=real.config, horizon=horizon,
                   progress=progress, epoch_model=epoch_model,
                   reconfigure_seconds=measured_move_seconds(real))
    sim.policy = real.policy
    if out is not None:
        write_metrics(Path(out) / "metrics.h5", sim)
    return Comparison(real, sim, fitted, share_difference(real, sim))
