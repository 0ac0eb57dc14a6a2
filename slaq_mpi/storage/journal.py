"""The report journal: what rank 0 added to a run's record since it last saved ``metrics.h5``.

``metrics.h5`` is rewritten whole (milliseconds per job), so on a run of many jobs rank 0
saves it only every few epochs. So that a resume after a crash still redoes at most about one
report period of any job, rank 0 also appends every job report it takes into the record to a
journal file of the run directory, and hands what it wrote to the operating system once per
pass of its loop (so it survives the death of the process; a crash of rank 0's node may lose
the last lines).

Files ``journal-<k>.pkl``: one record per report taken, each a pickled dict of plain values
(:func:`entry`; read back with no class allowed, :func:`entries`). A save of the record starts
the next file (``k + 1``) as it takes its copy of the record and names that file in
``metrics.h5`` (root attribute ``journal``); once ``metrics.h5`` is written, the older files
are deleted. A resume reads ``metrics.h5``, then replays the journal files from the one it
names on, in order (:func:`replay`); a record cut short by a crash ends the replay. No MPI here.
"""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from slaq_mpi.storage.metrics import JobRecord, RunRecord

__all__ = ["Journal", "drop_before", "entries", "entry", "newest_index", "replay"]

_NAME = re.compile(r"^journal-(\d+)\.pkl$")


def _path(run_dir: Path, index: int) -> Path:
    return run_dir / f"journal-{index}.pkl"


def _files(run_dir: Path) -> list[tuple[int, Path]]:
    """The run's journal files, by index."""
    found = []
    for path in run_dir.glob("journal-*.pkl"):
        m = _NAME.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


def newest_index(run_dir: Path) -> int:
    """The highest index of the run's journal files (-1: none)."""
    files = _files(run_dir)
    return files[-1][0] if files else -1


class Journal:
    """Rank 0's journal writer: :meth:`add` appends a record to file ``index`` (created at its
    first record), :meth:`flush` hands the records to the operating system, :meth:`rotate`
    moves on to the next file."""

    def __init__(self, run_dir: Path, index: int) -> None:
        self.run_dir = Path(run_dir)
        self.index = int(index)
        self._file: IO[bytes] | None = None

    def add(self, line: dict[str, Any]) -> None:
        """Append ``line`` (a :func:`entry`) to the current file."""
        if self._file is None:
            self._file = open(_path(self.run_dir, self.index), "ab")  # noqa: SIM115
        self._file.write(pickle.dumps(line, protocol=pickle.HIGHEST_PROTOCOL))

    def flush(self) -> None:
        """Hand the records added so far to the operating system."""
        if self._file is not None:
            self._file.flush()

    def rotate(self) -> int:
        """Close the current file and go on to the next; returns the new index (the one a
        save taking the record now names)."""
        self.close()
        self.index += 1
        return self.index

    def close(self) -> None:
        """Close the current file, if open."""
        if self._file is not None:
            self._file.close()
            self._file = None


class _PlainUnpickler(pickle.Unpickler):
    """Reads plain values only (dicts, lists, numbers, strings): no class is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a journal record names {module}.{name}")


def drop_before(run_dir: Path, index: int) -> None:
    """Delete the journal files older than ``index`` (a saved ``metrics.h5`` holds them)."""
    for k, path in _files(Path(run_dir)):
        if k < index:
            path.unlink(missing_ok=True)


def entry(job: JobRecord, before: int, now: float) -> dict[str, Any]:
    """The journal line of a report that took ``job``'s record from ``before`` iterations to
    what it holds now (``now``: the experiment time it was taken at)."""
    line: dict[str, Any] = {"job": str(job.name), "at": int(before), "now": float(now)}
    if len(job.loss) > before:
        cores, seconds = job.throughput[-1]
        line.update(loss=list(map(float, job.loss[before:])), time=list(map(float, job.time[before:])),
                    cores=list(map(int, job.cores[before:])),
                    iter_seconds=list(map(float, job.iter_seconds[before:])),
                    throughput=[int(cores), float(seconds)],
                    attained=float(job.attained_core_seconds), start=float(job.start))
    if job.status in ("done", "failed"):
        line.update(status=str(job.status), reason=str(job.reason), end=float(job.end))
    return line


def entries(run_dir: Path, index: int) -> Iterator[dict[str, Any]]:
    """The records of the journal files from ``index`` on, in order, up to the first one that
    does not read back whole (one cut short by a crash)."""
    for k, path in _files(Path(run_dir)):
        if k < index:
            continue
        with open(path, "rb") as f:
            reader = _PlainUnpickler(f)
            while True:
                try:
                    line = reader.load()
                except EOFError:  # the file's end, or a record cut short there
                    break
                except (pickle.UnpicklingError, ValueError, IndexError, TypeError, KeyError,
                        AttributeError, MemoryError):  # a damaged record
                    return
                if not isinstance(line, dict) or "job" not in line or "at" not in line:
                    return
                yield line


def replay(record: RunRecord, lines: Iterator[dict[str, Any]]) -> float:
    """Add the journal's ``lines`` to ``record`` (each where it continues its job's record; a
    line of a job the record does not hold, or not continuing it, is left out). Returns the
    latest experiment time of the lines added (-inf: none)."""
    latest = -math.inf
    for line in lines:
        job = record.jobs.get(str(line["job"]))
        if job is None or len(job.loss) != int(line["at"]) or job.status in ("done", "failed", "cancelled"):
            continue
        if "loss" in line:
            job.loss.extend(float(x) for x in line["loss"])
            job.time.extend(float(x) for x in line["time"])
            job.cores.extend(int(x) for x in line["cores"])
            job.iter_seconds.extend(float(x) for x in line["iter_seconds"])
            cores, seconds = line["throughput"]
            job.throughput.append((int(cores), float(seconds)))
            job.attained_core_seconds = float(line["attained"])
            job.start = float(line["start"])
        if "status" in line:
            job.status, job.reason, job.end = str(line["status"]), str(line["reason"]), float(line["end"])
        latest = max(latest, float(line["now"]))
    return latest
