"""Solver checkpoints in HDF5: written atomically, verified on load.

Layout: ``RUN_DIR/checkpoints/<job>/<iteration:08d>.h5`` holding one dataset per state array
under ``/state``, and attributes ``job``, ``iteration``, ``last_loss``, ``checksum`` (SHA-256
over the arrays' names, dtypes, shapes and bytes). A file is written to a temporary name, fsynced, then
renamed, so a reader never sees half a checkpoint. A corrupt or truncated newest file is
skipped in favour of the previous good one.

Pruning follows what the run has committed, not what was written last: a job's checkpoint of
this epoch lands while rank 0 still saves the previous epoch's metrics.h5, so after a crash the
run resumes from the newest checkpoint at or before the iterations metrics.h5 records. Rank 0
prunes (:func:`prune`) after each save, keeping the newest ``KEEP`` of those and every newer
one; a resume deletes the newer ones (:func:`drop_after`), whose iterations run again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from slaq_mpi.storage.durable import replacing

KEEP = 2


@dataclass
class Checkpoint:
    """A verified checkpoint: the solver state after ``iteration`` iterations."""

    path: Path
    iteration: int
    last_loss: float
    state: dict[str, np.ndarray]


def _checksum(state: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        arr = np.ascontiguousarray(state[name])
        h.update(name.encode())
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def state_arrays(state: object, job: str) -> dict[str, np.ndarray]:
    """Copies of a solver's ``get_state()`` as numeric arrays.

    Raises:
        ValueError: naming the job and the entry, when the state is not a dict of numeric
            arrays (the documented contract, see docs/solvers.md).
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"job {job}: get_state() returned {type(state).__name__}; it must return "
                         "a dict of numeric arrays (docs/solvers.md)")
    out: dict[str, np.ndarray] = {}
    for name, value in state.items():
        try:
            arr = np.array(value, copy=True)
        except (TypeError, ValueError):
            arr = np.array(None)
        if not isinstance(name, str) or arr.dtype.kind not in "biufc":
            raise ValueError(f"job {job}: get_state()[{name!r}] is {type(value).__name__}; every "
                             "entry must be a numeric array under a string name (docs/solvers.md)")
        out[name] = arr
    return out


def job_dir(run_dir: Path, job: str) -> Path:
    """Where the checkpoints of ``job`` live."""
    return run_dir / "checkpoints" / job


def write(run_dir: Path, job: str, iteration: int, last_loss: float,
          state: Mapping[str, np.ndarray]) -> Path:
    """Write a checkpoint atomically (temp file, fsync, rename); old ones stay (:func:`prune`).

    A failed write (a full disk) leaves no temp file behind, and a successful one removes
    those of earlier writers that died mid-write (one writer per job at a time).
    """
    d = job_dir(run_dir, job)
    d.mkdir(parents=True, exist_ok=True)
    final = d / f"{iteration:08d}.h5"
    tmp = d / f".{iteration:08d}.h5.tmp{os.getpid()}"
    with replacing(final, tmp), h5py.File(tmp, "w") as f:
        g = f.create_group("state")
        for name, arr in state.items():
            g.create_dataset(name, data=np.asarray(arr))
        f.attrs["job"] = job
        f.attrs["iteration"] = iteration
        f.attrs["last_loss"] = last_loss
        f.attrs["checksum"] = _checksum(state)
    for stale in d.glob(".*.h5.tmp*"):
        stale.unlink(missing_ok=True)
    return final


def _files(run_dir: Path, job: str) -> list[tuple[int, Path]]:
    """The job's checkpoint files with the iteration their name gives, oldest first."""
    out = []
    for path in job_dir(run_dir, job).glob("*.h5"):
        if path.stem.isdigit():
            out.append((int(path.stem), path))
    return sorted(out)


def prune(run_dir: Path, job: str, committed: int) -> None:
    """Delete the job's checkpoints older than the newest ``KEEP`` at or before iteration
    ``committed`` (what metrics.h5 records); newer ones stay, for the next save commits them."""
    upto = [path for it, path in _files(run_dir, job) if it <= committed]
    for old in upto[:-KEEP]:
        old.unlink(missing_ok=True)


def drop_after(run_dir: Path, job: str, iteration: int) -> None:
    """Delete the job's checkpoints past ``iteration`` (a resume goes back before them: they
    would outrank the checkpoints of the iterations run again)."""
    for it, path in _files(run_dir, job):
        if it > iteration:
            path.unlink(missing_ok=True)


def read(path: Path) -> Checkpoint:
    """Load and verify one checkpoint file.

    Raises:
        ValueError: the file is damaged: truncated, not HDF5, missing a part, or failing its
            checksum.
        OSError: the file system could not read it (an ``errno``: gone, EIO, too many open
            files, permissions): the file may well be good, so it is not called damaged.
    """
    try:
        with h5py.File(path, "r") as f:
            state = {name: np.asarray(ds[()]) for name, ds in f["state"].items()}
            iteration = int(f.attrs["iteration"])
            last_loss = float(f.attrs["last_loss"])
            want = str(f.attrs["checksum"])
    except OSError as exc:
        if exc.errno is not None:  # h5py gives format damage no errno
            raise
        raise ValueError(f"unreadable ({exc.__class__.__name__}: {exc})") from None
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ValueError(f"unreadable ({exc.__class__.__name__}: {exc})") from None
    if _checksum(state) != want:
        raise ValueError("checksum mismatch")
    return Checkpoint(path, iteration, last_loss, state)


def latest(run_dir: Path, job: str, at_most: int | None = None
           ) -> tuple[Checkpoint | None, list[tuple[Path, str]]]:
    """The newest good checkpoint of ``job`` (not past iteration ``at_most``).

    Returns the checkpoint (None if there is none) and the files skipped as damaged, each
    with the reason. A file that vanished is passed over; any other error of the file system
    (EIO, too many open files) is raised: it says nothing about the file, which must not be
    set aside as damaged.
    """
    bad: list[tuple[Path, str]] = []
    for _it, path in reversed(_files(run_dir, job)):
        try:
            ckpt = read(path)
        except FileNotFoundError:
            continue
        except ValueError as exc:
            bad.append((path, str(exc)))
            continue
        if at_most is not None and ckpt.iteration > at_most:
            continue
        return ckpt, bad
    return None, bad
