"""``slaq check-solver``: a solver checked the way a run uses it, before a long run.

The solver takes ``iterations`` steps serially (on :class:`jobs.SerialComm`, in this process),
then on 1 rank and on :data:`RANKS` ranks under the launcher ``slaq run`` uses
(:func:`~slaq_mpi.runtime.launch.find_mpiexec`), each rank on its row shard (the ranks run
:mod:`.solver_ranks`). The 1-rank run writes its state after half the steps as a checkpoint
(:mod:`slaq_mpi.storage.checkpoint`); at the end of each run, a new solver restores it and
steps on. The losses of the serial, 1-rank and 3-rank runs must agree to rounding, every rank
must return the same loss, and each restored solver must go on with the 1-rank run's losses.
Importing this module imports no MPI.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jobs import SerialComm, Solver
from slaq_mpi.data.datasets import DatasetSpec, check_file, read_shard
from slaq_mpi.data.generators import generator_label_problem, materialize
from slaq_mpi.errors import ConfigError
from slaq_mpi.runtime.launch import find_mpiexec, is_open_mpi
from slaq_mpi.runtime.solver_ranks import loss_value
from slaq_mpi.storage import checkpoint

__all__ = ["RANKS", "RTOL", "Check", "Run", "check_solver", "first_difference", "pick_data"]

RANKS = 3
RTOL = 1e-9  # other rank counts sum in another order: the losses differ by rounding only
#: The data a check generates when none is given, by the solver's ``dataset_kind``.
DATA: dict[str, dict[str, Any]] = {
    "classification": {"rows": 2000, "features": 10},
    "regression": {"rows": 2000, "features": 10},
    "blobs": {"rows": 2000, "features": 10, "centers": 4},
    "documents": {"rows": 300, "features": 200, "topics": 5, "doc_length": 50},
}


@dataclass(frozen=True)
class Check:
    """One thing checked, and whether it passed."""

    ok: bool
    text: str


@dataclass
class Run:
    """What one run of the solver gave: each rank's losses (rank 0 first), the restored
    solver's losses (None: no restore), and the first error a rank met."""

    losses: list[list[float]] = field(default_factory=list)
    restored: list[float] | None = None
    error: str | None = None


def pick_data(cls: type[Solver], data: str | None, seed: int, where: Path) -> tuple[Path, str]:
    """The data file of the check and how to name it: ``data`` (checked for the solver), else
    a small dataset of the solver's ``dataset_kind`` generated under ``where``.

    Raises:
        DataError: ``data`` is not a dataset this solver can use.
        ConfigError: the generated kind would not suit the solver.
    """
    if data is not None:
        info = check_file(data, cls)
        return Path(data), f"{data} ({info.rows} x {info.features})"
    kind = getattr(cls, "dataset_kind", None) or ("classification" if cls.needs_labels else "blobs")
    params = dict(DATA.get(kind, DATA["classification"]))
    if getattr(cls, "label_kind", None) == "binary" and kind == "blobs":
        params["centers"] = 2
    spec = DatasetSpec(generator=kind, params={**params, "seed": seed})
    problem = generator_label_problem(kind, spec.params, cls)
    if problem is not None:
        raise ConfigError("--data", "not given", f"the generated {kind} data does not suit "
                          f"{cls.__name__}: {problem}; give a data file")
    path = materialize(spec, where, seed)
    return path, f"{kind} {params['rows']} x {params['features']} (generated)"


def serial_run(cls: type[Solver], data: Path, seed: int, iterations: int) -> Run:
    """The solver's losses on the whole data in this process."""
    run = Run(losses=[[]])
    stage = "__init__"
    try:
        solver = cls(SerialComm(), read_shard(data, 0, 1), {}, seed)
        for k in range(1, iterations + 1):
            stage = f"step {k}"
            run.losses[0].append(loss_value(solver.step()))
        stage = "get_state"
        checkpoint.state_arrays(solver.get_state(), "solver")
    except Exception as exc:
        run.error = f"{stage} raised {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    return run


def _launch(cmd: Sequence[str], timeout: float) -> tuple[int | None, str]:
    """Run ``cmd`` in a session of its own; its status (None: killed after ``timeout`` s)
    and the end of what it printed."""
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out[-2000:]
    except subprocess.TimeoutExpired:
        return None, ""
    finally:
        if proc.poll() is None:  # timed out, or interrupted: nothing of it may stay behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def ranks_run(algorithm: str, ranks: int, spec: dict[str, Any], exe: str, where: Path,
              timeout: float) -> Run:
    """The solver on ``ranks`` ranks under ``exe`` (spec: see :mod:`.solver_ranks`)."""
    out = where / f"ranks{ranks}"
    out.mkdir()
    spec_file = where / f"ranks{ranks}.json"
    spec_file.write_text(json.dumps({**spec, "out": str(out)}))
    cmd = [exe, "-n", str(ranks)] + (["--map-by", ":OVERSUBSCRIBE"] if is_open_mpi(exe) else [])
    cmd += [sys.executable, "-m", "slaq_mpi", "check-solver", algorithm, "--rank-spec", str(spec_file)]
    status, printed = _launch(cmd, timeout)
    found = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    found.sort(key=lambda r: r["rank"])
    run = Run(losses=[r["losses"] for r in found])
    run.restored = next((r["restored"] for r in found if r["rank"] == 0), None)
    errors = [f"{r['error']} (rank {r['rank']})" for r in found if r["error"]]
    if errors:
        run.error = errors[0]
    elif status is None:
        run.error = (f"no result within {timeout:g} s: a rank may wait in a collective its peers "
                     "never reach (every rank must call step() alike and take the same branches)")
    elif status != 0 or len(found) < ranks:
        last = " | ".join(printed.strip().splitlines()[-3:])
        run.error = f"{shlex.join(cmd[:3])} ... ended with status {status}: {last}"
    return run


