"""The ``simulation:`` settings, as the simulator reads them: the experiment parser validates
the section once into :class:`SimSettings` (:mod:`slaq_mpi.config.simulation`), held by
``spec.simulation``; :func:`parse_settings` adds the check of the one file they name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slaq_mpi.config.simulation import (
    CURVE_SOURCES,
    EPOCH_MODELS,
    ScalingParams,
    SimSettings,
    WorkloadSettings,
    check_policy_name,
)
from slaq_mpi.errors import ConfigError, DataError
from slaq_mpi.sim.curves import CurveLibrary

if TYPE_CHECKING:
    from slaq_mpi.config.experiment import ExperimentSpec

__all__ = [
    "CURVE_SOURCES", "EPOCH_MODELS", "ScalingParams", "SimSettings", "WorkloadSettings",
    "check_curve_file", "check_policy_name", "parse_settings",
]


def parse_settings(spec: ExperimentSpec, check_files: bool = True) -> SimSettings:
    """The simulation settings of ``spec`` (``spec.simulation``); ``check_files`` also checks
    its ``curve_file`` (:func:`check_curve_file`).

    Raises:
        ConfigError: naming ``simulation.curve_file``, when ``check_files`` and it is not a
            curve library.
    """
    if check_files:
        check_curve_file(spec.simulation)
    return spec.simulation


def check_curve_file(settings: SimSettings) -> None:
    """Refuse a ``simulation.curve_file`` that is not a curve library on this machine.

    Raises:
        ConfigError: naming ``simulation.curve_file``, the path and what it must be.
    """
    path, where = settings.curve_file, "simulation.curve_file"
    if path is None:
        return
    if Path(path).is_dir():
        raise ConfigError(where, path, "is a directory; give the .npz file that "
                          "`slaq curves record --out FILE` wrote")
    if not Path(path).is_file():
        raise ConfigError(where, path, "the file does not exist (relative paths are read from the "
                          "working directory; write one with `slaq curves record --out FILE`)")
    try:
        CurveLibrary.load(path)
    except DataError:
        raise ConfigError(where, path, "not a curve library (the .npz file "
                          "`slaq curves record --out FILE` writes)") from None
