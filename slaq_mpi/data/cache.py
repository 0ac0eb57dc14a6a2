"""The cache of generated datasets: each generator spec and seed is generated once, kept in one
directory and shared by every run that uses it.

Where: ``$SLAQ_DATA_CACHE``, else ``$XDG_CACHE_HOME/slaq-mpi/data``, else
``~/.cache/slaq-mpi/data``; files are kept under ``v<FORMAT>/`` as ``<generator>-<hash>.h5``
(:meth:`~slaq_mpi.data.datasets.DatasetSpec.key`). A file appears there only whole: it is
written under a temporary name of its own (host, process and a random token), fsynced and
renamed into place, so runs on several machines may generate the same dataset at once and
each ends with a whole file. A run keeps its own name for the file, ``RUN_DIR/data/<key>.h5``:
a hard link to the cached file (no second copy; removing either leaves the other whole), or
a symbolic link where the two directories are on different file systems.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path

import h5py

from slaq_mpi.data.datasets import H5_DAMAGE
from slaq_mpi.storage.durable import fsync_path, replacing

__all__ = ["CACHE_ENV", "FORMAT", "cache_dir", "cached", "holds", "link"]

CACHE_ENV = "SLAQ_DATA_CACHE"
#: The generators' output format: a change that makes a generator write other numbers for the
#: same parameters raises it, so files of the old code are never reused.
FORMAT = 1
#: A temporary file not written to for this long belongs to a writer that died.
STALE_SECONDS = 24 * 3600.0


def cache_dir() -> Path:
    """The directory generated datasets are kept in (it may not exist yet)."""
    given = os.environ.get(CACHE_ENV, "")
    if given:
        return Path(given).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "slaq-mpi" / "data"


def _kept(key: str) -> Path:
    return cache_dir() / f"v{FORMAT}" / f"{key}.h5"


def _whole(path: Path, description: str) -> bool:
    """Whether ``path`` is a readable dataset generated as ``description`` says."""
    try:
        with h5py.File(path, "r") as f:
            return "X" in f and f.attrs.get("generator") == description
    except H5_DAMAGE:
        return False


def holds(key: str, description: str) -> bool:
    """Whether the cache holds the file ``key``, generated as ``description`` says."""
    return _whole(_kept(key), description)


def cached(key: str, description: str, write: Callable[[Path], None]) -> Path:
    """The cached file ``key`` (``<generator>-<hash>``), written by ``write(tmp)`` unless the
    cache already holds it as ``description`` (its ``generator`` attribute) says.

    Raises:
        OSError: the cache directory cannot be made or written.
    """
    final = _kept(key)
    where = final.parent
    where.mkdir(parents=True, exist_ok=True)
    if _whole(final, description):
        return final
    mine = f".{final.name}.tmp-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    with replacing(final, where / mine) as tmp:
        write(tmp)
    _drop_stale(where, final.name)
    return final


def _drop_stale(where: Path, name: str) -> None:
    """Remove the temporary files of writers of ``name`` that died (none written for a day)."""
    now = time.time()
    for tmp in where.glob(f".{name}.tmp-*"):
        try:
            if now - tmp.stat().st_mtime > STALE_SECONDS:
                tmp.unlink()
        except FileNotFoundError:
            pass


def link(target: Path, path: Path) -> None:
    """Give the file ``target`` the name ``path`` as well (replacing whatever ``path`` is): a
    hard link, or a symbolic one where no hard link can be made (another file system)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.link-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.link(target, tmp)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP,
                             errno.EOPNOTSUPP):
            raise
        tmp.symlink_to(target.absolute())
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
