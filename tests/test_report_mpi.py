"""``slaq report`` and ``slaq sim-check`` on the run directory of a real ``slaq run`` (mpiexec),
their figures checked against the run's own record, read here with h5py alone and computed from
the definitions in DESIGN.md and docs/metrics.md."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import yaml

from tests.conftest import ROOT, run_slaq

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished real run of tests/configs/move.yaml (3 jobs under fair, one moving ranks)."""
    where = tmp_path_factory.mktemp("real")
    raw = yaml.safe_load((ROOT / "tests" / "configs" / "move.yaml").read_text())
    raw["output_dir"] = str(where / "run")
    cfg = where / "move.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    res = run_slaq(["run", str(cfg)], cwd=where, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return where / "run"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _jobs(path: Path) -> dict[str, dict[str, Any]]:
    with h5py.File(path, "r") as f:
        return {name: {"loss": g["loss"][()], "time": g["time"][()], "arrival": float(g.attrs["arrival"]),
                       "end": float(g.attrs["end"]), "status": _text(g.attrs["status"])}
                for name, g in f["jobs"].items()}


def _normalized(job: dict[str, Any]) -> np.ndarray:
    """Normalized loss after each iteration, L* being the job's lowest loss in this one run."""
    loss = job["loss"]
    return (loss - loss.min()) / (loss[0] - loss.min())


def _value_at(job: dict[str, Any], t: float) -> float | None:
    """The job's normalized loss at time t: 1 from arrival until its first iteration ends,
    then that of its last iteration ended; None outside [arrival, end)."""
    if not job["arrival"] <= t < job["end"]:
        return None
    done = int(np.sum(job["time"] <= t))
    return 1.0 if done == 0 else float(_normalized(job)[done - 1])


def _expected(path: Path) -> dict[str, float]:
    """The report's figures for one finished real run, from its record."""
    jobs = _jobs(path)
    assert all(j["status"] == "done" for j in jobs.values()), jobs
    first, last = min(j["arrival"] for j in jobs.values()), max(j["end"] for j in jobs.values())
    completion = [j["end"] - j["arrival"] for j in jobs.values()]
    out: dict[str, float] = {"jobs": len(jobs), "makespan": last - first,
                             "mean_completion": float(np.mean(completion)),
                             "median_completion": float(np.median(completion))}
    for level in (90, 95):
        hit = [float(j["time"][np.flatnonzero(_normalized(j) <= 1 - level / 100 + 1e-12)[0]] - j["arrival"])
               for j in jobs.values() if np.any(_normalized(j) <= 1 - level / 100 + 1e-12)]
        out[f"reached_{level}"] = len(hit)
        out[f"mean_time_to_{level}"] = float(np.mean(hit))
        out[f"median_time_to_{level}"] = float(np.median(hit))
    # step functions between every time anything changes: evaluate each piece at its midpoint
    edges = np.unique(np.concatenate([[first, last], *(j["time"] for j in jobs.values()),
                                      *([j["arrival"], j["end"]] for j in jobs.values())]))
    edges = edges[(edges >= first) & (edges <= last)]
    busy = mean_sum = job_seconds = active_seconds = 0.0
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        values = [v for v in (_value_at(j, (a + b) / 2) for j in jobs.values()) if v is not None]
        active_seconds += len(values) * (b - a)
        if values:
            busy += b - a
            mean_sum += float(np.mean(values)) * (b - a)
            job_seconds += float(np.sum(values)) * (b - a)
    out.update(avg_normalized_loss=mean_sum / busy, normalized_loss_job_s=job_seconds,
               mean_active_jobs=active_seconds / (last - first))
    with h5py.File(path, "r") as f:
        out["decision_ms"] = float(np.mean(f["epochs/decision_ms"][()]))
    return out


def test_report_json_of_a_real_run_is_its_record(real_run: Path) -> None:
    res = run_slaq(["report", str(real_run), "--json", "--no-plots"], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(res.stdout.strip().splitlines()[-1])["runs"]
    assert list(rows) == ["fair"], rows
    row = rows["fair"]
    for key, want in _expected(real_run / "metrics.h5").items():
        assert row[key] == pytest.approx(want, rel=1e-9, abs=1e-12), (key, row[key], want)


def test_report_plots_of_a_real_run(real_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    res = run_slaq(["report", str(real_run), "--out", str(tmp_path / "plots")], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("avg_normalized_loss.png", "time_to_reduction.png", "core_share.png", "fairness.png"):
        png = tmp_path / "plots" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"wrote {png}" in res.stdout, res.stdout


def _shares(path: Path, at: np.ndarray, names: list[str]) -> np.ndarray:
    """Core shares of each job (columns: ``names``) at the times ``at``: the allocation of the
    epoch begun last at or before t, over the capacity; none for a job that has ended."""
    with h5py.File(path, "r") as f:
        capacity = int(f.attrs["capacity"])
        columns = [_text(n) for n in f["epochs/job_names"][()]]
        times, alloc = f["epochs/time"][()], f["epochs/alloc"][()]
        ends = {n: float(f["jobs"][n].attrs["end"]) for n in columns}
    out = np.zeros((len(at), len(names)))
    for i, t in enumerate(at):
        epoch = int(np.sum(times <= t)) - 1
        for k, name in enumerate(names):
            if epoch >= 0 and name in columns and not t >= ends[name]:
                out[i, k] = alloc[epoch, columns.index(name)] / capacity
    return out


def test_sim_check_of_a_real_run_is_its_record(real_run: Path, tmp_path: Path) -> None:
    sim_dir = tmp_path / "sim"
    res = run_slaq(["sim-check", str(real_run), "--json", "--out", str(sim_dir)], timeout=600)
    answer = json.loads(res.stdout.strip().splitlines()[-1])
    assert res.returncode == (0 if answer["ok"] else 1), res.stdout + res.stderr
    real, sim = real_run / "metrics.h5", sim_dir / "metrics.h5"
    with h5py.File(real, "r") as r, h5py.File(sim, "r") as s:
        for key in ("capacity", "epoch_seconds", "policy", "seed"):
            assert r.attrs[key] == s.attrs[key], key
        assert _text(s.attrs["mode"]) == "simulate" and _text(r.attrs["mode"]) == "run"
        real_times = r["epochs/time"][()]
    real_jobs, sim_jobs = _jobs(real), _jobs(sim)
    assert set(sim_jobs) == set(real_jobs)
    for name, job in real_jobs.items():  # the simulation replays the losses the run reported
        assert sim_jobs[name]["arrival"] == job["arrival"], name
        n = min(len(job["loss"]), len(sim_jobs[name]["loss"]))
        assert n > 0 and np.array_equal(sim_jobs[name]["loss"][:n], job["loss"][:n]), name
    names = sorted(real_jobs)
    differ = np.abs(_shares(real, real_times, names) - _shares(sim, real_times, names)).sum(axis=1) / 2
    want = float(differ.mean())
    assert math.isfinite(want) and answer["mean_share_difference"] == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert answer["ok"] == (want <= answer["threshold"]) and answer["threshold"] == 0.15
