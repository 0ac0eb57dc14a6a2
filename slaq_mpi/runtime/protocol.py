"""What the runtime offers a solver: its job's group communicator and the reductions it runs.

Solvers (:mod:`jobs`) see only this protocol; :mod:`slaq_mpi.runtime.comm` implements it over
MPI and :class:`jobs.base.SerialComm` over one rank. Importing this module imports no MPI.
"""

from __future__ import annotations

from typing import Literal, Protocol

import numpy as np

ReduceOp = Literal["sum", "max", "min"]


class GroupComm(Protocol):
    """The communicator a solver sees: its job's group of ranks."""

    rank: int
    size: int

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Element-wise reduction of ``array`` over the group; every rank gets the result."""
        ...
