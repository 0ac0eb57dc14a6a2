"""Checks on where a command will write, made before anything is computed or written.

Every command that writes (``run``, ``simulate``, ``report``, ``data``, ``curves record``)
refuses a place it could never write with one line naming the option or key, instead of failing
after minutes of work.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from slaq_mpi.errors import ConfigError

__all__ = ["check_writable", "nearest_existing"]


def nearest_existing(path: str | Path) -> Path:
    """``path`` made absolute if it exists, else its closest existing ancestor."""
    base = Path(path).resolve()
    while not base.exists():
        base = base.parent
    return base


def check_writable(directory: str | Path, key: str, shown: str | Path, probe: bool = False) -> None:
    """Refuse to write in ``directory`` (which may not exist yet: it is created with its
    parents) unless its closest existing ancestor is a directory this process may write in
    (with ``probe``, also checked by creating and removing an empty file there: ``os.access``
    says yes to root everywhere, /proc included; for one process's output only, not for
    every rank of a run).

    Raises:
        ConfigError: naming ``key`` and ``shown`` (the value as the user gave it) and the
            directory at fault.
    """
    base = nearest_existing(directory)
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(key, str(shown), f"cannot be written: {base} is not a writable directory")
    if not probe:
        return
    try:
        fd, name = tempfile.mkstemp(prefix=".slaq-probe-", dir=base)
    except OSError as exc:
        raise ConfigError(key, str(shown), f"cannot be written: {base} is not a writable directory "
                          f"({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(name)
