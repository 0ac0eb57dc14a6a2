"""Typed errors a user can act on."""

from __future__ import annotations

import errno
import shlex
from typing import Any

# Exit statuses of `slaq run` (README): every job done; a job failed; bad input; the run
# aborted on an error (fix it, then --resume); stopped on request (--resume later).
EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_ABORTED, EXIT_STOPPED = 0, 1, 2, 3, 75
# Ranks of the run were lost (their node failed): the record is saved; resume on the ranks left.
EXIT_RANKS_LOST = 76


class SlaqError(Exception):
    """Base class of every error slaq-mpi raises on purpose."""


NO_VALUE: Any = object()  # a ConfigError about a key itself (unknown key, YAML syntax): no value shown


class ConfigError(SlaqError, ValueError):
    """Bad input: a YAML key, value, data file or size. The CLI exits with status 2.

    The message reads ``WHERE: VALUE is not allowed; ALLOWED``, or ``WHERE: ALLOWED`` when
    ``value`` is :data:`NO_VALUE`.
    """

    def __init__(self, where: str, value: Any, allowed: str) -> None:
        self.where = where
        self.value = value
        self.allowed = allowed
        if value is NO_VALUE:
            super().__init__(f"{where}: {allowed}")
            return
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{where}: {shown} is not allowed; {allowed}")


class DataError(SlaqError, ValueError):
    """A malformed data file: names the file and, where known, the row."""


class WorkerError(SlaqError, RuntimeError):
    """An exception raised on a worker rank, re-raised on rank 0 with rank, host and job."""


class RanksLost(SlaqError, RuntimeError):
    """Rank 0 lost touch with worker ranks (a job stopped reporting, or a message to or from a
    rank failed): their node failed or they were killed. The run saves its record and ends
    with :data:`EXIT_RANKS_LOST`."""


class ContractError(SlaqError, RuntimeError):
    """A policy returned an allocation the policy contract does not allow (a bug in the policy)."""


DAMAGED_FILE_ERRORS = (RuntimeError, LookupError, ValueError, TypeError, AttributeError)
"""What h5py raises reading a damaged file (besides an OSError without errno): RuntimeError for
broken attribute or metadata blocks, KeyError/IndexError for missing parts, ValueError/TypeError
for bad values."""


def disk_full_hint(exc: BaseException, run_dir: object) -> str | None:
    """What to do when ``exc`` (or the worker error it reports) is a full disk or an exhausted
    quota (ENOSPC, EDQUOT); None for any other error."""
    codes = {errno.ENOSPC, errno.EDQUOT}
    seen: BaseException | None = exc
    full = False
    while seen is not None and not full:
        full = isinstance(seen, OSError) and seen.errno in codes
        seen = seen.__cause__ or seen.__context__
    if not full and isinstance(exc, WorkerError):  # the worker's OSError, as text
        full = any(f"[Errno {code}]" in str(exc) for code in codes)
    if not full:
        return None
    return (f"slaq: the disk (or quota) holding {run_dir} is full: free space, then "
            f"`slaq run --resume {shlex.quote(str(run_dir))}`; the files of the last saved epoch "
            "are intact")
