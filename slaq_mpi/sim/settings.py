"""The ``simulation:`` settings, as the simulator reads them: the experiment parser validates
the section once into :class:`SimSettings` (:mod:`slaq_mpi.config.simulation`), held by
``spec.simulation``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slaq_mpi.config.simulation import (
    CURVE_SOURCES,
    EPOCH_MODELS,
    ScalingParams,
    SimSettings,
    WorkloadSettings,
    check_curve_file,
    check_policy_name,
)

if TYPE_CHECKING:
    from slaq_mpi.config.experiment import ExperimentSpec

__all__ = [
    "CURVE_SOURCES", "EPOCH_MODELS", "ScalingParams", "SimSettings", "WorkloadSettings",
    "check_policy_name", "parse_settings",
]


def parse_settings(spec: ExperimentSpec, check_files: bool = True) -> SimSettings:
    """The simulation settings of ``spec`` (``spec.simulation``); ``check_files`` also checks
    that its ``curve_file`` is a curve library on this machine.

    Raises:
        ConfigError: naming ``simulation.curve_file``, when ``check_files`` and it is not one.
    """
    if check_files:
        check_curve_file(spec.simulation)
    return spec.simulation
