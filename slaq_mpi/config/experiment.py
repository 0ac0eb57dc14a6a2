"""The experiment YAML: parsing and validation into an :class:`ExperimentSpec`.

Every error is a :class:`~slaq_mpi.errors.ConfigError` naming the key, the value and what is
allowed. ``docs/config.md`` documents every key.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slaq_mpi.config.model_size import ModelSizes, model_memory_problem
from slaq_mpi.config.values import MAX_RANKS, integer, number
from slaq_mpi.data.datasets import DatasetSpec, check_file
from slaq_mpi.data.generators import (
    GENERATOR_REQUIRED,
    GENERATORS,
    SEED_MAX,
    check_space,
    generated_bytes,
    generator_label_problem,
    generator_param_problem,
    generator_top_label,
)
from slaq_mpi.errors import NO_VALUE, ConfigError, DataError

EXPERIMENT_SEED_MAX = 2**53  # jobs' default seeds (seed * 1000 + i) must fit SEED_MAX
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TOP_KEYS = {
    "name", "output_dir", "epoch_seconds", "policy", "ranks", "seed", "jobs", "slurm",
    "simulation",
}
_JOB_KEYS = {
    "name", "algorithm", "dataset", "hyperparameters", "arrival", "stop", "max_cores", "seed",
    "utility",
}


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
    #: why the model would not fit in this machine's memory, as ConfigError arguments
    #: (see :func:`check_memory`)
    memory_problem: tuple[str, Any, str] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ExperimentSpec:
    """A whole experiment: the scheduler's settings and its jobs."""

    name: str
    output_dir: Path
    epoch_seconds: float
    policy: str
    policy_params: Mapping[str, Any]
    ranks: int
    seed: int
    jobs: tuple[JobSpec, ...]
    slurm: Mapping[str, Any] = field(default_factory=dict)
    simulation: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    path: Path | None = None  # the YAML file it was read from


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (it keeps the last), and
    reading ``1e-4`` as a number as YAML 1.2 does (PyYAML's YAML 1.1 wants ``1.0e-4``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:  # before merge keys (<<: *anchor) are flattened in
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a key written here may override a merged one
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # PyYAML reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# exponent floats without a dot or a signed exponent (1e-4, 2E9, -3e+2): text to YAML 1.1
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def yaml_loader() -> type[yaml.SafeLoader]:
    """The YAML loader of experiment files (safe; refuses duplicate keys; reads 1e-4 as a number)."""
    return _Loader


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
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where} YAML syntax", NO_VALUE,
                          f"{problem}; the file must be valid YAML") from None
    except RecursionError:
        raise ConfigError("config file", str(p), "its YAML is nested too deeply (an experiment "
                          "file needs a handful of levels)") from None
    spec = parse(raw, check_files=check_files)
    return ExperimentSpec(**{**spec.__dict__, "source": text, "path": p})


