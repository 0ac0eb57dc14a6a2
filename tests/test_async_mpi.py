"""MPI tier: the asynchronous runtime. Jobs that are not moved never stop (no gap at
decisions, untouched by other jobs' moves), a slow job delays no other, nothing is collective
over the world between start-up and shutdown, and freed ranks are given out at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import yaml

from tests.conftest import ROOT, run_mpi

pytestmark = pytest.mark.mpi

PACED = ROOT / "tests" / "solvers" / "paced.py"
LOGGED = ROOT / "tests" / "solvers" / "logged.py"


def _data(seed: int, rows: int = 2000) -> dict[str, Any]:
    return {"generator": "classification", "rows": rows, "features": 10, "seed": seed}


def _run(tmp_path: Path, ranks: int, jobs: list[dict[str, Any]], **config: Any) -> h5py.File:
    cfg = tmp_path / "async.yaml"
    cfg.write_text(yaml.safe_dump({"name": "async", "output_dir": str(tmp_path / "run"),
                                   "ranks": ranks, "seed": 3, "jobs": jobs, **config}))
    proc = run_mpi(ranks, ["-m", "slaq_mpi", "run", str(cfg)], cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return h5py.File(tmp_path / "run" / "metrics.h5")


def _starts_ends(f: h5py.File, job: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = f["jobs"][job]
    end = g["time"][()]
    return end - g["iter_seconds"][()], end, g["cores"][()]


def test_a_move_of_two_jobs_leaves_the_other_two_untouched(tmp_path: Path) -> None:
    # fair on 6 workers: a and b are capped at one core each, c and d share the rest; e arrives
    # at 2 s and ends soon after, so c and d shrink for it and grow back. The epoch is longer
    # than the run: no regular report or checkpoint, only the decisions for e's arrival and end
    def paced(name: str, iterations: int, seed: int, **extra: Any) -> dict[str, Any]:
        return {"name": name, "algorithm": f"{LOGGED}:Logged", "stop": {"max_iterations": iterations},
                "hyperparameters": {"pace": 0.01, "log": str(tmp_path / f"{name}.log")},
                "dataset": _data(seed), **extra}

    jobs = [paced("a", 500, 1, max_cores=1), paced("b", 500, 2, max_cores=1),
            paced("c", 500, 3), paced("d", 500, 4), paced("e", 60, 5, arrival=2.0)]
    with _run(tmp_path, 7, jobs, policy="fair", epoch_seconds=60.0) as f:
        assert {n: g.attrs["status"] for n, g in f["jobs"].items()} == dict.fromkeys("abcde", "done")
        assert int(f.attrs["world_collectives"]) == 0  # no collective over the world in the run
        decisions = f["epochs/time"][()]
        assert len(decisions) >= 3, decisions  # the start, e's arrival, e's end
        for name in "ab":
            start, end, cores = _starts_ends(f, name)
            assert set(cores.tolist()) == {1}
            gaps = start[1:] - end[:-1]
            at = [int(np.searchsorted(end, t)) - 1 for t in decisions[1:] if end[0] <= t < end[-1]]
            # its iterations run on through the decisions: at most a short gap there
            assert at and max(gaps[i] for i in at) <= 0.05, [(i, gaps[i]) for i in at]
        moved = {n for n in "cd" if len(set(_starts_ends(f, n)[2].tolist())) > 1}
        assert moved == {"c", "d"}, moved
    for name in "ab":  # one solver per rank, never restored: the same group all along
        assert (tmp_path / f"{name}.log").read_text() == "build 0/1\n"
        assert [p.name for p in (tmp_path / "run" / "checkpoints" / name).glob("*.h5")] == ["00000500.h5"]
    for name in "cd":  # rebuilt on new ranks, restored from the checkpoints of the moves
        assert "restore" in (tmp_path / f"{name}.log").read_text()


def test_a_straggler_does_not_slow_a_fast_job(tmp_path: Path) -> None:
    # each of the straggler's iterations lasts three epochs; the fast job's pace while the
    # straggler trains is its pace once the straggler is done, on the same one core
    epoch = 0.5
    jobs = [
        {"name": "slow", "algorithm": f"{PACED}:Paced", "max_cores": 1, "stop": {"max_iterations": 4},
         "hyperparameters": {"pace": 3 * epoch}, "dataset": _data(1)},
        {"name": "fast", "algorithm": f"{PACED}:Paced", "max_cores": 1, "stop": {"max_iterations": 1200},
         "hyperparameters": {"pace": 0.01}, "dataset": _data(2)},
    ]
    with _run(tmp_path, 3, jobs, policy="fair", epoch_seconds=epoch) as f:
        slow_end = float(f["jobs/slow"].attrs["end"])
        start, end, _cores = _starts_ends(f, "fast")
    during = start[end < slow_end]
    after = start[start > slow_end]
    assert len(during) > 100 and len(after) > 100, (len(during), len(after))
    pace_during = (during[-1] - during[0]) / (len(during) - 1)
    pace_after = (after[-1] - after[0]) / (len(after) - 1)
    assert pace_during <= 1.05 * pace_after, (pace_during, pace_after)


def test_a_job_that_ends_frees_its_ranks_at_once(tmp_path: Path) -> None:
    # "short" ends within milliseconds of an 8 s epoch: rank 0 decides then, and "long" gets
    # the freed rank then, not at the next regular decision
    epoch = 8.0
    jobs = [
        {"name": "short", "algorithm": "logreg", "stop": {"max_iterations": 5}, "dataset": _data(1)},
        {"name": "long", "algorithm": "logreg", "stop": {"max_iterations": 1500},
         "dataset": _data(2, rows=20000)},
    ]
    with _run(tmp_path, 3, jobs, policy="fair", epoch_seconds=epoch) as f:
        times, alloc = f["epochs/time"][()], f["epochs/alloc"][()]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f["epochs/job_names"][()]]
        short_end = float(f["jobs/short"].attrs["end"])
        long_end = float(f["jobs/long"].attrs["end"])
        stopped, elapsed = float(f.attrs["stopped"]), float(f.attrs["elapsed"])
        _start, end, cores = _starts_ends(f, "long")
    assert times[-1] <= long_end <= stopped <= elapsed, (times[-1], long_end, stopped, elapsed)
    assert len(times) >= 2 and times[0] <= short_end <= times[1] <= short_end + epoch / 4, (short_end, times)
    assert alloc[0, names.index("long")] == 1 and alloc[1, names.index("long")] == 2, alloc
    assert cores[0] == 1 and cores[-1] == 2 and end[cores == 2][0] < times[0] + epoch / 2
