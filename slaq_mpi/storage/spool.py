"""The requests ``slaq add``, ``slaq cancel`` and ``slaq drain`` hand to a running run, and
rank 0's answers: small JSON files in ``RUN_DIR/spool/``.

The directory is created by rank 0, readable and writable by the run's owner only. A request
is written whole under a temporary name and renamed into place (a reader never sees half of
one); rank 0 takes the requests in the order of their names (a timestamp first), executes
those owned by the run's user, and writes an answer beside each
(``NAME.answer.json``: ``accepted`` or ``refused`` with a reason) before removing it. A request
owned by anyone else is never executed (a job names solver files, which are code): it is set
aside as ``NAME.foreign`` and refused.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slaq_mpi.storage.durable import replacing

__all__ = ["KINDS", "Request", "answer", "make_spool", "read_answer", "requests", "spool_dir", "submit"]

KINDS = ("add", "cancel", "drain")
_SUFFIX = ".request.json"


def spool_dir(run_dir: Path) -> Path:
    """The run's spool directory."""
    return run_dir / "spool"


def make_spool(run_dir: Path) -> Path:
    """Create the spool directory, owner-only (rank 0, at the start of a run)."""
    path = spool_dir(run_dir)
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@dataclass(frozen=True)
class Request:
    """One request: its ``kind`` (``add``, ``cancel``, ``drain``), its ``body`` (``add``: the job
    entries as given; ``cancel``: the job names) and the file that holds it."""

    kind: str
    body: Any
    path: Path

    @property
    def name(self) -> str:
        """The request's name (its file name without the suffix)."""
        return self.path.name[: -len(_SUFFIX)]


def submit(run_dir: Path, kind: str, body: Any) -> str:
    """Write a request atomically into the run's spool; returns its name.

    Raises:
        OSError: the spool cannot be written (no such run, or not the run's owner).
    """
    spool = spool_dir(run_dir)
    name = f"{time.time_ns():020d}-{os.getpid()}-{kind}"
    final = spool / f"{name}{_SUFFIX}"
    with replacing(final, spool / f".{name}.tmp") as tmp:
        tmp.write_text(json.dumps({"kind": kind, "body": body}))
    return name


def requests(run_dir: Path) -> list[Request | tuple[Path, str]]:
    """The requests waiting in the spool, oldest first: a :class:`Request` for each one the
    run's user owns and that reads as one, else ``(path, why)`` (it has been set aside)."""
    spool = spool_dir(run_dir)
    try:
        names = sorted(p for p in spool.iterdir() if p.name.endswith(_SUFFIX))
    except OSError:
        return []
    found: list[Request | tuple[Path, str]] = []
    for path in names:
        try:
            owner = path.stat().st_uid
            if owner != os.getuid():
                path.rename(path.with_name(path.name + ".foreign"))
                found.append((path, f"owned by uid {owner}, not the run's user (uid {os.getuid()})"))
                continue
            raw = json.loads(path.read_text())
            kind, body = raw["kind"], raw["body"]
            if kind not in KINDS:
                raise ValueError(f"unknown kind {kind!r}")
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError) as exc:
            path.rename(path.with_name(path.name + ".bad"))
            found.append((path, f"not a request ({exc})"))
            continue
        found.append(Request(kind, body, path))
    return found


def answer(path: Path, accepted: bool, reason: str = "", **detail: Any) -> None:
    """Answer the request at ``path`` (then remove it, if still there)."""
    name = path.name[: -len(_SUFFIX)] if path.name.endswith(_SUFFIX) else path.name
    final = path.with_name(f"{name}.answer.json")
    body = {"accepted": accepted, "reason": reason, **detail}
    with replacing(final, path.with_name(f".{name}.answer.tmp")) as tmp:
        tmp.write_text(json.dumps(body))
    path.unlink(missing_ok=True)


def read_answer(run_dir: Path, name: str) -> dict[str, Any] | None:
    """Rank 0's answer to request ``name``, or None while there is none."""
    try:
        got: dict[str, Any] = json.loads((spool_dir(run_dir) / f"{name}.answer.json").read_text())
    except (OSError, ValueError):
        return None
    return got
