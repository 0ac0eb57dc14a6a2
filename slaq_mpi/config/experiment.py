"""The experiment YAML: parsing and validation into an :class:`ExperimentSpec`.

Every section is read once: the jobs (:mod:`slaq_mpi.config.job`), ``slurm:``
(:mod:`slaq_mpi.config.slurm`) and ``simulation:`` (:mod:`slaq_mpi.config.simulation`), each by
the one keyed-mapping validator (:mod:`slaq_mpi.config.schema`). Every error is a
:class:`~slaq_mpi.errors.ConfigError` naming the key, the value and what is allowed.
``docs/config.md`` documents every key.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from slaq_mpi.config.job import REQUIRED, JobSpec, StopRule, check_name, parse_job
from slaq_mpi.config.schema import LEFT_OUT, Key, Schema, flag, integers, numbers, section
from slaq_mpi.config.simulation import SimSettings, simulation_settings
from slaq_mpi.config.slurm import SlurmSettings, settings_from_mapping
from slaq_mpi.config.values import MAX_RANKS
from slaq_mpi.config.yaml_loader import yaml_loader
from slaq_mpi.data.generators import check_generated_space
from slaq_mpi.errors import NO_VALUE, ConfigError

__all__ = [
    "EXPERIMENT_SEED_MAX", "ExperimentSpec", "JobSpec", "StopRule", "check_data_space",
    "check_memory", "input_files", "load", "memory_notes", "parse",
    "require_live", "yaml_loader",
]

EXPERIMENT_SEED_MAX = 2**53  # jobs' default seeds (seed * 1000 + i) must fit SEED_MAX


@dataclass(frozen=True)
class ExperimentSpec:
    """A whole experiment: the scheduler's settings, its jobs and its sections.

    ``slurm`` is None when the YAML has no ``slurm:`` section (``slaq submit`` then applies
    Slurm's defaults: :func:`~slaq_mpi.config.slurm.settings_for`); ``simulation`` always holds
    settings, every default where the YAML gives none.
    """

    name: str
    output_dir: Path
    epoch_seconds: float
    policy: str
    policy_params: Mapping[str, Any]
    ranks: int
    seed: int
    jobs: tuple[JobSpec, ...]
    simulation: SimSettings
    slurm: SlurmSettings | None = None
    source: str = ""
    path: Path | None = None  # the YAML file it was read from
    open: bool = False  # the run waits for added jobs once its own are done (until drained)


def load(path: str | Path, check_files: bool = True) -> ExperimentSpec:
    """Read and validate the experiment YAML at ``path``.

    ``check_files`` also checks what is on this machine: data files and the output directory,
    and it estimates whether every job's model fits in this machine's memory. A model that
    does not is not refused here (the login node that submits is not the node that trains):
    ``slaq run`` refuses it with :func:`check_memory`, ``validate`` and ``submit`` note it.
    """
    p = Path(path)
    if (p / "state.json").is_file():
        raise ConfigError("config file", str(p), f"is a run directory; continue it with "
                          f"`slaq run --resume {shlex.quote(str(p))}`, or give its YAML file")
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError("config file", str(p), f"it must be a readable file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError("config file", str(p), "it must be a YAML text file (UTF-8)") from None
    try:
        raw = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where} YAML syntax", NO_VALUE,
                          f"{problem}; the file must be valid YAML") from None
    except ValueError as exc:  # a scalar PyYAML cannot convert (an integer of 5000 digits, 2024-13-01)
        raise ConfigError("config file", str(p), f"a value in its YAML cannot be read "
                          f"({str(exc).split(';')[0]})") from None
    except RecursionError:
        raise ConfigError("config file", str(p), "its YAML is nested too deeply (an experiment "
                          "file needs a handful of levels)") from None
    spec = parse(raw, check_files=check_files)
    return replace(spec, source=text, path=p)


def check_data_space(spec: ExperimentSpec) -> None:
    """Refuse a fresh run whose generated datasets that neither its output_dir nor the data cache
    holds yet (each distinct one once) do not fit where they are written.

    Raises:
        ConfigError: naming the size and the free space.
    """
    check_generated_space(((j.dataset, j.seed) for j in spec.jobs), spec.output_dir / "data",
                          "the jobs' generated datasets")


def input_files(spec: ExperimentSpec) -> list[Path]:
    """The files a run of ``spec`` reads: its YAML, data files and user solver files (a fresh
    run must not move them aside with an earlier run)."""
    files = []
    if spec.path is not None and not _saved_copy(spec):
        files.append(spec.path)
    for job in spec.jobs:
        if job.dataset.path:
            files.append(Path(job.dataset.path))
        if ".py:" in job.algorithm:
            files.append(Path(job.algorithm.rsplit(":", 1)[0]).expanduser())
    return files


def _saved_copy(spec: ExperimentSpec) -> bool:
    """Whether ``spec`` was read from the ``config.yaml`` an earlier run saved in its own
    output_dir: every rank has read it before the run moves aside, and it is written anew."""
    out = spec.output_dir
    return (spec.path is not None and spec.path.resolve() == (out / "config.yaml").resolve()
            and ((out / "state.json").is_file() or (out / "metrics.h5").is_file()))


def require_live(spec: ExperimentSpec) -> None:
    """Refuse a spec whose policy only the simulator can run (``slaq run`` and ``slaq submit``).

    Raises:
        ConfigError: naming the policy and the policies a live run allows.
    """
    from slaq_mpi.policies import LIVE_POLICY_NAMES

    if spec.policy not in LIVE_POLICY_NAMES:
        raise ConfigError("policy", spec.policy, "it is for `slaq simulate` only (it reads every job's "
                          f"future loss curve); a live run allows: {', '.join(LIVE_POLICY_NAMES)}")


def parse(raw: Any, check_files: bool = True) -> ExperimentSpec:
    """Validate an already-parsed YAML document (``check_files`` as for :func:`load`)."""
    top = _TOP.parse(raw, "")
    name, seed, ranks = top["name"], top["seed"], top["ranks"]
    policy, policy_params = top["policy"]
    jobs = tuple(parse_job(j, i, seed, check_files) for i, j in enumerate(top["jobs"]))
    output_dir = _output_dir(top.get("output_dir", f"runs/{name}"), check_files)
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise ConfigError(f"jobs[{i}].name", job.name, "job names must be unique")
        seen.add(job.name)
    slurm = settings_from_mapping(top["slurm"], ranks=ranks, epoch_seconds=top["epoch_seconds"],
                                  name=name) if top["slurm"] else None
    simulation = simulation_settings(top["simulation"], ranks=ranks, policy=policy,
                                     job_names={j.name for j in jobs},
                                     algorithms=_algorithm_names(jobs))
    return ExperimentSpec(name=name, output_dir=output_dir, epoch_seconds=top["epoch_seconds"],
                          policy=policy, policy_params=policy_params, ranks=ranks, seed=seed,
                          jobs=jobs, simulation=simulation, slurm=slurm, open=top["open"])


# --- pieces ------------------------------------------------------------------------------

def _job_list(val: Any, where: str) -> list[Any]:
    if not isinstance(val, list) or not val:
        raise ConfigError(where, val, "must be a non-empty list of job mappings")
    return val


def _output_path(val: Any, where: str) -> str:
    if not isinstance(val, str) or not val.strip() or "\0" in val:
        raise ConfigError(where, val, "must be a non-empty path string (no NUL byte)")
    return val


def _output_dir(val: str, check_files: bool) -> Path:
    """The run directory: a directory of its own that can be created (checked on disk when
    ``check_files``)."""
    path = Path(_output_path(val, "output_dir")).expanduser()
    if check_files:
        from slaq_mpi.storage.rundir import check_own_dir

        check_own_dir(path, "output_dir")
    return path


def _algorithm_names(jobs: tuple[JobSpec, ...]) -> list[str]:
    """The algorithms ``simulation.scaling`` may name: the built-in ones and the jobs' own."""
    from jobs import ALGORITHMS

    return [*ALGORITHMS, *(j.algorithm for j in jobs)]


_POLICY = Schema({"name": Key(nullable=True, required=REQUIRED),
                  "params": Key(section, nullable=True, default={})})


def _policy(val: Any, where: str) -> tuple[str, dict[str, Any]]:
    """The policy's name and parameters, checked by building the policy."""
    from slaq_mpi.policies import PolicyError, get_policy

    if isinstance(val, str):
        name, params = val, {}
    elif isinstance(val, Mapping):
        given = _POLICY.parse(val, where)
        name, params = str(given["name"]), {str(k): v for k, v in given["params"].items()}
    else:
        raise ConfigError(where, val, "must be a policy name or {name: ..., params: {...}}")
    try:
        get_policy(name, **params)
    except PolicyError as exc:
        text = str(exc)
        raise ConfigError(where, val, text.split("; ", 1)[-1] if text.startswith("unknown policy")
                          else text) from None
    return name, params


_TOP = Schema({  # checked in this order; the jobs, output_dir and sections then in full
    "name": Key(check_name, nullable=True, required=REQUIRED),
    "seed": Key(integers(0, EXPERIMENT_SEED_MAX), default=0),
    "ranks": Key(integers(2, MAX_RANKS), default=8),
    "policy": Key(_policy, default=("slaq", {})),
    "jobs": Key(_job_list, nullable=True, required=REQUIRED),
    "output_dir": Key(_output_path, default=LEFT_OUT),
    "slurm": Key(section, nullable=True, default={}),
    "simulation": Key(section, nullable=True, default={}),
    "epoch_seconds": Key(numbers(0.05), default=2.0),
    "open": Key(flag, default=False),
})


def check_memory(spec: ExperimentSpec) -> None:
    """Refuse a spec with a job whose model (every rank of the job holds a full copy) cannot
    fit in this machine's memory: ``slaq run``, on the machines its ranks run on.

    Raises:
        ConfigError: the first such job's problem (see :func:`memory_notes`).
    """
    for job in spec.jobs:
        if job.memory_problem is not None:
            raise ConfigError(*job.memory_problem)


def memory_notes(spec: ExperimentSpec) -> list[str]:
    """One line per job whose model cannot fit in this machine's memory."""
    return [str(ConfigError(*job.memory_problem)) for job in spec.jobs
            if job.memory_problem is not None]
