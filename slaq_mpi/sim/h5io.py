"""Read and write the metrics.h5 schema shared by real runs and simulations.

Schema: root attrs name, policy, seed, capacity, epoch_seconds, mode, config, and stopped
(simulated), workdir and data_files (real runs; docs/metrics.md).
``/jobs/<name>``: datasets loss, time, iter_seconds (f8), cores (i4), throughput (k, 2) f8
(cores, seconds/iteration per epoch run); attrs algorithm, arrival, start, end, status, reason,
convergence, max_cores, attained_core_seconds and (simulator only) l_star, utility (JSON of
the job's ``utility:`` spec, if any) and scaling (work, overhead, comm). ``/epochs``: time
(E,) f8, alloc (E, J) i4 with columns in the order of ``job_names`` (J,) utf-8 strings,
decision_ms (E,), pause_ms (E,), gap_ms (E,) f8 (NaN when simulated), moved (E,) i1.
The same schema as :mod:`slaq_mpi.storage.metrics` (real runs); either reads the other's files.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import h5py
import numpy as np

from slaq_mpi.errors import DAMAGED_FILE_ERRORS, DataError
from slaq_mpi.report.evaluation import JobTrace, RunData
from slaq_mpi.storage import durable

__all__ = ["read_metrics", "write_metrics"]

_STR = h5py.string_dtype(encoding="utf-8")


def write_metrics(path: str | Path, run: RunData) -> None:
    """Write ``run`` to ``path`` atomically (:func:`slaq_mpi.storage.durable.replacing`): a failed or
    interrupted write leaves the old file, and no temp file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + f".tmp{os.getpid()}")
    with durable.replacing(p, tmp) as path_tmp, h5py.File(path_tmp, "w") as f:
        for key in ("name", "policy", "mode", "config"):
            f.attrs[key] = str(getattr(run, key))
        f.attrs["seed"] = int(run.seed)
        f.attrs["capacity"] = int(run.capacity)
        f.attrs["epoch_seconds"] = float(run.epoch_seconds)
        if math.isfinite(run.stopped):
            f.attrs["stopped"] = float(run.stopped)
        jobs = f.create_group("jobs")
        for name, job in run.jobs.items():
            g = jobs.create_group(name)
            g.create_dataset("loss", data=np.asarray(job.loss, dtype="f8"))
            g.create_dataset("time", data=np.asarray(job.time, dtype="f8"))
            g.create_dataset("cores", data=np.asarray(job.cores, dtype="i4"))
            g.create_dataset("iter_seconds", data=np.asarray(job.iter_seconds, dtype="f8"))
            for key in ("algorithm", "status", "reason", "convergence"):
                g.attrs[key] = str(getattr(job, key))
            for key in ("arrival", "start", "end"):
                g.attrs[key] = float(getattr(job, key))
            if job.l_star is not None:
                g.attrs["l_star"] = float(job.l_star)
            g.attrs["max_cores"] = int(job.max_cores)
            g.attrs["attained_core_seconds"] = float(job.attained_core_seconds)
            if job.utility:
                g.attrs["utility"] = json.dumps(job.utility, sort_keys=True)
            if job.scaling is not None:
                g.attrs["scaling"] = np.asarray(job.scaling, dtype="f8")
            thr = job.throughput if job.throughput is not None else np.zeros((0, 2))
            g.create_dataset("throughput", data=np.asarray(thr, dtype="f8").reshape(-1, 2))
        ep = f.create_group("epochs")
        ep.create_dataset("time", data=np.asarray(run.epoch_time, dtype="f8"))
        alloc = np.asarray(run.alloc, dtype="i4").reshape(len(run.epoch_time), len(run.job_names))
        ep.create_dataset("alloc", data=alloc, compression="gzip" if alloc.size > 4096 else None)
        ep.create_dataset("job_names", data=np.array(run.job_names, dtype=object), dtype=_STR)
        ep.create_dataset("decision_ms", data=np.asarray(run.decision_ms, dtype="f8"))
        ep.create_dataset("pause_ms", data=np.asarray(run.pause_ms, dtype="f8"))
        ep.create_dataset("gap_ms", data=np.full(len(run.epoch_time), np.nan))  # live runs only
        moved = run.moved if run.moved is not None else np.zeros(len(run.epoch_time))
        ep.create_dataset("moved", data=np.asarray(moved, dtype="i1"))


def _text(val: object) -> str:
    return val.decode() if isinstance(val, bytes) else str(val)


def _scaling(val: np.ndarray) -> tuple[float, float, float]:
    """The ``scaling`` attribute: (work, overhead, comm)."""
    work, overhead, comm = (float(x) for x in val)
    return work, overhead, comm