def check_data_space(spec: ExperimentSpec) -> None:
    """Refuse a fresh run whose generated datasets (each distinct one once) do not fit in the
    free space under its output_dir (a fresh run generates them all again).

    Raises:
        ConfigError: naming the size and the free space.
    """
    distinct = {j.dataset.key(j.seed): j.dataset for j in spec.jobs if j.dataset.generator is not None}
    check_space(sum(map(generated_bytes, distinct.values())), spec.output_dir,
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


def check_sections(spec: ExperimentSpec, simulation_files: bool = True) -> None:
    """Validate the ``slurm:`` and ``simulation:`` sections of ``spec``.

    Every command that starts something from a config (``validate``, ``run``, ``submit``,
    ``simulate``) checks both, so a typo in either is refused whichever command meets it first.
    A config without a ``slurm:`` section is not held to Slurm's defaults here (``submit``
    checks those), and ``simulation_files=False`` (a live run) leaves out whether the
    simulator's ``curve_file`` exists. A resumed run is not checked again: its config was
    accepted when it started.

    Raises:
        ConfigError: naming the ``slurm.*`` or ``simulation.*`` key, the value and what is allowed.
    """
    from slaq_mpi.sim.settings import parse_settings
    from slaq_mpi.slurm.settings import settings_for

    if spec.slurm:  # a section given (parse keeps an absent one as empty)
        settings_for(spec)
    parse_settings(spec, check_files=simulation_files)


def parse(raw: Any, check_files: bool = True) -> ExperimentSpec:
    """Validate an already-parsed YAML document (``check_files`` as for :func:`load`)."""
    top = _mapping(raw, "config", _TOP_KEYS)
    name = _name(_req(top, "name", "config"), "name")
    seed = integer(top.get("seed", 0), "seed", lo=0, hi=EXPERIMENT_SEED_MAX)
    ranks = integer(top.get("ranks", 8), "ranks", lo=2, hi=MAX_RANKS)
    policy, policy_params = _policy(top.get("policy", "slaq"))
    jobs_raw = _req(top, "jobs", "config")
    if not isinstance(jobs_raw, list) or not jobs_raw:
        raise ConfigError("jobs", jobs_raw, "must be a non-empty list of job mappings")
    jobs = tuple(_job(j, i, seed, check_files) for i, j in enumerate(jobs_raw))
    output_dir = _output_dir(top.get("output_dir", f"runs/{name}"), check_files)
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise ConfigError(f"jobs[{i}].name", job.name, "job names must be unique")
        seen.add(job.name)
    slurm = _section(top, "slurm", "config")
    simulation = _section(top, "simulation", "config")
    return ExperimentSpec(
        name=name,
        output_dir=output_dir,
        epoch_seconds=number(top.get("epoch_seconds", 2.0), "epoch_seconds", lo=0.05),
        policy=policy,
        policy_params=policy_params,
        ranks=ranks,
        seed=seed,
        jobs=jobs,
        slurm=dict(slurm),
        simulation=dict(simulation),
    )


# --- pieces ------------------------------------------------------------------------------

def _output_dir(val: Any, check_files: bool) -> Path:
    """The run directory: a directory of its own that can be created (checked on disk when
    ``check_files``)."""
    if not isinstance(val, str) or not val.strip() or "\0" in val:
        raise ConfigError("output_dir", val, "must be a non-empty path string (no NUL byte)")
    path = Path(val).expanduser()
    if check_files:
        from slaq_mpi.storage.rundir import check_own_dir

        check_own_dir(path, "output_dir")
    return path


def _policy(val: Any) -> tuple[str, dict[str, Any]]:
    from slaq_mpi.policies import PolicyError, get_policy

    params: Mapping[str, Any]
    if isinstance(val, str):
        name, params = val, {}
    elif isinstance(val, Mapping):
        _mapping(val, "policy", {"name", "params"})
        name = _req(val, "name", "policy")
        params = _section(val, "params", "policy")
    else:
        raise ConfigError("policy", val, "must be a policy name or {name: ..., params: {...}}")
    try:
        get_policy(str(name), **dict(params))
    except PolicyError as exc:
        text = str(exc)
        raise ConfigError("policy", val, text.split("; ", 1)[-1] if text.startswith("unknown policy")
                          else text) from None
    return str(name), dict(params)


def _job(raw: Any, i: int, seed: int, check_files: bool) -> JobSpec:
    where = f"jobs[{i}]"
    job = _mapping(raw, where, _JOB_KEYS)
    name = _name(_req(job, "name", where), f"{where}.name")
    algorithm = _req(job, "algorithm", where)
    solver = _solver_class(algorithm, f"{where}.algorithm")
    given = _mapping(_section(job, "hyperparameters", where), f"{where}.hyperparameters",
                     set(solver.defaults))
    hyper: dict[str, Any] = {}  # as given, an int where a float is wanted made a float
    for key, val in given.items():
        default = solver.defaults[key]
        want = type(default)
        ok = isinstance(val, want) and not (want is not bool and isinstance(val, bool))
        if want is float and isinstance(val, int) and not isinstance(val, bool):
            ok, val = True, float(val)
        if not ok:
            raise ConfigError(f"{where}.hyperparameters.{key}", val, f"must be of type {want.__name__}")
        hyper[key] = val
    dataset, rows, features, top = _dataset(_req(job, "dataset", where), f"{where}.dataset",
                                            check_files, solver)
    problem = getattr(solver, "hyperparameter_problem", None)  # a user solver may lack it
    params = {**solver.defaults, **hyper}
    found = problem(params, rows) if problem is not None else None
    if found is not None:
        key, allowed = found
        raise ConfigError(f"{where}.hyperparameters.{key}", params[key],
                          allowed + ("" if key in hyper else " (this is the default; set it)"))
    count = getattr(solver, "class_count", "")  # the hyperparameter that counts classes
    if count and top is not None and 0 < params[count] <= top:
        raise ConfigError(f"{where}.hyperparameters.{count}", params[count],
                          f"the labels go up to {top:g}: must be at least {top + 1:g}, or 0 to "
                          "count the classes from the labels")
    stop = _stop(_section(job, "stop", where), f"{where}.stop")
    memory_problem = None
    if check_files and rows is not None and features is not None:
        memory_problem = model_memory_problem(where, name, str(algorithm), solver, hyper, ModelSizes(
            rows, features, top, stop.max_iterations, dataset))
    max_cores = job.get("max_cores")
    if max_cores is not None:
        max_cores = integer(max_cores, f"{where}.max_cores", lo=1)
    utility = job.get("utility")
    if utility is not None:
        from slaq_mpi.policies.utility import validate_utility

        utility = validate_utility(utility, f"{where}.utility")
    return JobSpec(
        name=name,
        algorithm=str(algorithm),
        dataset=dataset,
        hyperparameters=dict(hyper),
        arrival=number(job.get("arrival", 0.0), f"{where}.arrival", lo=0.0),
        stop=stop,
        max_cores=max_cores,
        seed=integer(job.get("seed", seed * 1000 + i), f"{where}.seed", lo=0, hi=SEED_MAX),
        utility=dict(utility) if utility is not None else None,
        memory_problem=memory_problem,
    )


def _solver_class(algorithm: Any, where: str) -> Any:
    from jobs import ALGORITHMS, load_solver

    if not isinstance(algorithm, str):
        raise ConfigError(where, algorithm, "must be a string")
    try:
        return load_solver(algorithm)
    except KeyError:
        allowed = ", ".join(sorted(ALGORITHMS))
        raise ConfigError(where, algorithm, f"allowed: {allowed}, or path/to/file.py:ClassName") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user's solver file may raise anything on import
        raise ConfigError(where, algorithm, f"the solver file or class does not load "
                          f"({exc.__class__.__name__}: {exc})") from None


def _dataset(raw: Any, where: str, check_files: bool,
             solver: Any) -> tuple[DatasetSpec, int | None, int | None, float | None]:
    """The dataset spec, its rows, its features and its highest label (None: a file that was
    not opened, or labels that are not read)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "must be {path: file.h5} or {generator: NAME, rows: N, features: N}")
    if "path" in raw and "generator" in raw:
        raise ConfigError(where, dict(raw), "give either path (a data file) or generator "
                          "(synthetic data), not both")
    if "path" in raw:
        _mapping(raw, where, {"path"})
        path = raw["path"]
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{where}.path", path, "must be a file path")
        path = os.path.expanduser(path)
        rows, features, top = None, None, None
        if check_files:
            if Path(path).is_dir():
                raise ConfigError(f"{where}.path", path, "is a directory; give the HDF5 data file")
            if not Path(path).is_file():
                raise ConfigError(f"{where}.path", path, "the file does not exist")
            try:
                info = check_file(path, solver)
            except DataError as exc:
                raise ConfigError(f"{where}.path", path, f"bad data file: {exc}") from None
            rows, features, top = info.rows, info.features, info.top_label
        return DatasetSpec(path=str(Path(path).resolve())), rows, features, top
    gen = raw.get("generator")
    if gen not in GENERATORS:
        allowed = ", ".join(sorted(GENERATORS))
        if "generator" not in raw:  # a key left out has no value to show
            raise ConfigError(f"{where}.generator", NO_VALUE, f"give a generator ({allowed}) or a path")
        raise ConfigError(f"{where}.generator", gen, f"allowed: {allowed} (or give a path)")
    optional = GENERATORS[gen][1]
    params = _mapping(raw, where, {"generator", "seed", *GENERATOR_REQUIRED, *optional})
    out: dict[str, Any] = {}
    for key, want in {**GENERATOR_REQUIRED, "seed": int, **optional}.items():
        if key not in params:
            if key in GENERATOR_REQUIRED:
                raise ConfigError(f"{where}.{key}", NO_VALUE, f"is required for generator {gen!r}")
            continue
        problem = generator_param_problem(key, params[key])  # the rules of `slaq data make` too
        if problem is not None:
            raise ConfigError(f"{where}.{key}", params[key], problem)
        out[key] = want(params[key])
    problem = generator_label_problem(str(gen), out, solver)
    if problem is not None:
        suggest = getattr(solver, "dataset_kind", None)
        hint = f" (use {suggest!r})" if suggest and suggest != gen else ""  # not the one refused
        raise ConfigError(f"{where}.generator", gen, problem + hint)
    return (DatasetSpec(generator=str(gen), params=out), out["rows"], out["features"],
            generator_top_label(str(gen), out))


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


def _stop(raw: Any, where: str) -> StopRule:
    stop = _mapping(raw, where, {"max_iterations", "tolerance"})
    for key, val in stop.items():
        if val is None:
            raise ConfigError(f"{where}.{key}", val, "must be a number; leave the key out for the "
                              "default (200 iterations when no tolerance is given)")
    max_it = stop.get("max_iterations", 200 if "tolerance" not in stop else None)
    tol = stop.get("tolerance")
    if max_it is not None:
        max_it = integer(max_it, f"{where}.max_iterations", lo=1)
    if tol is not None:
        tol = number(tol, f"{where}.tolerance", lo=0.0, open_lo=True)
    return StopRule(max_iterations=max_it, tolerance=tol)


def _mapping(raw: Any, where: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "must be a mapping of key: value")
    for key in raw:
        if key not in allowed:
            shown = ", ".join(sorted(allowed)) or "none"
            raise ConfigError(f"{where}.{key}" if where != "config" else str(key), NO_VALUE,
                              f"unknown key; allowed keys: {shown}")
    return raw


def _section(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """The mapping under ``key`` (empty if the key is absent or left empty)."""
    val = raw.get(key)
    if val is None:
        return {}
    if not isinstance(val, Mapping):
        full = key if where == "config" else f"{where}.{key}"
        raise ConfigError(full, val, "must be a mapping of key: value (or leave the key out)")
    return val


def _req(raw: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in raw or raw[key] is None:
        full = key if where == "config" else f"{where}.{key}"
        raise ConfigError(full, NO_VALUE if key not in raw else None, "this key is required")
    return raw[key]


def _name(val: Any, where: str) -> str:
    if not isinstance(val, str) or not _NAME.fullmatch(val):
        raise ConfigError(where, val, "must be 1-64 characters of letters, digits, '_', '.', '-'")
    return val
