"""MPI tier: real ``mpiexec`` runs of the runtime (coordinator + workers)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from jobs import SerialComm, load_solver
from slaq_mpi.config.experiment import load
from slaq_mpi.data.datasets import read_shard
from tests.conftest import ROOT, run_mpi
from tests.mpi_runs import check_epoch_lines

pytestmark = pytest.mark.mpi


def _config(tmp_path: Path, name: str, **changes: object) -> Path:
    raw = yaml.safe_load((ROOT / "tests" / "configs" / name).read_text())
    raw["output_dir"] = str(tmp_path / "run")
    raw.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(n: int, config: Path, cwd: Path) -> str:
    proc = run_mpi(n, ["-m", "slaq_mpi", "run", str(config)], cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "epoch    0" in proc.stdout
    return proc.stdout


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def test_moved_job_matches_fixed_ranks(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "move.yaml")
    _run(4, cfg, tmp_path)
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        for name in ("a", "b", "c"):
            assert f["jobs"][name].attrs["status"] == "done"
        loss = f["jobs/a/loss"][()]
        cores = f["jobs/a/cores"][()]
    assert {1, 2, 3} <= set(cores.tolist()), f"job a ran only on {sorted(set(cores))} ranks"
    # The same job on one fixed rank, serially, on the same generated data.
    job = next(j for j in load(cfg).jobs if j.name == "a")
    data = tmp_path / "run" / "data" / f"{job.dataset.key(job.seed)}.h5"
    solver = load_solver("logreg")(SerialComm(), read_shard(data, 0, 1), job.hyperparameters, job.seed)
    ref = [solver.step() for _ in range(len(loss))]
    rel = np.abs(np.asarray(ref) - loss) / np.abs(np.asarray(ref))
    assert rel.max() <= 1e-9, f"max relative difference {rel.max():.3e}"


def test_quickstart_shape_run_on_8_ranks(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "small8.yaml", output_dir="run")  # relative to the launch directory
    out = _run(8, cfg, tmp_path)
    # 7 busy worker ranks: on fewer CPUs the run says its jobs' collectives wait sleeping
    assert ("worker ranks share" in out) == (_cpus() < 7), out[:2000]
    # the log's last line says where the metrics are and how to read them, from anywhere
    # (absolute: a Slurm log is read from another directory)
    assert out.rstrip().splitlines()[-1] == (f"metrics: {tmp_path / 'run' / 'metrics.h5'} "
                                             f"(table and plots: slaq report {tmp_path / 'run'})")
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        statuses = {n: g.attrs["status"] for n, g in f["jobs"].items()}
        assert set(statuses.values()) == {"done"}, statuses
        alloc = f["epochs/alloc"][()]
        assert alloc.sum(axis=1).max() <= 7
        assert f["epochs/moved"][()].sum() >= 1
    # rank 0's line per epoch (README: the counts after the epoch, the cores held during it)
    check_epoch_lines(out, tmp_path / "run")
    ckpts = list((tmp_path / "run" / "checkpoints").rglob("*.h5"))
    assert ckpts, "no checkpoints written"


def test_the_experiment_clock_starts_once_the_data_is_ready(tmp_path: Path) -> None:
    # every dataset the run generates takes DELAY s more (tests/mpi_scripts/slow_data): with a
    # clock started before the data, the first epoch would begin DELAY s or more after t=0
    delay = 3.0
    cfg = tmp_path / "gen.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "gen", "output_dir": str(tmp_path / "run"), "ranks": 2, "epoch_seconds": 0.5,
        "jobs": [{"name": "a", "algorithm": "logreg", "stop": {"max_iterations": 3},
                  "dataset": {"generator": "classification", "rows": 3000, "features": 5}}]}))
    env = {"PYTHONPATH": str(ROOT / "tests" / "mpi_scripts" / "slow_data"),
           "SLAQ_TEST_DATA_SECONDS": str(delay),
           "SLAQ_DATA_CACHE": str(tmp_path / "cache")}  # an empty data cache: the run generates it
    proc = run_mpi(2, ["-m", "slaq_mpi", "run", str(cfg)], cwd=tmp_path, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    generating = next(i for i, ln in enumerate(lines) if ln.startswith("generating dataset for a"))
    started = next(i for i, ln in enumerate(lines) if ln.startswith("slaq: 1 job,"))
    assert generating < started, proc.stdout  # the run starts once the data is there
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        first_epoch = float(f["epochs/time"][0])
        first_iteration = float(f["jobs/a"].attrs["start"])
    assert 0.0 <= first_epoch <= first_iteration < delay, (first_epoch, first_iteration)


@pytest.mark.parametrize(("mode", "expected"), [("spread", "2 2 False"), ("same", "2 1 True")])
def test_ranks_bound_to_cores_of_their_own_are_not_oversubscribed(mode: str, expected: str,
                                                                  tmp_path: Path) -> None:
    if _cpus() < 2:
        pytest.skip("needs 2 CPUs to bind two ranks apart")
    script = ROOT / "tests" / "mpi_scripts" / "oversubscription.py"
    proc = run_mpi(3, [str(script), mode], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every rank's line (rank 0 and the two busy ones); the ranks' writes may share a line
    seen = sorted(re.findall(r"([0-9]) ([0-9]+ [0-9]+ (?:True|False))", proc.stdout))
    assert seen == [(str(r), expected) for r in range(3)], proc.stdout


def test_a_release_asked_during_an_iteration_is_taken_at_the_next_check(tmp_path: Path) -> None:
    # a job leader checks for asks once per chunk boundary: an ask that arrived meanwhile must
    # be taken there, not one chunk (for a slow job, one whole iteration) later
    script = ROOT / "tests" / "mpi_scripts" / "release_probe.py"
    proc = run_mpi(2, [str(script)], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "taken at the first check: ['busy-job']" in proc.stdout, proc.stdout + proc.stderr
