"""A job's ``dataset:`` mapping: an HDF5 file (``path``) or a synthetic generator with its
parameters, validated into a :class:`~slaq_mpi.data.datasets.DatasetSpec` and what the later
checks need to know of its size."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slaq_mpi.config.schema import LEFT_OUT, Check, Key, Schema
from slaq_mpi.data.datasets import DatasetSpec, check_file
from slaq_mpi.data.generators import (
    GENERATOR_REQUIRED,
    GENERATORS,
    generator_label_problem,
    generator_param_problem,
    generator_top_label,
)
from slaq_mpi.errors import NO_VALUE, ConfigError, DataError

__all__ = ["DatasetFacts", "parse_dataset"]

_SHAPE = "must be {path: file.h5} or {generator: NAME, rows: N, features: N}"


@dataclass(frozen=True)
class DatasetFacts:
    """A job's dataset and its size: rows, features and highest label (None: a file that was
    not opened, or labels that are not read)."""

    spec: DatasetSpec
    rows: int | None = None
    features: int | None = None
    top_label: float | None = None


def parse_dataset(raw: Any, where: str, check_files: bool, solver: Any) -> DatasetFacts:
    """Validate the ``dataset:`` mapping at ``where`` for a job of ``solver``; ``check_files``
    opens a data file to check it and read its size.

    Raises:
        ConfigError: naming the ``dataset.*`` key, the bad value and what is allowed.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, _SHAPE)
    if "path" in raw and "generator" in raw:
        raise ConfigError(where, dict(raw), "give either path (a data file) or generator "
                          "(synthetic data), not both")
    if "path" in raw:
        path = Schema({"path": Key(_data_path)}).parse(raw, where)["path"]
        return _data_file(path, f"{where}.path", solver) if check_files else DatasetFacts(
            DatasetSpec(path=str(Path(path).resolve())))
    return _generated(raw, where, solver)


def _data_path(val: Any, where: str) -> str:
    if not isinstance(val, str) or not val:
        raise ConfigError(where, val, "must be a file path")
    return os.path.expanduser(val)


def _data_file(path: str, where: str, solver: Any) -> DatasetFacts:
    """An HDF5 data file on this machine, checked for ``solver``."""
    if Path(path).is_dir():
        raise ConfigError(where, path, "is a directory; give the HDF5 data file")
    if not Path(path).is_file():
        raise ConfigError(where, path, "the file does not exist")
    try:
        info = check_file(path, solver)
    except DataError as exc:
        raise ConfigError(where, path, f"bad data file: {exc}") from None
    return DatasetFacts(DatasetSpec(path=str(Path(path).resolve())), info.rows, info.features,
                        info.top_label)


def _generated(raw: Mapping[Any, Any], where: str, solver: Any) -> DatasetFacts:
    """Synthetic data: a generator and its parameters (the rules of `slaq data make` too)."""
    gen = raw.get("generator")
    if not isinstance(gen, str) or gen not in GENERATORS:
        allowed = ", ".join(sorted(GENERATORS))
        if "generator" not in raw:  # a key left out has no value to show
            raise ConfigError(f"{where}.generator", NO_VALUE, f"give a generator ({allowed}) or a path")
        raise ConfigError(f"{where}.generator", gen, f"allowed: {allowed} (or give a path)")
    required = f"is required for generator {gen!r}"
    keys = {"generator": Key(default=LEFT_OUT)}
    for name, want in GENERATOR_REQUIRED.items():
        keys[name] = Key(_param(name, want), required=required)
    for name, want in {"seed": int, **GENERATORS[gen][1]}.items():
        keys[name] = Key(_param(name, want), default=LEFT_OUT)
    params = Schema(keys).parse(raw, where)
    del params["generator"]
    problem = generator_label_problem(gen, params, solver)
    if problem is not None:
        suggest = getattr(solver, "dataset_kind", None)
        hint = f" (use {suggest!r})" if suggest and suggest != gen else ""  # not the one refused
        raise ConfigError(f"{where}.generator", gen, problem + hint)
    return DatasetFacts(DatasetSpec(generator=gen, params=params), params["rows"],
                        params["features"], generator_top_label(gen, params))


def _param(name: str, want: type) -> Check:
    """The check of generator parameter ``name``, giving it as ``want`` (int or float)."""
    def check(val: Any, where: str) -> Any:
        beyond = isinstance(val, int) and not isinstance(val, bool) and abs(val) > sys.float_info.max
        problem = generator_param_problem(name, float("inf") if beyond and want is float else val)
        if problem is not None:
            raise ConfigError(where, val, problem)
        return want(val)
    return check
