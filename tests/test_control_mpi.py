"""MPI tier: a scheduler you submit to. An open run takes jobs added while it runs (``slaq
add``), cancels jobs (``slaq cancel``) and ends when drained (``slaq drain``); bad requests are
refused with one line and leave the running run as it was."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
import yaml

from tests.conftest import ROOT, Started, run_slaq

pytestmark = pytest.mark.mpi

PACED = ROOT / "tests" / "solvers" / "paced.py"
Launch = Callable[..., Started]


def _job(name: str, iterations: int, seed: int, pace: float = 0.01, **extra: Any) -> dict[str, Any]:
    return {"name": name, "algorithm": f"{PACED}:Paced", "stop": {"max_iterations": iterations},
            "hyperparameters": {"pace": pace},
            "dataset": {"generator": "classification", "rows": 2000, "features": 8, "seed": seed},
            **extra}


def _open_run(tmp_path: Path, launch: Launch, jobs: list[dict[str, Any]]) -> tuple[Started, Path]:
    cfg = tmp_path / "open.yaml"
    cfg.write_text(yaml.safe_dump({"name": "open", "output_dir": str(tmp_path / "run"), "ranks": 5,
                                   "epoch_seconds": 0.5, "policy": "fair", "seed": 2, "open": True,
                                   "jobs": jobs}))
    proc = launch(["run", str(cfg)], tmp_path)
    run = tmp_path / "run"
    proc.wait_for("the run's spool", lambda: (run / "spool").is_dir() and (run / "metrics.h5").is_file())
    return proc, run


def _add(tmp_path: Path, run: Path, name: str, jobs: list[dict[str, Any]], *flags: str) -> Any:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(jobs))
    return run_slaq(["add", str(run), str(path), *flags], cwd=tmp_path, timeout=300)


def _statuses(run: Path) -> dict[str, str]:
    with h5py.File(run / "metrics.h5") as f:
        return {n: str(g.attrs["status"]) for n, g in f["jobs"].items()}


def test_add_cancel_drain_an_open_run(tmp_path: Path, launch: Launch) -> None:
    proc, run = _open_run(tmp_path, launch, [_job("a", 150, 1), _job("b", 3000, 2)])
    res = _add(tmp_path, run, "first", [_job("c", 100, 3)], "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "admitted c" in res.stdout and "job c: first assignment" in res.stdout, res.stdout
    res = _add(tmp_path, run, "more", [_job("d", 80, 4), _job("e", 60, 5, arrival=1.0)])
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_slaq(["cancel", str(run), "b"], cwd=tmp_path, timeout=120)
    assert res.returncode == 0 and "cancel b: done" in res.stdout, res.stdout + res.stderr
    proc.wait_for("every job but b done", lambda: _statuses(run).get("e") == "done" and all(
        s in ("done", "cancelled") for s in _statuses(run).values()), timeout=300)
    time.sleep(1.5)  # the open run waits for more jobs
    assert proc.proc.poll() is None, proc.shown()
    res = run_slaq(["cancel", str(run), "a"], cwd=tmp_path, timeout=60)  # a job that has ended
    assert res.returncode == 2 and len((res.stdout + res.stderr).strip().splitlines()) == 1, res.stderr
    assert "already ended (done)" in res.stderr, res.stderr
    res = run_slaq(["drain", str(run)], cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert proc.finish(120) == 0, proc.shown()
    assert _statuses(run) == {"a": "done", "b": "cancelled", "c": "done", "d": "done", "e": "done"}
    with h5py.File(run / "metrics.h5") as f:
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["epochs/job_names"][()]]
        alloc, times = f["epochs/alloc"][()], f["epochs/time"][()]
        b_end = float(f["jobs/b"].attrs["end"])
    # from the decision made at the cancel on, b holds no cores
    after = [i for i, t in enumerate(times) if t >= b_end]
    assert all(alloc[i, names.index("b")] == 0 for i in after), (b_end, times, alloc)
    report = run_slaq(["report", str(run), "--no-plots", "--json"], cwd=tmp_path, timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    summary = json.loads(report.stdout.strip().splitlines()[-1])
    assert summary["runs"]["fair"]["jobs"] == 5, summary  # the added jobs count as the run's


def test_bad_requests_are_refused_and_leave_the_run_alone(tmp_path: Path, launch: Launch) -> None:
    proc, run = _open_run(tmp_path, launch, [_job("a", 4000, 1)])
    before = (run / "config.yaml").read_bytes()
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("- name: x\n  algorithm: [unclosed\n")
    cases = [
        run_slaq(["add", str(run), str(bad_yaml)], cwd=tmp_path),
        _add(tmp_path, run, "dup", [_job("a", 10, 3)]),
        _add(tmp_path, run, "algo", [{**_job("x", 10, 3), "algorithm": "no-such-solver"}]),
        _add(tmp_path, run, "data", [{**_job("y", 10, 3), "dataset": {"path": str(tmp_path / "gone.h5")}}]),
        run_slaq(["add", str(tmp_path), str(bad_yaml)], cwd=tmp_path),
        run_slaq(["cancel", str(run), "nobody"], cwd=tmp_path),
    ]
    for res in cases:
        lines = (res.stdout + res.stderr).strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr
    assert sorted(p.name for p in (run / "spool").iterdir()) == []  # nothing handed to rank 0
    assert not (run / "added.yaml").exists() and (run / "config.yaml").read_bytes() == before
    with h5py.File(run / "metrics.h5") as f:
        seen = len(f["jobs/a/loss"])
    proc.wait_for("a keeps iterating", lambda: _iterations(run, "a") > seen + 10)
    assert set(_statuses(run)) == {"a"}
    # a finished job cannot be cancelled; a finished run takes no jobs
    res = run_slaq(["drain", str(run)], cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_slaq(["cancel", str(run), "a"], cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr  # a is running: cancelled
    assert proc.finish(120) == 0, proc.shown()
    assert json.loads((run / "state.json").read_text())["finished"]
    for res in (run_slaq(["cancel", str(run), "a"], cwd=tmp_path),
                _add(tmp_path, run, "late", [_job("z", 10, 9)])):
        lines = (res.stdout + res.stderr).strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr


def _iterations(run: Path, job: str) -> int:
    try:
        with h5py.File(run / "metrics.h5") as f:
            return len(f["jobs"][job]["loss"])
    except (OSError, KeyError):
        return -1
