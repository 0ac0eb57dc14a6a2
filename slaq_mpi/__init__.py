"""slaq-mpi: quality-driven scheduling of approximate ML training jobs on one MPI world.

Importing the package has no side effects: the public names below are loaded on first use,
so ``python -m slaq_mpi`` can fix ``sys.path`` before any solver module is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ExperimentSpec": "slaq_mpi.config.experiment",
    "JobSpec": "slaq_mpi.config.experiment",
    "StopRule": "slaq_mpi.config.experiment",
    "load": "slaq_mpi.config.experiment",
    "ConfigError": "slaq_mpi.errors",
    "DataError": "slaq_mpi.errors",
    "SlaqError": "slaq_mpi.errors",
    "WorkerError": "slaq_mpi.errors",
    "get_policy": "slaq_mpi.policies",
    "ClusterSnapshot": "slaq_mpi.policies.snapshot",
    "JobSnapshot": "slaq_mpi.policies.snapshot",
}
__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'slaq_mpi' has no attribute {name!r}")