def first_difference(a: Sequence[float], b: Sequence[float]) -> tuple[int | None, float]:
    """The first index where ``a`` and ``b`` differ by more than rounding (None: they agree on
    their common length) and the largest relative difference there."""
    n = min(len(a), len(b))
    x, y = np.asarray(a[:n], dtype=float), np.asarray(b[:n], dtype=float)
    scale = np.maximum(np.abs(x), np.abs(y))
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(x == y, 0.0, np.abs(x - y) / scale)
    bad = np.flatnonzero(~(rel <= RTOL))
    return (int(bad[0]) if len(bad) else None), float(np.max(rel, initial=0.0))


def _agree(label: str, a: Run, b: Run, names: tuple[str, str]) -> Check:
    """Whether the first ranks' losses of two finished runs agree."""
    at, largest = first_difference(a.losses[0], b.losses[0])
    if at is None:
        return Check(True, f"{label}: the same {len(a.losses[0])} losses (largest relative "
                           f"difference {largest:.1e})")
    why = ("the initial model depends on the rank or its rows: draw it from seed only" if at == 0
           else "a step uses a value not reduced over the ranks: sum every global quantity with "
                "comm.allreduce")
    return Check(False, f"{label}: the losses differ from iteration {at + 1} on ({names[0]} "
                        f"{a.losses[0][at]:.10g}, {names[1]} {b.losses[0][at]:.10g}); {why}")


def _ranks_alike(run: Run) -> Check:
    label = f"{RANKS} ranks, rank by rank"
    for r, losses in enumerate(run.losses[1:], start=1):
        at, _ = first_difference(run.losses[0], losses)
        if at is not None or len(losses) != len(run.losses[0]):
            where = f"iteration {at + 1}" if at is not None else "the number of steps"
            return Check(False, f"{label}: rank {r}'s step() returned another loss than rank 0's "
                                f"({where}): return the global loss, reduced over the ranks")
    return Check(True, f"{label}: every rank's step() returned the same losses")


def _restore(one: Run, three: Run, at: int) -> Check:
    """Whether the checkpoint of the 1-rank run after ``at`` steps, restored on 1 rank and on
    :data:`RANKS` ranks, goes on with the 1-rank run's losses."""
    label = f"checkpoint: the state after iteration {at} on 1 rank"
    want = one.losses[0][at:]
    for ranks, got in ((1, one.restored or []), (RANKS, three.restored or [])):
        where, _ = first_difference(want, got)
        if where is not None or len(got) != len(want):
            k = at + 1 + (where if where is not None else min(len(got), len(want)))
            why = ("get_state() must hold the whole model, and set_state() restore all of it"
                   if ranks == 1 else "on 1 rank it goes on exactly: set_state(), or the steps "
                   "after it, depend on the rank or its rows")
            return Check(False, f"{label}, restored on {ranks} rank{'s' * (ranks > 1)}, goes on "
                                f"with other losses from iteration {k}: {why}")
    largest = first_difference(want, three.restored or [])[1]
    return Check(True, f"{label}, restored on 1 and on {RANKS} ranks, goes on with the same "
                       f"losses (largest relative difference {largest:.1e})")


def check_solver(algorithm: str, cls: type[Solver], data: str | None, seed: int, iterations: int,
                 mpiexec: str | None, timeout: float) -> tuple[str, list[Check]]:
    """Check ``cls`` (loaded from ``algorithm``); a line saying what was run, and the checks."""
    exe = find_mpiexec(mpiexec)
    at = max(1, iterations // 2)
    with tempfile.TemporaryDirectory(prefix=".slaq-check-solver-", dir=_scratch()) as tmp:
        where = Path(tmp)
        path, shown = pick_data(cls, data, seed, where / "data")
        spec = {"algorithm": algorithm, "data": str(path.absolute()), "seed": seed,
                "iterations": iterations, "checkpoint_at": at, "save": None, "restore": None}
        serial = serial_run(cls, path, seed, iterations)
        state = str(where / "state")
        one = ranks_run(algorithm, 1, {**spec, "save": state, "restore": state}, exe, where, timeout)
        three = ranks_run(algorithm, RANKS, {**spec, "restore": state}, exe, where, timeout)
    head = f"{iterations} iterations of {cls.__name__} on {shown}, seed {seed}; ranks under {exe}"
    checks = [Check(False, f"{label}: {run.error}") for label, run in
              (("serial", serial), ("1 rank", one), (f"{RANKS} ranks", three)) if run.error]
    if not (serial.error or one.error):
        checks.append(_agree("serial and 1 rank", serial, one, ("serial", "1 rank")))
    if not (one.error or three.error):
        checks += [_agree(f"1 and {RANKS} ranks", one, three, ("1 rank", f"{RANKS} ranks")),
                   _ranks_alike(three), _restore(one, three, at)]
    return head, checks


def _scratch() -> str | None:
    """Where the check's files go: the working directory if writable (ranks on other nodes of
    an allocation see it), else the system's temporary directory."""
    return "." if os.access(".", os.W_OK) else None
