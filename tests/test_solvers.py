"""Every solver's converged result against an independent serial reference (one rank)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp

from jobs import ALGORITHMS, SerialComm, Shard, load_solver


def _shard(X: Any, y: np.ndarray | None) -> Shard:
    return Shard(X=X, y=y, row_start=0, n_rows=X.shape[0])


def _run(algorithm: str, X: Any, y: np.ndarray | None, iters: int, seed: int = 3, **params: Any):
    solver = load_solver(algorithm)(SerialComm(), _shard(X, y), params, seed)
    return solver, np.array([solver.step() for _ in range(iters)])


@pytest.fixture(scope="module")
def binary() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 6))
    y = (X @ rng.standard_normal(6) + rng.standard_normal(400) > 0).astype(float)
    return X, y


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    rng = np.random.default_rng(1)
    centers = rng.uniform(-4, 4, (4, 3))
    return centers[rng.integers(0, 4, 600)] + rng.standard_normal((600, 3))


def _scipy_min(fun: Any, dim: int) -> float:
    res = so.minimize(fun, np.zeros(dim), jac=True, method="L-BFGS-B",
                      options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 20000, "maxcor": 30})
    return float(res.fun)


def _logistic(X: np.ndarray, y: np.ndarray, l2: float):
    s = 2 * y - 1

    def fun(v: np.ndarray) -> tuple[float, np.ndarray]:
        m = s * (X @ v[:-1] + v[-1])
        c = -s * np.exp(-np.logaddexp(0, m)) / len(y)
        g = np.append(X.T @ c + l2 * v[:-1], c.sum())
        return float(np.logaddexp(0, -m).mean() + 0.5 * l2 * v[:-1] @ v[:-1]), g

    return fun


@pytest.mark.parametrize("algorithm,iters,params", [
    ("logreg_lbfgs", 80, {}), ("logreg", 3000, {"learning_rate": 4.0}),
])
def test_logistic_matches_scipy(binary, algorithm: str, iters: int, params: dict) -> None:
    X, y = binary
    _, losses = _run(algorithm, X, y, iters, l2=1e-2, **params)
    ref = _scipy_min(_logistic(X, y, 1e-2), X.shape[1] + 1)
    assert abs(losses[-1] - ref) <= 1e-6 * abs(ref)
    assert losses[-1] >= ref - 1e-12  # never below the optimum


def test_lbfgs_sparse_input_matches_dense(binary) -> None:
    X, y = binary
    X = X * (np.random.default_rng(2).random(X.shape) < 0.5)
    _, dense_losses = _run("logreg_lbfgs", X, y, 20)
    _, sparse_losses = _run("logreg_lbfgs", sp.csr_matrix(X), y, 20)
    np.testing.assert_allclose(sparse_losses, dense_losses, rtol=1e-10)


@pytest.mark.parametrize("loss", ["squared_hinge", "smoothed_hinge"])
def test_svm_matches_scipy(binary, loss: str) -> None:
    X, y = binary
    s, l2, h = 2 * y - 1, 1e-2, 1.0

    def fun(v: np.ndarray) -> tuple[float, np.ndarray]:
        z = 1 - s * (X @ v[:-1] + v[-1])
        if loss == "squared_hinge":
            val, dz = np.maximum(z, 0) ** 2, 2 * np.maximum(z, 0)
        else:
            val = np.where(z <= 0, 0, np.where(z >= h, z - h / 2, z * z / (2 * h)))
            dz = np.clip(z, 0, h) / h
        c = -s * dz / len(y)
        return (float(val.mean() + 0.5 * l2 * v[:-1] @ v[:-1]),
                np.append(X.T @ c + l2 * v[:-1], c.sum()))

    _, losses = _run("svm", X, y, 4000, l2=l2, loss=loss, learning_rate=0.5)
    ref = _scipy_min(fun, X.shape[1] + 1)
    assert abs(losses[-1] - ref) <= 1e-6 * abs(ref)


@pytest.mark.parametrize("sparse", [False, True])
def test_linreg_matches_lstsq(sparse: bool) -> None:
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 8)) * (rng.random((500, 8)) < (0.5 if sparse else 1.0))
    y = X @ rng.standard_normal(8) + 3.0 + 0.1 * rng.standard_normal(500)
    solver, losses = _run("linreg", sp.csr_matrix(X) if sparse else X, y, 30)
    A = np.hstack([X, np.ones((500, 1))])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    np.testing.assert_allclose(solver.get_state()["w"], coef, rtol=0, atol=1e-8 * np.abs(coef).max())
    ref = 0.5 * np.mean((A @ coef - y) ** 2)
    assert abs(losses[-1] - ref) <= 1e-8 * ref


def _serial_kmeans(X: np.ndarray, centroids: np.ndarray, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        d2 = ((X[:, None, :] - centroids[None]) ** 2).sum(-1)
        idx = d2.argmin(1)
        out.append(d2.min(1).mean())
        centroids = np.array([X[idx == j].mean(0) if (idx == j).any() else centroids[j]
                              for j in range(len(centroids))])
    return out


def test_kmeans_matches_serial_numpy(blobs: np.ndarray) -> None:
    rows = np.sort(np.random.default_rng(3).choice(len(blobs), size=4, replace=False))
    ref = _serial_kmeans(blobs, blobs[rows], 25)
    _, losses = _run("kmeans", blobs, None, 25, k=4)
    np.testing.assert_allclose(losses, ref, rtol=1e-10)


def _serial_gmm(X: np.ndarray, means: np.ndarray, iters: int, reg: float) -> list[float]:
    k = len(means)
    var = np.tile(X.var(0) + reg, (k, 1))
    weights = np.full(k, 1.0 / k)
    out = []
    for _ in range(iters):
        logp = np.stack([
            np.log(weights[j]) - 0.5 * (((X - means[j]) ** 2 / var[j]).sum(1)
                                        + np.log(2 * np.pi * var[j]).sum())
            for j in range(k)
        ], axis=1)
        top = logp.max(1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(logp - top).sum(1))
        out.append(-lse.mean())
        r = np.exp(logp - lse[:, None])
        nk = r.sum(0)
        means = (r.T @ X) / nk[:, None]
        var = np.stack([(r[:, j, None] * (X - means[j]) ** 2).sum(0) / nk[j] for j in range(k)]) + reg
        weights = nk / nk.sum()
    return out


def test_gmm_matches_serial_numpy(blobs: np.ndarray) -> None:
    rows = np.sort(np.random.default_rng(3).choice(len(blobs), size=4, replace=False))
    ref = _serial_gmm(blobs, blobs[rows], 30, 1e-6)
    _, losses = _run("gmm", blobs, None, 30, k=4)
    np.testing.assert_allclose(losses, ref, rtol=1e-9)
    assert np.all(np.diff(losses) <= 1e-12)  # EM never increases the negative log-likelihood


def test_lda_bound_increases_every_iteration() -> None:
    rng = np.random.default_rng(5)
    topics = rng.dirichlet(np.full(60, 0.1), 5)
    theta = rng.dirichlet(np.full(5, 0.2), 250)
    C = sp.csr_matrix(np.array([rng.multinomial(50, t @ topics) for t in theta]), dtype=float)
    _, losses = _run("lda", C, None, 25, topics=5)
    assert np.all(np.diff(losses) < 0), np.diff(losses)  # loss = -bound per word
    assert losses[0] - losses[-1] > 0.1


def test_mlp_loss_falls_90_percent(blobs: np.ndarray) -> None:
    labels = np.argmin(((blobs[:, None] - blobs[[0, 1, 2, 3]][None]) ** 2).sum(-1), axis=1)
    _, losses = _run("mlp", blobs, labels.astype(float), 300, hidden=16)
    assert losses[-1] <= 0.1 * losses[0]


def test_gbt_first_split_is_the_exhaustive_best() -> None:
    rng = np.random.default_rng(6)
    X = rng.uniform(0, 1, (500, 3))
    y = np.where(X[:, 1] > 0.62, 2.0, 0.0) + 0.1 * rng.standard_normal(500)
    solver, losses = _run("gbt", X, y, 1, max_depth=1, bins=20, l2=0.0, learning_rate=1.0)
    feat, thr, leaf = solver.trees[0]
    codes = np.clip(np.floor((X - X.min(0)) / ((X.max(0) - X.min(0)) / 20)), 0, 19)
    best = min((((y[codes[:, f] <= t] - y[codes[:, f] <= t].mean()) ** 2).sum()
                 + ((y[codes[:, f] > t] - y[codes[:, f] > t].mean()) ** 2).sum(), f, t)
                for f in range(3) for t in range(19) if 0 < (codes[:, f] <= t).sum() < 500)
    assert (int(feat[0]), int(thr[0])) == best[1:]
    assert losses[0] == pytest.approx(0.5 * np.mean(y * y) - 0.5 * y.mean() ** 2)


@pytest.mark.parametrize("algorithm", ["gbt", "gbt_classifier"])
def test_gbt_trains(binary, algorithm: str) -> None:
    X, y = binary
    target = y if algorithm == "gbt_classifier" else X @ np.arange(6.0) + np.sin(3 * X[:, 0])
    _, losses = _run(algorithm, X, target, 60)
    assert np.all(np.diff(losses) < 0)
    assert losses[-1] < 0.5 * losses[0]


def _data_for(cls: Any, binary, blobs) -> tuple[Any, np.ndarray | None]:
    X, y = binary
    kind = cls.dataset_kind
    if kind == "documents":
        rng = np.random.default_rng(8)
        return sp.csr_matrix(rng.poisson(0.5, (80, 30)).astype(float)), None
    if kind == "blobs":
        return blobs, (blobs[:, 0] > 0).astype(float)
    if kind == "regression":
        # with noise: an exact fit would drive the loss to roundoff, where restored runs differ
        return X, X @ np.arange(6.0) + np.random.default_rng(9).normal(0.0, 0.1, X.shape[0])
    return X, y


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_protocol_and_state_round_trip(binary, blobs, algorithm: str) -> None:
    cls = load_solver(algorithm)
    assert cls.convergence in ("sublinear", "linear")
    assert cls.dataset_kind in ("classification", "regression", "blobs", "documents")
    X, y = _data_for(cls, binary, blobs)
    a = cls(SerialComm(), _shard(X, y), {}, 9)
    for _ in range(4):
        a.step()
    state = a.get_state()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    b = cls(SerialComm(), _shard(X, y), {}, 9)
    b.set_state({k: v.copy() for k, v in state.items()})
    first = a.step()
    # bit-exact except linreg, whose per-row residuals are recomputed on restore
    np.testing.assert_allclose([b.step() for _ in range(4)], [first] + [a.step() for _ in range(3)],
                               rtol=1e-12, atol=1e-14 * abs(first))


def test_documented_user_solver_runs(tmp_path) -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "solvers.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    (tmp_path / "my_solver.py").write_text(code.group(1))
    cls = load_solver(f"{tmp_path}/my_solver.py:MeanEstimator")
    X = np.random.default_rng(0).standard_normal((50, 3)) + 2.0
    solver = cls(SerialComm(), _shard(X, None), {}, 0)
    losses = [solver.step() for _ in range(30)]
    assert np.all(np.diff(losses) <= 0) and losses[-1] < 0.5 * losses[0]
    np.testing.assert_allclose(solver.get_state()["mean"], X.mean(0), rtol=1e-6)


def test_all_algorithms_config_covers_every_algorithm() -> None:
    from pathlib import Path

    from slaq_mpi.config import experiment as config

    spec = config.load(Path(__file__).resolve().parent.parent / "configs" / "all-algorithms.yaml")
    assert {job.algorithm for job in spec.jobs} == set(ALGORITHMS)
    assert spec.ranks == 8 and spec.policy == "fair"


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_numeric_hyperparameter_has_a_range_that_admits_its_default(algorithm: str) -> None:
    cls = load_solver(algorithm)
    for key, default in cls.defaults.items():
        if isinstance(default, bool):
            continue
        assert key in cls.allowed, f"{algorithm}.{key} has no allowed values"
        assert cls.allowed[key].admits(default), (algorithm, key, default)
    assert cls.hyperparameter_problem(cls.defaults, rows=100) is None


def test_a_solver_refuses_values_outside_its_range(blobs: np.ndarray, binary) -> None:
    with pytest.raises(ValueError, match=r"k -4: must be >= 1"):
        _run("kmeans", blobs, None, 1, k=-4)
    with pytest.raises(ValueError, match=r"k 601: must be at most the dataset's 600 rows"):
        _run("gmm", blobs, None, 1, k=601)
    with pytest.raises(ValueError, match=r"momentum 1.0: must be in \[0, 1\)"):
        _run("mlp", blobs, (blobs[:, 0] > 0).astype(float), 1, momentum=1.0)
    with pytest.raises(ValueError, match=r"loss 'hinge': must be one of squared_hinge, smoothed_hinge"):
        _run("svm", *binary, 1, loss="hinge")
    with pytest.raises(ValueError, match=r"mlp classes 2: the labels go up to 3; set classes to at least 4"):
        _run("mlp", blobs, np.arange(600) % 4, 1, classes=2)
    with pytest.raises(ValueError, match=r"bins 300: must be in \[2, 256\]"):
        _run("gbt", binary[0], binary[1], 1, bins=300)

def test_allowed_describes_itself() -> None:
    from jobs.base import Allowed

    assert str(Allowed()) == "a finite number"
    assert not Allowed().admits(float("nan")) and Allowed().admits(10**400)
    assert str(Allowed(hi=1, hi_open=True)) == "< 1"


@pytest.mark.parametrize("algorithm", ["logreg", "logreg_lbfgs", "svm", "linreg", "kmeans", "gmm",
                                       "mlp", "lda"])
def test_sparse_input_gives_the_losses_of_dense_input(algorithm: str) -> None:
    """docs/solvers.md lists these as taking CSR input."""
    rng = np.random.default_rng(4)
    X = rng.poisson(0.7, (300, 12)).astype(np.float64)  # counts: also valid input for lda
    y = (X[:, 0] + rng.standard_normal(300) > 0.7).astype(np.float64)
    params = {"k": 3} if algorithm in ("kmeans", "gmm") else {}
    _, dense_losses = _run(algorithm, X, y, 15, **params)
    _, sparse_losses = _run(algorithm, sp.csr_matrix(X), y, 15, **params)
    assert np.all(np.isfinite(dense_losses))
    np.testing.assert_allclose(sparse_losses, dense_losses, rtol=1e-9)


def test_a_step_result_counts_as_a_loss_only_when_it_is_one_real_number() -> None:
    from slaq_mpi.runtime.worker import _loss_value

    for good in (0.5, 2, np.float32(0.25), np.int64(3), np.array(1.5)):
        assert _loss_value(good) == float(good) and type(_loss_value(good)) is float
    for bad, shown in ((None, "None"), (np.array([1.0]), "an array of shape (1,)"),
                       (True, "True"), ("0.5", "'0.5'"), (np.array(1 + 2j), "array")):
        with pytest.raises(TypeError, match=re.escape(shown)):
            _loss_value(bad)
