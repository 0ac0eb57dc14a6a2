"""LDA and the MLP against an independent serial computation of their objectives, as the other
solvers are checked against scipy (test_solvers.py): each objective and each update written
here from its definition (the solvers' docstrings), from the solver's own starting point."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp
from scipy.special import digamma, gammaln, logsumexp, xlogy

from jobs import SerialComm, Shard, load_solver


def _solver(algorithm: str, X: Any, y: np.ndarray | None, seed: int = 3, **params: Any) -> Any:
    return load_solver(algorithm)(SerialComm(), Shard(X=X, y=y, row_start=0, n_rows=X.shape[0]), params, seed)


# --- the MLP: mean cross-entropy of a softmax over one tanh layer, plus l2/2 |W|^2 ---------------

def _mlp_parts(theta: np.ndarray, d: int, h: int, c: int) -> list[np.ndarray]:
    sizes = [(d, h), (h,), (h, c), (c,)]
    cuts = np.cumsum([int(np.prod(s)) for s in sizes])[:-1]
    return [part.reshape(s) for part, s in zip(np.split(theta, cuts), sizes, strict=True)]


def _mlp_objective(theta: np.ndarray, X: np.ndarray, y: np.ndarray, h: int, c: int, l2: float) -> float:
    W1, b1, W2, b2 = _mlp_parts(theta, X.shape[1], h, c)
    logits = np.tanh(X @ W1 + b1) @ W2 + b2
    cross_entropy = np.mean(logsumexp(logits, axis=1) - logits[np.arange(len(y)), y])
    return float(cross_entropy + 0.5 * l2 * (np.sum(W1 ** 2) + np.sum(W2 ** 2)))


def _mlp_gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray, h: int, c: int, l2: float) -> np.ndarray:
    """Back-propagation through the objective above, term by term."""
    W1, b1, W2, b2 = _mlp_parts(theta, X.shape[1], h, c)
    hidden = np.tanh(X @ W1 + b1)
    logits = hidden @ W2 + b2
    p = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    d_logits = (p - np.eye(c)[y]) / len(y)
    d_pre = (d_logits @ W2.T) * (1 - hidden ** 2)
    return np.concatenate([(X.T @ d_pre + l2 * W1).ravel(), d_pre.sum(0),
                           (hidden.T @ d_logits + l2 * W2).ravel(), d_logits.sum(0)])


@pytest.fixture(scope="module")
def three_blobs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(8)
    y = rng.integers(0, 3, 240)
    X = rng.uniform(-3, 3, (3, 4))[y] + rng.standard_normal((240, 4))
    return X, y


def _theta(state: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(state[k]) for k in ("W1", "b1", "W2", "b2")])


def test_mlp_gradient_of_the_objective_written_here_is_its_derivative(three_blobs) -> None:
    X, y = three_blobs
    theta = np.random.default_rng(2).standard_normal(4 * 5 + 5 + 5 * 3 + 3)
    err = so.check_grad(_mlp_objective, _mlp_gradient, theta, X, y, 5, 3, 1e-2)
    assert err <= 1e-5 * np.linalg.norm(_mlp_gradient(theta, X, y, 5, 3, 1e-2))


def test_mlp_follows_heavy_ball_descent_on_its_objective_from_its_glorot_start(three_blobs) -> None:
    X, y = three_blobs
    h, lr, mu, l2 = 5, 0.5, 0.9, 1e-2
    solver = _solver("mlp", X, y, hidden=h, learning_rate=lr, momentum=mu, l2=l2)
    start = solver.get_state()
    for name, fan in (("W1", 4 + h), ("W2", h + 3)):  # Glorot-uniform weights, zero biases
        assert np.abs(start[name]).max() <= np.sqrt(6.0 / fan)
    assert not start["b1"].any() and not start["b2"].any()
    theta, velocity = _theta(start), np.zeros_like(_theta(start))
    for k in range(60):
        want = _mlp_objective(theta, X, y, h, 3, l2)
        assert solver.step() == pytest.approx(want, rel=1e-10), k
        velocity = mu * velocity - lr * _mlp_gradient(theta, X, y, h, 3, l2)
        theta = theta + velocity
    np.testing.assert_allclose(_theta(solver.get_state()), theta, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_mlp_converges_to_a_minimum_of_its_objective(three_blobs) -> None:
    X, y = three_blobs
    h, l2 = 5, 1e-2
    solver = _solver("mlp", X, y, hidden=h, learning_rate=0.5, momentum=0.9, l2=l2)
    losses = [solver.step() for _ in range(3000)]
    theta = _theta(solver.get_state())
    reached = _mlp_objective(theta, X, y, h, 3, l2)
    assert losses[-1] == pytest.approx(reached, rel=1e-6)
    # no descent method finds lower ground near where it stopped: a local minimum
    best = so.minimize(_mlp_objective, theta, args=(X, y, h, 3, l2), jac=_mlp_gradient, method="L-BFGS-B",
                       options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000}).fun
    assert best >= reached - 1e-6 * abs(reached), (best, reached)
    assert np.linalg.norm(_mlp_gradient(theta, X, y, h, 3, l2)) <= 1e-3


# --- LDA: variational EM on the evidence lower bound (Blei, Ng and Jordan, 2003) -----------------

def _documents(seed: int, docs: int = 40, vocabulary: int = 30, topics: int = 3) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    topic_words = rng.dirichlet(np.full(vocabulary, 0.3), size=topics)
    rows = [rng.multinomial(int(rng.integers(20, 60)), rng.dirichlet(np.full(topics, 0.5)) @ topic_words)
            for _ in range(docs)]
    return sp.csr_matrix(np.array(rows, dtype=np.float64))


def _e_step_document(counts: np.ndarray, beta: np.ndarray, alpha: float, iterations: int,
                     tol: float) -> tuple[np.ndarray, np.ndarray]:
    """One document's variational Dirichlet gamma and word-topic responsibilities phi (words x
    topics), by coordinate ascent from gamma = alpha + length / topics."""
    k = beta.shape[0]
    words = np.flatnonzero(counts)
    n = counts[words]
    gamma = np.full(k, alpha + n.sum() / k)
    for _ in range(iterations):
        phi = beta[:, words].T * np.exp(digamma(gamma) - digamma(gamma.sum()))
        phi /= phi.sum(axis=1, keepdims=True)
        new = alpha + n @ phi
        change = np.mean(np.abs(new - gamma))
        gamma = new
        if change < tol:
            break
    phi = beta[:, words].T * np.exp(digamma(gamma) - digamma(gamma.sum()))
    return gamma, phi / phi.sum(axis=1, keepdims=True)


def _elbo_document(counts: np.ndarray, beta: np.ndarray, alpha: float, gamma: np.ndarray,
                   phi: np.ndarray) -> float:
    """E_q[log p(theta, z, w)] - E_q[log q(theta, z)] for one document, term by term."""
    k = beta.shape[0]
    words = np.flatnonzero(counts)
    n = counts[words]
    e_log_theta = digamma(gamma) - digamma(gamma.sum())
    p_theta = gammaln(k * alpha) - k * gammaln(alpha) + (alpha - 1) * e_log_theta.sum()
    p_z = n @ (phi @ e_log_theta)
    p_w = n @ np.sum(xlogy(phi, beta[:, words].T), axis=1)  # 0 log 0 = 0: a word a topic lost
    q_theta = gammaln(gamma.sum()) - gammaln(gamma).sum() + ((gamma - 1) * e_log_theta).sum()
    q_z = n @ np.sum(xlogy(phi, phi), axis=1)
    return float(p_theta + p_z + p_w - q_theta - q_z)


def _lda_em_step(C: np.ndarray, beta: np.ndarray, alpha: float, iterations: int,
                 tol: float) -> tuple[float, np.ndarray]:
    """Minus the bound per word at ``beta``, and the M-step's topic-word matrix."""
    bound, expected = 0.0, np.zeros_like(beta)
    for counts in C:
        gamma, phi = _e_step_document(counts, beta, alpha, iterations, tol)
        bound += _elbo_document(counts, beta, alpha, gamma, phi)
        expected[:, np.flatnonzero(counts)] += (counts[np.flatnonzero(counts)][:, None] * phi).T
    totals = expected.sum(axis=1, keepdims=True)
    return -bound / C.sum(), np.where(totals > 0, expected / np.where(totals > 0, totals, 1), beta)


