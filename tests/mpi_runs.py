"""Helpers of the MPI tier's tests of whole runs: the fault-test config, waiting for a run's
epochs, the resume points a resumed run prints, and the serial reference its losses must equal."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

from jobs import SerialComm, load_solver
from slaq_mpi.config.experiment import load
from slaq_mpi.data.datasets import read_shard
from slaq_mpi.data.generators import materialize
from tests.processes import ROOT, Started

PACED = ROOT / "tests" / "solvers" / "paced.py"
# good-1 sleeps this long before each of its 1250 iterations: at least 7.5 s, 25 epochs of the
# faults config on any machine, so a test that acts at epoch 5 finds it still training
PACE = 0.006


def faults_jobs(solver: str = "Paced", **hyperparameters: Any) -> list[dict[str, Any]]:
    """The jobs of tests/configs/faults.yaml, good-1 run by ``tests/solvers/paced.py:solver``
    (logistic regression's losses, at least PACE s per iteration)."""
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    jobs: list[dict[str, Any]] = raw["jobs"]
    jobs[0].update(algorithm=f"{PACED}:{solver}", hyperparameters={"pace": PACE, **hyperparameters})
    return jobs


def faults_config(tmp_path: Path, **changes: object) -> Path:
    """tests/configs/faults.yaml with good-1 paced (:func:`faults_jobs`), run into tmp_path/run."""
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "faults.yaml").read_text())
    raw["output_dir"] = str(tmp_path / "run")
    raw["jobs"] = faults_jobs()
    raw.update(changes)
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def state_epoch(run: Path) -> int:
    """The epoch in the run's state.json (-1 while there is none or it is being replaced)."""
    try:
        return int(json.loads((run / "state.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError):
        return -1


def wait_epochs(run: Path, proc: Started, epochs: int) -> None:
    """Wait until the run has saved ``epochs`` epochs; fail if it ends first."""
    proc.wait_for(f"epoch {epochs} of {run}", lambda: state_epoch(run) >= epochs)


def resume_points(stdout: str) -> dict[str, tuple[int, int]]:
    """``job -> (iteration it continues from, recorded iterations run again)`` as a resumed run
    prints them."""
    found = re.findall(r"job (\S+): continues from iteration (\d+) \((\d+) recorded", stdout)
    return {name: (int(k), int(redo)) for name, k, redo in found}


def reference_losses(cfg: Path, job_name: str, n: int, tmp_path: Path) -> np.ndarray:
    """The job's first n losses on one fixed rank, run serially (a paced job as plain logreg)."""
    spec = load(cfg)
    job = next(j for j in spec.jobs if j.name == job_name)
    algorithm, params = job.algorithm, dict(job.hyperparameters)
    if algorithm.startswith(str(PACED)):
        algorithm = "logreg"
        for key in ("pace", "hold"):
            params.pop(key, None)
    data = materialize(job.dataset, tmp_path / "refdata", job.seed)
    solver = load_solver(algorithm)(SerialComm(), read_shard(data, 0, 1), params, job.seed)
    return np.array([solver.step() for _ in range(n)])


def check_equal_to_reference(cfg: Path, run: Path, tmp_path: Path) -> None:
    """Every job finished, with exactly the losses of its serial reference."""
    with h5py.File(run / "metrics.h5") as f:
        for name, g in f["jobs"].items():
            assert g.attrs["status"] == "done", (name, g.attrs["status"], g.attrs["reason"])
            loss = g["loss"][()]
            ref = reference_losses(cfg, name, len(loss), tmp_path)
            rel = np.max(np.abs(loss - ref) / np.abs(ref))
            assert rel <= 1e-9, f"{name}: relative difference {rel:.2e}"


def rank_pids(cfg: Path) -> dict[int, int]:
    """MPI rank -> pid of the ranks of ``slaq run cfg`` (from /proc: the launcher's rank
    variable in each process's environment)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            env = dict(v.split(b"=", 1) for v in (entry / "environ").read_bytes().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if str(cfg).encode() not in cmd:
            continue
        rank = env.get(b"PMI_RANK") or env.get(b"OMPI_COMM_WORLD_RANK")
        if rank is not None:
            found[int(rank)] = int(entry.name)
    return found


EPOCH_LINE = re.compile(r"epoch +(?P<epoch>\d+) t= *(?P<t>\S+)s "
                        r"running (?P<running>\d+) waiting (?P<waiting>\d+) "
                        r"done (?P<done>\d+)/(?P<jobs>\d+)(?: failed (?P<failed>\d+))? "
                        r"\| cores this epoch (?P<cores>.*?) \| mean loss/initial (?P<mean>\S+)")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_epoch_lines(stdout: str, run: Path) -> list[re.Match[str]]:
    """Rank 0's line per epoch of a fresh run, against the run's record: one line per epoch in
    order, each with its start time and the cores each job held (``epochs/alloc``), the job
    count, and on the last line the jobs done and failed. Returns the parsed lines."""
    raw = [line for line in stdout.splitlines() if line.startswith("epoch ")]
    lines = [EPOCH_LINE.fullmatch(line) for line in raw]
    assert all(lines), [line for line, m in zip(raw, lines, strict=True) if m is None]
    parsed = [m for m in lines if m is not None]
    with h5py.File(run / "metrics.h5") as f:
        names = [_text(n) for n in f["epochs/job_names"][()]]
        alloc, times = f["epochs/alloc"][()], f["epochs/time"][()]
        status = [_text(g.attrs["status"]) for g in f["jobs"].values()]
    assert [int(m["epoch"]) for m in parsed] == list(range(len(times))), raw
    for m, row, t in zip(parsed, alloc, times, strict=True):
        shown = {name: int(c) for name, c in (pair.split(":") for pair in m["cores"].split())}
        assert shown == {n: int(c) for n, c in zip(names, row, strict=True) if c > 0}, (m.group(0), row)
        assert m["t"] == f"{t:.1f}", (m.group(0), t)
        assert int(m["jobs"]) == len(status), m.group(0)
    last = parsed[-1]
    assert int(last["done"]) == status.count("done"), (last.group(0), status)
    assert int(last["failed"] or 0) == status.count("failed"), (last.group(0), status)
    assert (last["failed"] is None) == ("failed" not in status), last.group(0)
    return parsed
