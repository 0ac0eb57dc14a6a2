"""A worker rank's copies of small datasets, so that restarting a job after a move takes the
rank's rows from memory instead of opening and reading the file again.

A job that grows or shrinks restarts on its new ranks, and every one of them reads its rows
anew (the rows of a rank change with the job's size). For a dataset of a few megabytes that
read costs more CPU than the rows are worth (opening the file, HDF5's per-read overhead): on
a node whose ranks outnumber its cores it lengthens every move. So a rank keeps every dataset
of at most :data:`LARGEST_BYTES` whole in memory once it has read it (at most
:data:`BUDGET_BYTES` in all, the least recently used dropped first) and cuts its rows from it;
larger datasets are read from the file as always, each rank its own rows only
(:func:`~slaq_mpi.data.datasets.read_shard`). A run's dataset files do not change while it
runs (``--resume`` checks their fingerprints). No MPI here.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jobs.base import Shard
from slaq_mpi.data.datasets import read_shard, row_bounds

__all__ = ["BUDGET_BYTES", "LARGEST_BYTES", "ShardCache"]

LARGEST_BYTES = 8 * 2**20  # the largest dataset (in memory) a rank keeps whole
BUDGET_BYTES = 32 * 2**20  # all the datasets a rank keeps


def _nbytes(shard: Shard) -> int:
    X = shard.X
    if isinstance(X, np.ndarray):
        size = X.nbytes
    else:
        csr = sp.csr_matrix(X)
        size = csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes
    return int(size + (shard.y.nbytes if shard.y is not None else 0))


class ShardCache:
    """:func:`~slaq_mpi.data.datasets.read_shard`, from whole copies of small datasets kept in
    memory (see the module docstring)."""

    def __init__(self, largest: int = LARGEST_BYTES, budget: int = BUDGET_BYTES) -> None:
        self.largest = int(largest)
        self.budget = int(budget)
        self._kept: OrderedDict[str, tuple[Shard, int]] = OrderedDict()  # path: (all rows, bytes)
        self._large: set[str] = set()  # paths read from the file every time

    def read(self, path: str | Path, rank: int, size: int) -> Shard:
        """Rank ``rank`` of ``size``'s rows of the dataset at ``path``: a copy the solver may
        change, as :func:`read_shard` gives."""
        key = str(path)
        whole = self._whole(key)
        if whole is None:
            return read_shard(path, rank, size)
        lo, hi = row_bounds(whole.n_rows, size, rank)
        X = whole.X[lo:hi]  # a CSR matrix's rows are a new matrix already
        return Shard(X=X.copy() if isinstance(X, np.ndarray) else X,
                     y=None if whole.y is None else whole.y[lo:hi].copy(),
                     row_start=lo, n_rows=whole.n_rows)

    def _whole(self, key: str) -> Shard | None:
        """The whole dataset at ``key``: from memory, or read now if it is small; None if it
        is large (read each rank's rows from the file)."""
        if key in self._kept:
            self._kept.move_to_end(key)
            return self._kept[key][0]
        if key in self._large or os.path.getsize(key) > self.largest:
            self._large.add(key)
            return None
        whole = read_shard(key, 0, 1)
        nbytes = _nbytes(whole)
        if nbytes > self.largest:  # larger in memory than on disk (compressed): not kept
            self._large.add(key)
            return whole
        self._kept[key] = (whole, nbytes)
        total = sum(b for _, b in self._kept.values())
        while total > self.budget and len(self._kept) > 1:
            _, (_, dropped) = self._kept.popitem(last=False)
            total -= dropped
        return whole
