"""Jobs added to a running run (``slaq add``): validated against the run's own config exactly
as its YAML was, and kept in ``RUN_DIR/added.yaml`` so that a resumed or requeued run has
them too.

``added.yaml`` is a YAML list of job entries as given, each with its ``arrival`` set to the
experiment seconds at which rank 0 admitted it (plus the delay the entry asked for). The run's
``config.yaml`` is never changed.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from slaq_mpi.config.experiment import ExperimentSpec, parse
from slaq_mpi.config.yaml_loader import yaml_loader
from slaq_mpi.errors import NO_VALUE, ConfigError
from slaq_mpi.storage.durable import replacing

__all__ = ["ADDED_FILE", "added_entries", "new_jobs", "read_entries", "record_added", "with_added"]

ADDED_FILE = "added.yaml"
_INDEX = re.compile(r"^jobs\[(\d+)\]")


def added_entries(run_dir: Path) -> list[dict[str, Any]]:
    """The job entries added to the run so far (none: ``[]``)."""
    path = run_dir / ADDED_FILE
    if not path.is_file():
        return []
    entries = yaml.safe_load(path.read_text()) or []
    if not isinstance(entries, list):
        raise ConfigError(str(path), NO_VALUE, "must hold a YAML list of job entries (written by "
                                               "slaq add; do not edit it)")
    return entries


def with_added(spec: ExperimentSpec, run_dir: Path, check_files: bool = True) -> ExperimentSpec:
    """``spec`` (the run's config.yaml) with the jobs added to the run."""
    entries = added_entries(run_dir)
    if not entries:
        return spec
    return replace(spec, jobs=_parse_all(spec, entries, check_files).jobs)


def read_entries(text: str, where: str) -> list[dict[str, Any]]:
    """The job entries of a ``slaq add`` file: a YAML list of jobs, one job mapping, or a
    mapping with a ``jobs:`` list.

    Raises:
        ConfigError: not YAML, or none of those shapes.
    """
    try:
        raw = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{at} YAML syntax", NO_VALUE, f"{problem}; the file must be valid YAML") from None
    if isinstance(raw, dict) and "jobs" in raw and set(raw) == {"jobs"}:
        raw = raw["jobs"]
    elif isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(e, dict) for e in raw):
        raise ConfigError(where, NO_VALUE, "must hold job entries: a list of job mappings (the "
                                           "schema of `jobs:`), one job mapping, or {jobs: [...]}")
    return raw


def new_jobs(spec: ExperimentSpec, run_dir: Path, entries: list[dict[str, Any]],
             check_files: bool = True) -> ExperimentSpec:
    """The run's spec with ``entries`` added after every job it has (config.yaml's and those
    added before), validated as the config is: unique names, known algorithms, data files,
    hyperparameters, stop rules. An error names the entry (``added job N``).

    Raises:
        ConfigError: an entry that the run's config would refuse.
    """
    before = [*_raw(spec)["jobs"], *added_entries(run_dir)]
    try:
        return _parse_all(spec, [*added_entries(run_dir), *entries], check_files)
    except ConfigError as exc:
        found = _INDEX.match(exc.where)
        if found and int(found.group(1)) >= len(before):
            where = f"added job {int(found.group(1)) - len(before) + 1}" + exc.where[found.end():]
            raise ConfigError(where, exc.value, exc.allowed) from None
        raise


def record_added(run_dir: Path, entries: list[dict[str, Any]]) -> None:
    """Append ``entries`` (their ``arrival`` already absolute) to ``added.yaml``, atomically."""
    path = run_dir / ADDED_FILE
    everything = [*added_entries(run_dir), *entries]
    with replacing(path, run_dir / f".{ADDED_FILE}.tmp") as tmp:
        tmp.write_text(yaml.safe_dump(everything, sort_keys=False))


def _raw(spec: ExperimentSpec) -> dict[str, Any]:
    raw = yaml.load(spec.source, Loader=yaml_loader())  # noqa: S506 - a safe loader
    if not isinstance(raw, dict):
        raise ConfigError("config.yaml", NO_VALUE, "the run's saved config is not a YAML mapping")
    return raw


def _parse_all(spec: ExperimentSpec, entries: list[dict[str, Any]], check_files: bool) -> ExperimentSpec:
    raw = _raw(spec)
    raw["jobs"] = [*raw["jobs"], *entries]
    return replace(parse(raw, check_files=check_files), source=spec.source, path=spec.path)
