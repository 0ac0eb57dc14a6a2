"""How much memory this process may use: the machine's, or less under a cgroup limit.

A Slurm job started with ``--mem`` (and the task/cgroup plugin), or a container, runs in a
cgroup whose memory limit is below the node's physical memory; going over it gets the
process killed. The checks before a run starts compare against the lower of the two.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

__all__ = ["cgroup_limit", "format_bytes", "memory_here", "physical_memory"]

_PROC_CGROUP = Path("/proc/self/cgroup")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT = 2**60  # bytes; v1 writes its "no limit" as about 2^63
_MANY_BYTES = 1024**6 * 1000  # and more: shown as 1.02e+06 PiB


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (None where the platform does not tell)."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows), or no such name
        return None
    return pages * page if pages > 0 and page > 0 else None


def cgroup_limit(proc_cgroup: Path = _PROC_CGROUP, root: Path = _CGROUP_ROOT) -> int | None:
    """The lowest memory limit on this process's cgroup path (cgroup v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) in bytes; None if no level sets one or the platform has none.

    The path in ``proc_cgroup`` is looked up under the mount and each of its ancestors, and
    the mount's own top (what a container sees as its root) counts too.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1], Path(parts[2].lstrip("/"))
        if controllers == "":
            base, name = root, "memory.max"  # v2: one unified hierarchy
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        for level in (path, *path.parents):
            try:
                text = (base / level / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < _NO_LIMIT:  # v2 says "max" for none, v1 ~2^63
                limits.append(int(text))
    return min(limits) if limits else None


def memory_here() -> tuple[int, str] | None:
    """The memory this process may use and how to say it (``"this machine has 23.5 GiB of
    memory"``, or the cgroup's limit where lower); None where neither is known."""
    machine, limit = physical_memory(), cgroup_limit()
    if limit is not None and (machine is None or limit < machine):
        return limit, (f"this process may use {format_bytes(limit)} of memory (its cgroup's "
                       "limit: a Slurm job's --mem or a container's)")
    if machine is None:
        return None
    return machine, f"this machine has {format_bytes(machine)} of memory"


def format_bytes(n: float) -> str:
    """A byte count for people: ``745 GiB``, ``23.5 GiB``."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    if n >= _MANY_BYTES:  # in digits, not floats: an integer may be beyond any float
        return f"{Decimal(n) / 1024 ** (len(units) - 1):.3g} {units[-1]}"
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{n:.0f} {units[i]}" if n >= 100 else f"{n:.3g} {units[i]}"
