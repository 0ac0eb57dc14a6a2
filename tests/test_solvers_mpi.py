"""Every solver under real mpiexec: 1 rank and 3 ranks give the same losses, and a state saved
at iteration k on 3 ranks continues on 2 ranks exactly like the uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slaq_mpi.data.datasets import DatasetSpec
from slaq_mpi.data.generators import generate
from tests.conftest import ROOT, run_mpi

pytestmark = pytest.mark.mpi

ITERATIONS, CHECKPOINT_AT = 14, 6
DATA = {
    "cls": ("classification", {"rows": 301, "features": 7}),
    "cls_sparse": ("classification", {"rows": 301, "features": 30, "density": 0.2}),
    "reg": ("regression", {"rows": 299, "features": 6}),
    "reg_sparse": ("regression", {"rows": 299, "features": 25, "density": 0.3}),
    "blobs": ("blobs", {"rows": 302, "features": 5, "centers": 4}),
    "docs": ("documents", {"rows": 120, "features": 40, "topics": 4, "doc_length": 30}),
}
JOBS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "logreg": ("logreg", "cls", {}),
    "logreg_sparse": ("logreg", "cls_sparse", {}),
    "logreg_lbfgs": ("logreg_lbfgs", "cls", {"history": 4}),
    "logreg_lbfgs_sparse": ("logreg_lbfgs", "cls_sparse", {}),
    "svm": ("svm", "cls", {}),
    "svm_smoothed_sparse": ("svm", "cls_sparse", {"loss": "smoothed_hinge"}),
    "linreg": ("linreg", "reg", {"l2": 0.01}),
    "linreg_sparse": ("linreg", "reg_sparse", {}),
    "mlp": ("mlp", "blobs", {"hidden": 8}),
    "kmeans": ("kmeans", "blobs", {"k": 4}),
    "gmm": ("gmm", "blobs", {"k": 4}),
    "lda": ("lda", "docs", {"topics": 4}),
    "gbt": ("gbt", "reg", {"max_depth": 3}),
    "gbt_classifier": ("gbt_classifier", "cls", {"max_depth": 3, "bins": 16}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[float]]]:
    """Losses of every job: 1 rank, 3 ranks, and 2 ranks resumed from the 3-rank state."""
    tmp = tmp_path_factory.mktemp("solvers_mpi")
    paths = {}
    for key, (gen, params) in DATA.items():
        paths[key] = tmp / f"{key}.h5"
        generate(DatasetSpec(generator=gen, params={**params, "seed": 5}), paths[key], 0)
    spec = [
        {"name": name, "algorithm": algo, "path": str(paths[data]), "params": params, "seed": 11,
         "iterations": ITERATIONS, "checkpoint_at": CHECKPOINT_AT}
        for name, (algo, data, params) in JOBS.items()
    ]
    (tmp / "spec.json").write_text(json.dumps(spec))
    script = str(ROOT / "tests" / "mpi_scripts" / "run_solvers.py")
    out: dict[str, dict[str, list[float]]] = {}
    for label, n, mode in (("one", 1, "full"), ("three", 3, "full"), ("resumed", 2, "resume")):
        state_dir = tmp / "states"
        state_dir.mkdir(exist_ok=True)
        result = tmp / f"{label}.json"
        proc = run_mpi(n, [script, str(tmp / "spec.json"), str(result), str(state_dir), mode])
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[label] = json.loads(Path(result).read_text())
    return out


@pytest.mark.parametrize("name", sorted(JOBS))
def test_same_losses_on_1_and_3_ranks(runs: dict[str, dict[str, list[float]]], name: str) -> None:
    one, three = np.array(runs["one"][name]), np.array(runs["three"][name])
    assert len(one) == ITERATIONS and np.all(np.isfinite(one))
    assert one[-1] < one[0]  # it trains
    np.testing.assert_allclose(three, one, rtol=1e-9, atol=0)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_restore_on_other_rank_count_continues_exactly(
    runs: dict[str, dict[str, list[float]]], name: str
) -> None:
    resumed = np.array(runs["resumed"][name])
    assert len(resumed) == ITERATIONS - CHECKPOINT_AT
    np.testing.assert_allclose(resumed, runs["three"][name][CHECKPOINT_AT:], rtol=1e-9, atol=0)