def read_metrics(path: str | Path) -> RunData:
    """Read a metrics.h5 written by ``slaq run`` or ``slaq simulate``.

    ``path`` may be the file or a run directory holding ``metrics.h5``.

    Raises:
        DataError: no such file, not a metrics file (no ``/jobs`` and ``/epochs``), or a
            truncated or damaged one; the message names the file.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "metrics.h5"
    if not p.is_file():
        raise DataError(f"{p}: no such file; a run directory holds the metrics.h5 of `slaq run` "
                        "or `slaq simulate --out`")
    try:
        with h5py.File(p, "r") as f:
            if not isinstance(f.get("jobs"), h5py.Group) or not isinstance(f.get("epochs"), h5py.Group):
                raise DataError(f"{p}: not a slaq metrics file (it has no /jobs and /epochs groups)")
            return _read(f, p)
    except DataError:
        raise
    except (OSError, *DAMAGED_FILE_ERRORS) as exc:
        raise DataError(f"{p}: truncated or damaged metrics file ({exc})") from None


def _config_utilities(text: str) -> dict[str, dict[str, float]]:
    """Each job's ``utility:`` in a run's config text (a real run keeps them only there)."""
    import yaml

    from slaq_mpi.config.experiment import yaml_loader
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.policies.utility import validate_utility

    try:
        raw = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a safe loader
        jobs = raw.get("jobs", []) if isinstance(raw, dict) else []
    except yaml.YAMLError:
        return {}
    out = {}
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and "utility" in job:
            try:
                out[str(job.get("name"))] = validate_utility(job["utility"], "utility")
            except ConfigError:
                continue
    return out


def _read(f: h5py.File, p: Path) -> RunData:
    a = f.attrs
    given = _config_utilities(_text(a.get("config", ""))) if _text(a.get("mode", "")) == "run" else {}
    jobs: dict[str, JobTrace] = {}
    for name, g in f.get("jobs", {}).items():
        ga = g.attrs
        l_star = float(ga["l_star"]) if "l_star" in ga else None
        jobs[name] = JobTrace(
            name=name, algorithm=_text(ga.get("algorithm", "")),
            arrival=float(ga.get("arrival", 0.0)),
            loss=np.asarray(g["loss"][()], dtype=np.float64),
            time=np.asarray(g["time"][()], dtype=np.float64),
            cores=np.asarray(g["cores"][()], dtype=np.int32),
            iter_seconds=np.asarray(g["iter_seconds"][()], dtype=np.float64),
            start=float(ga.get("start", math.nan)), end=float(ga.get("end", math.nan)),
            status=_text(ga.get("status", "")), reason=_text(ga.get("reason", "")),
            convergence=_text(ga.get("convergence", "unknown")),
            l_star=l_star if l_star is None or math.isfinite(l_star) else None,
            max_cores=int(ga.get("max_cores", 0)),
            attained_core_seconds=float(ga.get("attained_core_seconds", 0.0)),
            throughput=np.asarray(g["throughput"][()], dtype=np.float64).reshape(-1, 2)
            if "throughput" in g else None,
            utility=json.loads(_text(ga["utility"])) if "utility" in ga else given.get(name),
            scaling=_scaling(ga["scaling"]) if "scaling" in ga else None,
        )
    ep = f.get("epochs")
    if ep is not None and "time" in ep:
        etime = np.asarray(ep["time"][()], dtype=np.float64)
        names = [_text(n) for n in ep["job_names"][()]] if "job_names" in ep else list(jobs)
        alloc = np.asarray(ep["alloc"][()], dtype=np.int32).reshape(len(etime), len(names))
        dec = np.asarray(ep["decision_ms"][()], dtype=np.float64) if "decision_ms" in ep else (
            np.full(len(etime), np.nan))
        pause = np.asarray(ep["pause_ms"][()], dtype=np.float64) if "pause_ms" in ep else (
            np.full(len(etime), np.nan))
        moved = np.asarray(ep["moved"][()]) if "moved" in ep else None
    else:
        etime, names = np.zeros(0), list(jobs)
        alloc = np.zeros((0, len(names)), dtype=np.int32)
        dec, pause, moved = np.zeros(0), np.zeros(0), None
    run = RunData(
        name=_text(a.get("name", p.parent.name)), policy=_text(a.get("policy", "?")),
        seed=int(a.get("seed", 0)), capacity=int(a.get("capacity", 0)),
        epoch_seconds=float(a.get("epoch_seconds", 1.0)), mode=_text(a.get("mode", "run")),
        config=_text(a.get("config", "")), jobs=jobs, job_names=names, epoch_time=etime,
        alloc=alloc, decision_ms=dec, pause_ms=pause, moved=moved,
        stopped=float(a.get("stopped", math.nan)),
    )
    _check(run, p)
    return run


def _check(run: RunData, p: Path) -> None:
    """Refuse what no run writes (a damaged or hand-edited file), which would otherwise fail
    deep in a report, or never end (a simulation from a NaN arrival)."""
    def bad(what: str) -> DataError:
        return DataError(f"{p}: damaged metrics file ({what})")

    if not (math.isfinite(run.epoch_seconds) and run.epoch_seconds > 0):
        raise bad(f"epoch_seconds is {run.epoch_seconds}; a run's is a number > 0")
    for name, job in run.jobs.items():
        if not (math.isfinite(job.arrival) and job.arrival >= 0):
            raise bad(f"job {name}'s arrival is {job.arrival}; a finite time >= 0")
        series = {"loss": job.loss, "time": job.time, "cores": job.cores,
                  "iter_seconds": job.iter_seconds}
        if any(v.ndim != 1 for v in series.values()) or len({v.size for v in series.values()}) > 1:
            shapes = ", ".join(f"{k} {v.shape}" for k, v in series.items())
            raise bad(f"job {name}'s series are {shapes}; one value per iteration each")
    unknown = [n for n in run.job_names if n not in run.jobs]
    if unknown:
        raise bad(f"/epochs names job {unknown[0]}, which /jobs does not hold")
    if not np.all(np.isfinite(run.epoch_time)):
        raise bad("/epochs/time holds a value that is not finite")