@pytest.mark.slow
@pytest.mark.parametrize(("alpha", "tol"), [(0.1, 1e-6), (0.5, 0.0)])
def test_lda_is_variational_em_on_the_evidence_lower_bound(alpha: float, tol: float) -> None:
    C = _documents(5)
    solver = _solver("lda", C, None, topics=3, alpha=alpha, e_step_iterations=100, e_step_tol=tol)
    beta = solver.get_state()["beta"]
    dense = C.toarray()
    for k in range(15):
        want, beta = _lda_em_step(dense, beta, alpha, 100, tol)
        assert solver.step() == pytest.approx(want, rel=1e-9), k
        np.testing.assert_allclose(solver.get_state()["beta"], beta, rtol=1e-7, atol=1e-12)


@pytest.mark.slow
def test_lda_converges_to_a_fixed_point_of_em() -> None:
    C = _documents(6)
    solver = _solver("lda", C, None, topics=3, alpha=0.1)
    losses = [solver.step() for _ in range(150)]
    beta = solver.get_state()["beta"]
    dense = C.toarray()
    at, after = _lda_em_step(dense, beta, 0.1, 100, 1e-6)
    assert at == pytest.approx(solver.step(), rel=1e-9)
    assert losses[-1] < losses[0]
    assert abs(_lda_em_step(dense, after, 0.1, 100, 1e-6)[0] - at) <= 1e-7 * abs(at)
