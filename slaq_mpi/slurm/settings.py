"""The ``slurm:`` settings, as the Slurm side reads them: the experiment parser validates the
section once into :class:`SlurmSettings` (:mod:`slaq_mpi.config.slurm`); ``spec.slurm`` holds
them, and :func:`settings_for` fills in Slurm's defaults for a spec without a ``slurm:`` section.
"""

from slaq_mpi.config.slurm import (
    LAUNCHERS,
    SlurmSettings,
    parse_time,
    settings_for,
    settings_from_mapping,
)

__all__ = ["LAUNCHERS", "SlurmSettings", "parse_time", "settings_for", "settings_from_mapping"]
