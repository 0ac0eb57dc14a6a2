"""Rank 0's saves of the run's record (``metrics.h5``, ``state.json``), in the background.

Rewriting ``metrics.h5`` costs milliseconds per job (HDF5 objects are created one by one), so
with hundreds of jobs a save takes most of a second. Rank 0 takes a copy of the record
(:meth:`~slaq_mpi.storage.metrics.RunRecord.run_data`) and a thread writes it, then
``state.json``, then prunes the checkpoints the record no longer needs, while rank 0 goes on
deciding and answering the jobs. One save at a time; a save asked for while one is being
written is skipped (the next one carries its data). The final save waits. Once a record is
written, the report journal files it holds are deleted (:mod:`slaq_mpi.storage.journal`). No
MPI here.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from slaq_mpi.storage import checkpoint, journal
from slaq_mpi.storage.durable import replacing
from slaq_mpi.storage.metrics import RunData, write_metrics

__all__ = ["RecordSaver"]


class RecordSaver:
    """Writes one run directory's record, at most one save in flight."""

    def __init__(self, run_dir: Path, state_file: str) -> None:
        self.run_dir = run_dir
        self.state_file = state_file
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_seconds = 0.0  # how long the latest save took to write

    @property
    def busy(self) -> bool:
        """Whether a save is being written."""
        return self._thread is not None and self._thread.is_alive()

    def save(self, data: RunData, state: str, prune: list[tuple[str, int]],
             background: bool) -> None:
        """Write ``data`` to metrics.h5 and ``state`` to the state file, atomically each, then
        prune each ``(job, iterations)``'s older checkpoints; in a thread if ``background``
        (after the previous save), else now."""
        self.join()
        if not background:
            self._write(data, state, prune)
            return
        self._thread = threading.Thread(target=self._guarded, args=(data, state, prune),
                                        name="record-saver", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the save in flight; raise its error, if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _guarded(self, data: RunData, state: str, prune: list[tuple[str, int]]) -> None:
        try:
            self._write(data, state, prune)
        except BaseException as exc:  # raised on rank 0's thread by the next join
            self._error = exc

    def _write(self, data: RunData, state: str, prune: list[tuple[str, int]]) -> None:
        start = time.monotonic()
        write_metrics(self.run_dir / "metrics.h5", data)
        with replacing(self.run_dir / self.state_file,
                       self.run_dir / f".{self.state_file}.tmp") as tmp:
            tmp.write_text(state)
        if data.journal is not None:  # the reports of the older journal files are in the record
            journal.drop_before(self.run_dir, data.journal)
        for job, iterations in prune:  # what is saved now needs no older checkpoint
            checkpoint.prune(self.run_dir, job, iterations)
        self.last_seconds = time.monotonic() - start
