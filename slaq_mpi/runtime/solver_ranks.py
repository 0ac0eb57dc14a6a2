"""The ranks' side of ``slaq check-solver`` (:mod:`.solver_check`): a solver stepped on the MPI
world, each rank on its row shard, as a job's group steps it in a run.

Started as ``python -m slaq_mpi check-solver ALGORITHM --rank-spec SPEC.json`` under mpiexec.
SPEC holds ``algorithm``, ``data``, ``seed``, ``iterations``, ``checkpoint_at``, ``out`` (where
each rank writes ``rank<N>.json``), ``save`` (a directory: rank 0 writes the state after
``checkpoint_at`` steps there as a checkpoint, or null) and ``restore`` (a directory holding
such a checkpoint: after the run, a new solver restores it on these ranks and steps on to
``iterations``, or null). A rank's file holds its ``losses``, the ``restored`` run's losses,
and the ``error`` that stopped it (``"step 4 raised ValueError: ..."``; null if none). A rank
that caught an error writes its file, then ends every rank (a peer may be waiting for it in a
collective).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from jobs import load_solver
from slaq_mpi.data.datasets import read_shard
from slaq_mpi.runtime import comm
from slaq_mpi.storage import checkpoint

__all__ = ["JOB", "loss_value", "run_ranks"]

JOB = "solver"  # the checkpoint's job name


def loss_value(value: object) -> float:
    """What ``step()`` returned, as one finite-or-not float.

    Raises:
        TypeError: it is not one real number (a Python or numpy scalar, or a 0-d array).
    """
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return float(value)
    shown = f"an array of shape {value.shape}" if isinstance(value, np.ndarray) else repr(value)[:60]
    raise TypeError(f"step() must return the global loss as one number, not {shown}")


def _steps(solver: Any, first: int, last: int, result: dict[str, Any], key: str) -> None:
    """Step ``solver`` from iteration ``first`` to ``last`` (1-based), adding the losses to
    ``result[key]``."""
    for k in range(first, last + 1):
        result["stage"] = f"step {k}" + (" after the restore" if key == "restored" else "")
        loss = loss_value(solver.step())
        result[key].append(loss)
        if not math.isfinite(loss):
            raise FloatingPointError(f"the loss is {loss}")


def _run(spec: dict[str, Any], group: comm.MPIGroup, result: dict[str, Any]) -> None:
    """The check's steps on this rank; ``result["stage"]`` says what it is doing."""
    cls = load_solver(spec["algorithm"])
    shard = read_shard(spec["data"], group.rank, group.size)
    seed, total, at = int(spec["seed"]), int(spec["iterations"]), int(spec["checkpoint_at"])
    result["stage"] = "__init__"
    solver = cls(group, shard, {}, seed)
    _steps(solver, 1, at, result, "losses")
    result["stage"] = f"get_state after step {at}"
    state = checkpoint.state_arrays(solver.get_state(), JOB)
    if spec["save"] and group.rank == 0:
        checkpoint.write(Path(spec["save"]), JOB, at, result["losses"][-1], state)
    _steps(solver, at + 1, total, result, "losses")
    if spec["restore"]:
        result["stage"] = "reading the checkpoint"
        saved, bad = checkpoint.latest(Path(spec["restore"]), JOB)
        if saved is None:
            raise FileNotFoundError(f"no readable checkpoint in {spec['restore']} {bad}")
        result["stage"] = "__init__ of the solver to restore"
        fresh = cls(group, shard, {}, seed)
        result["stage"] = "set_state"
        fresh.set_state(saved.state)
        result["restored"] = []
        _steps(fresh, saved.iteration + 1, total, result, "restored")
    result["stage"] = "done"


def run_ranks(spec_path: Path) -> int:
    """Run the check's part on this rank (see the module's docstring); returns 0."""
    spec = json.loads(spec_path.read_text())
    group = comm.world_group()
    result: dict[str, Any] = {"rank": group.rank, "losses": [], "restored": None, "error": None,
                              "stage": "loading the solver"}
    out = Path(spec["out"]) / f"rank{group.rank}.json"
    try:
        _run(spec, group, result)
    except Exception as exc:
        said = (str(exc).splitlines() or [""])[0]  # an MPI error adds its stack below
        result["error"] = f"{result['stage']} raised {type(exc).__name__}: {said}"
        _write(out, result)
        comm.abort(1)
    _write(out, result)
    return 0


def _write(out: Path, result: dict[str, Any]) -> None:
    """Write ``result`` to ``out`` whole (an abort may end this rank at any moment)."""
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)
