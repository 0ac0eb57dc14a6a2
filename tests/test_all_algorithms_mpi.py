"""MPI tier: every algorithm in one real run on 8 ranks (configs/all-algorithms.yaml)."""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
import yaml

from jobs import ALGORITHMS
from tests.conftest import ROOT, run_slaq

pytestmark = pytest.mark.mpi


def test_all_algorithms_config_finishes(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "configs" / "all-algorithms.yaml").read_text())
    raw["output_dir"] = str(tmp_path / "run")
    cfg = tmp_path / "all.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    proc = run_slaq(["run", str(cfg)], cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with h5py.File(tmp_path / "run" / "metrics.h5") as f:
        status = {n: str(g.attrs["status"]) for n, g in f["jobs"].items()}
        algorithms = {str(g.attrs["algorithm"]) for g in f["jobs"].values()}
        assert all(len(g["loss"]) > 0 for g in f["jobs"].values())
    assert set(status.values()) == {"done"}, status
    assert set(ALGORITHMS) <= algorithms
