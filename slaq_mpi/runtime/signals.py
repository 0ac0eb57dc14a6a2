"""Stop signals that reach a rank of ``slaq run`` while it is still starting.

A Ctrl-C or ``kill`` right after ``slaq run`` can reach the ranks (through mpiexec or srun)
before their handlers are installed; Python's default action would kill them, and mpiexec
would report a crash. Installed first by the entry points, this module records such signals
on ranks of ``slaq run`` under an MPI launcher; the coordinator treats them as a stop request.
Any other process keeps Python's default behaviour.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
LAUNCH_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
received: list[int] = []  # set by the handler only


def _record(signum: int, _frame: Any) -> None:
    received.append(signum)


def install() -> bool:
    """Record stop signals from now on if this is a rank of ``slaq run`` under a launcher."""
    if sys.argv[1:2] != ["run"] or not any(v in os.environ for v in LAUNCH_VARS):
        return False
    for sig in SIGNALS:
        signal.signal(sig, _record)
    return True
