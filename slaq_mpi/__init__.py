"""slaq-mpi: quality-driven scheduling of approximate ML training jobs on one MPI world."""

from slaq_mpi import (
    _early_signals,  # noqa: F401 - first: a rank's stop signal is kept from the start
    _path,  # noqa: F401 - before `jobs` is imported: the working directory must not shadow it
)
from slaq_mpi.config import ExperimentSpec, JobSpec, StopRule, load
from slaq_mpi.errors import ConfigError, DataError, SlaqError, WorkerError
from slaq_mpi.policies import get_policy
from slaq_mpi.snapshot import ClusterSnapshot, JobSnapshot

__all__ = [
    "ClusterSnapshot",
    "ConfigError",
    "DataError",
    "ExperimentSpec",
    "JobSnapshot",
    "JobSpec",
    "SlaqError",
    "StopRule",
    "WorkerError",
    "get_policy",
    "load",
]
__version__ = "0.1.0"
