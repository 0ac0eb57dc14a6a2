"""Files that survive a crash: written under a temporary name, fsynced, renamed over the
final name, and the directory fsynced, so a reader sees the old file or the new one, whole."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fsync_path", "replacing"]


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file, or a directory's entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(final: Path, tmp: Path) -> Iterator[Path]:
    """Yield ``tmp`` to write; then fsync it, rename it to ``final`` and fsync the directory.
    If the block or any of that fails (a full disk), ``tmp`` is removed and ``final`` is
    left as it was."""
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(final.parent)
