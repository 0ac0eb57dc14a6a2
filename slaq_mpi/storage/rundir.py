"""One run at a time per run directory: a lock file beside it, held by rank 0 for the whole run.

The lock is ``.<name>.lock`` in the run directory's parent (beside the directory, so a fresh
start that moves an old run directory aside keeps it). It is an ``flock`` lock: the kernel (or
the NFS lock manager) releases it when the process holding it ends, however it ends, so a
crashed run never leaves a stale lock. The file's text says who holds it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from slaq_mpi.errors import ConfigError
from slaq_mpi.storage.outpaths import check_writable

__all__ = [
    "STOP_FILE", "check_free", "check_fresh", "check_own_dir", "clear_stale_stop", "fresh_output",
    "hold", "holder_of", "lock_path", "move_aside", "remove_stop",
]

STOP_FILE = "STOP"  # created in the run directory to ask a running coordinator to stop

_held: list[IO[str]] = []  # the open lock files of this process (closing one releases it)


def lock_path(run_dir: str | Path) -> Path:
    """The lock file of ``run_dir``."""
    run_dir = Path(run_dir).resolve()
    return run_dir.parent / f".{run_dir.name}.lock"


def _open_locked(run_dir: Path, key: str) -> IO[str]:
    path = lock_path(run_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a+")  # noqa: SIM115 - held open for the life of the run
    except OSError as exc:
        raise ConfigError(key, str(run_dir), f"cannot create its lock file {path}: "
                          f"{exc.strerror}") from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise _busy(run_dir, holder, key) from None
    return fh


def _busy(run_dir: Path, holder: str, key: str = "run directory") -> ConfigError:
    return ConfigError(key, str(run_dir), f"another slaq run is using it ({holder}); "
                       "wait for it to end, or stop it first")


def _holder(lock: Path) -> str | None:
    """Who holds the existing lock file ``lock`` (None: nobody, or no such file)."""
    try:
        fh = open(lock)  # noqa: SIM115 - closed below
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return fh.read().strip() or "another process"
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return None


def holder_of(run_dir: str | Path) -> str | None:
    """Who is running in ``run_dir`` now, as its lock file says (None: nobody); creates nothing."""
    return _holder(lock_path(run_dir))


def check_fresh(path: str | Path, key: str, inputs: Iterable[str | Path] = ()) -> None:
    """Refuse ``path`` as the directory of a fresh run, which first moves whatever ``path``
    holds aside (:func:`move_aside`): it must not be inside the directory of a running slaq
    run, nor hold one, nor hold any of ``inputs`` (the data and solver files the run reads),
    and if it is not empty it must hold an earlier run or simulation (never a user's own files).

    Raises:
        ConfigError: naming ``key`` and what is in the way.
    """
    where = Path(path).resolve()
    for above in list(where.parents)[:-1]:
        holder = _holder(lock_path(above))
        if holder:
            raise ConfigError(key, str(path), f"is inside {above}, the directory of a running slaq "
                              f"run ({holder}); give this run a directory of its own")
    for item in inputs:
        if where in Path(item).resolve().parents:
            raise ConfigError(key, str(path), f"holds {item}, which this run reads, and a fresh run "
                              "first moves the directory aside; choose another output directory")
    if not where.is_dir():
        return
    for root, _dirs, files in os.walk(where):
        for name in files:
            if name.startswith(".") and name.endswith(".lock"):
                holder = _holder(Path(root) / name)
                if holder:
                    inner = Path(root) / name[1:-len(".lock")]
                    raise ConfigError(key, str(path), f"holds {inner}, the directory of a running "
                                      f"slaq run ({holder}); give this run a directory of its own")
    _check_is_output(where, key, path)


RUN_FILES = ("config.yaml", "state.json", "metrics.h5")  # a slaq run directory holds one of these


def _check_is_output(where: Path, key: str, path: str | Path) -> None:
    """Refuse a non-empty directory that holds neither a slaq run nor only a simulation's
    output: :func:`move_aside` would move someone's own files away."""
    try:
        entries = sorted(where.iterdir(), key=lambda e: (e.name.startswith("."), e.name))
        if not entries or any((where / name).exists() for name in RUN_FILES):
            return
        others = [e.name for e in entries if not _simulation_output(e)]
        if not others and any(e.suffix != ".png" for e in entries):
            return
    except OSError as exc:
        what = f"{exc.filename}: " if exc.filename else ""
        raise ConfigError(key, str(path), f"cannot be read ({what}{exc.strerror or exc}); give a "
                          "directory you can read and write") from None
    others = others or [e.name for e in entries]  # PNGs alone are someone's figures
    shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
    raise ConfigError(key, str(path), f"holds files that are not a slaq run ({shown}); an earlier "
                      "run is moved aside, other files never: give an empty or new directory")


def _simulation_output(entry: Path) -> bool:
    """What ``slaq simulate --out`` leaves: ``<policy>/`` holding its ``metrics.h5`` (or, if
    stopped while writing, a ``metrics.h5.tmp*`` or nothing) and the PNGs of a report, and
    the PNGs of a report on all policies; or the ``metrics.h5.tmp*`` of a ``slaq sim-check
    --out`` stopped while writing."""
    from slaq_mpi.policies import POLICY_NAMES, SIMULATION_POLICY_NAMES

    if entry.is_symlink():
        return False
    if entry.is_file():
        return entry.suffix == ".png" or entry.name.startswith("metrics.h5.tmp")
    return (entry.name in (*POLICY_NAMES, *SIMULATION_POLICY_NAMES) and entry.is_dir() and all(
        f.is_file() and not f.is_symlink() and (f.name.startswith("metrics.h5") or f.suffix == ".png")
        for f in entry.iterdir()))


def check_free(run_dir: str | Path) -> None:
    """Raise :class:`ConfigError` if a running slaq run holds ``run_dir`` (creates nothing)."""
    holder = holder_of(run_dir)
    if holder:
        raise _busy(Path(run_dir), holder)


def _take(run_dir: str | Path, key: str) -> IO[str]:
    fh = _open_locked(Path(run_dir), key)
    job = os.environ.get("SLURM_JOB_ID")
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {socket.gethostname()}"
             f"{f', Slurm job {job}' if job else ''}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    fh.flush()
    return fh


def hold(run_dir: str | Path) -> None:
    """Lock ``run_dir`` for the rest of this process, or raise :class:`ConfigError` if a
    running slaq run holds it."""
    _held.append(_take(run_dir, "run directory"))


@contextmanager
def fresh_output(path: str | Path, key: str) -> Iterator[Path | None]:
    """An output directory of its own (:func:`check_own_dir`), locked for the ``with`` block
    and emptied by moving an earlier run aside (:func:`move_aside`); yields where that went
    (None if there was nothing). For ``slaq simulate --out`` and ``slaq sim-check --out``.

    Raises:
        ConfigError: a path :func:`check_own_dir` refuses, or one a running slaq run or
            simulation holds.
    """
    check_own_dir(path, key)
    check_fresh(path, key)
    fh = _take(path, key)
    try:
        yield move_aside(path)
    finally:
        fh.close()


def clear_stale_stop(run_dir: str | Path, started: float) -> bool:
    """Remove ``run_dir/STOP`` if it is older than ``started`` (a stop request meant for an
    earlier run, which would end this one at once). Returns whether one was removed."""
    stop = Path(run_dir) / STOP_FILE
    try:
        if stop.stat().st_mtime < started:
            remove_stop(run_dir)
            return True
    except FileNotFoundError:
        pass
    return False


def remove_stop(run_dir: str | Path) -> None:
    """Remove ``run_dir/STOP``, whatever was made with that name (a file, or a directory)."""
    stop = Path(run_dir) / STOP_FILE
    if stop.is_dir() and not stop.is_symlink():
        shutil.rmtree(stop, ignore_errors=True)
    else:
        stop.unlink(missing_ok=True)


def check_own_dir(path: str | Path, key: str) -> None:
    """Refuse ``path`` as a run directory unless it is a directory of its own that can be
    created: not a file, not the current directory or one above it (a fresh run moves an
    earlier one aside, and must never move those), and under a writable directory.

    Raises:
        ConfigError: naming ``key`` (the YAML key or option that gave the path).
    """
    where = Path(path).resolve()
    cwd = Path.cwd().resolve()
    if where == cwd or where in cwd.parents:
        raise ConfigError(key, str(path), "must be a directory of its own, not the current "
                          "directory or one above it (an earlier run in it is moved aside)")
    if where.exists() and not where.is_dir():
        raise ConfigError(key, str(path), "exists and is not a directory")
    check_writable(where, key, path)


def move_aside(run_dir: str | Path) -> Path | None:
    """Rename a non-empty ``run_dir`` to ``<name>.<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``... if
    taken) so a fresh run never mixes with or overwrites an earlier one; returns the new name,
    or None if there was nothing to move.

    A ``run_dir`` that is a link (say to a scratch filesystem) stays one: the directory it
    points to is moved aside there, and an empty one made in its place, so the run stays on
    that filesystem and under the lock taken through the link (:func:`lock_path`).

    Raises:
        ConfigError: ``run_dir`` exists and is not a directory.
    """
    link = Path(run_dir)
    run_dir = link.resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("run directory", str(link), "is a file; give a directory")
    if not run_dir.exists() or not any(run_dir.iterdir()):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = run_dir.with_name(f"{run_dir.name}.{stamp}"), 2
    while aside.exists():
        aside, n = run_dir.with_name(f"{run_dir.name}.{stamp}-{n}"), n + 1
    run_dir.rename(aside)
    if link.is_symlink():
        run_dir.mkdir()
    return aside
