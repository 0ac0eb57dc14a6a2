"""Plain serial numpy versions of every built-in solver's iteration, for benchmarks/solvers.py.

Each ``plain_<algorithm>(X, y, seed)`` returns a zero-argument function doing one iteration of
the same algorithm (same start, same arithmetic) with no solver protocol and no communication.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp, psi

Step = Callable[[], float]


def plain_logreg(X: np.ndarray, y: np.ndarray, seed: int, lr: float = 1.0, l2: float = 1e-4) -> Step:
    s, w, n = 2 * y - 1, np.zeros(X.shape[1] + 1), len(y)

    def step() -> float:
        m = s * (X @ w[:-1] + w[-1])
        c = -s * np.exp(-np.logaddexp(0, m))
        loss = np.logaddexp(0, -m).sum() / n + 0.5 * l2 * w[:-1] @ w[:-1]
        w[:-1] -= lr * (X.T @ c / n + l2 * w[:-1])
        w[-1] -= lr * c.sum() / n
        return float(loss)

    return step


def plain_logreg_lbfgs(X: np.ndarray, y: np.ndarray, seed: int, l2: float = 1e-4, m: int = 10) -> Step:
    s, n = 2 * y - 1, len(y)

    def fg(v: np.ndarray) -> tuple[float, np.ndarray]:
        mg = s * (X @ v[:-1] + v[-1])
        c = -s * np.exp(-np.logaddexp(0, mg))
        g = np.append(X.T @ c / n + l2 * v[:-1], c.sum() / n)
        return float(np.logaddexp(0, -mg).sum() / n + 0.5 * l2 * v[:-1] @ v[:-1]), g

    st: dict[str, Any] = {"x": np.zeros(X.shape[1] + 1), "S": [], "Y": []}
    st["f"], st["g"] = fg(st["x"])

    def step() -> float:
        f, g, S, Y = st["f"], st["g"], st["S"], st["Y"]
        q, al = g.copy(), []
        for si, yi in zip(reversed(S), reversed(Y), strict=True):
            al.append(si @ q / (si @ yi))
            q -= al[-1] * yi
        if S:
            q *= S[-1] @ Y[-1] / (Y[-1] @ Y[-1])
        for (si, yi), a in zip(zip(S, Y, strict=True), reversed(al), strict=True):
            q += (a - yi @ q / (si @ yi)) * si
        d = -q
        t = 1.0 if S else min(1.0, 1 / np.linalg.norm(g))
        for _ in range(60):
            x1 = st["x"] + t * d
            f1, g1 = fg(x1)
            if f1 <= f + 1e-4 * t * (g @ d):
                break
            t /= 2
        else:
            return f
        S.append(x1 - st["x"])
        Y.append(g1 - g)
        if S[-1] @ Y[-1] <= 1e-12 * (Y[-1] @ Y[-1]):
            S.pop()
            Y.pop()
        if len(S) > m:
            S.pop(0)
            Y.pop(0)
        st.update(x=x1, f=f1, g=g1)
        return f

    return step


def plain_svm(X: np.ndarray, y: np.ndarray, seed: int, lr: float = 0.5, l2: float = 1e-4) -> Step:
    s, w, n = 2 * y - 1, np.zeros(X.shape[1] + 1), len(y)

    def step() -> float:
        a = np.maximum(1 - s * (X @ w[:-1] + w[-1]), 0)
        c = -2 * s * a
        loss = a @ a / n + 0.5 * l2 * w[:-1] @ w[:-1]
        w[:-1] -= lr * (X.T @ c / n + l2 * w[:-1])
        w[-1] -= lr * c.sum() / n
        return float(loss)

    return step


def plain_linreg(X: np.ndarray, y: np.ndarray, seed: int) -> Step:
    n = len(y)
    w = np.zeros(X.shape[1] + 1)
    e = -y.copy()
    r = -np.append(X.T @ e, e.sum()) / n
    st = {"p": r.copy(), "r": r, "rr": r @ r, "e": e}

    def step() -> float:
        p, e = st["p"], st["e"]
        q = X @ p[:-1] + p[-1]
        Ap = np.append(X.T @ q, q.sum()) / n
        loss = 0.5 * e @ e / n
        alpha = st["rr"] / (p @ Ap)
        w[:] += alpha * p
        st["e"] = e + alpha * q
        st["r"] = st["r"] - alpha * Ap
        rr = st["r"] @ st["r"]
        st["p"] = st["r"] + rr / st["rr"] * p
        st["rr"] = rr
        return float(loss)

    return step


def plain_mlp(X: np.ndarray, y: np.ndarray, seed: int, h: int = 32, lr: float = 0.5, mu: float = 0.9,
              l2: float = 1e-4) -> Step:
    lab, n, d = y.astype(int), len(y), X.shape[1]
    k = int(lab.max()) + 1
    rng = np.random.default_rng(seed)
    a1, a2 = np.sqrt(6 / (d + h)), np.sqrt(6 / (h + k))
    P = [rng.uniform(-a1, a1, (d, h)), np.zeros(h), rng.uniform(-a2, a2, (h, k)), np.zeros(k)]
    V = [np.zeros_like(p) for p in P]
    rows = np.arange(n)

    def step() -> float:
        W1, b1, W2, b2 = P
        H = np.tanh(X @ W1 + b1)
        z = H @ W2 + b2
        z -= z.max(1, keepdims=True)
        lse = np.log(np.exp(z).sum(1))
        loss = (lse - z[rows, lab]).sum() / n + 0.5 * l2 * ((W1 * W1).sum() + (W2 * W2).sum())
        D = np.exp(z - lse[:, None])
        D[rows, lab] -= 1
        dH = D @ W2.T * (1 - H * H)
        G = [X.T @ dH / n + l2 * W1, dH.sum(0) / n, H.T @ D / n + l2 * W2, D.sum(0) / n]
        for i in range(4):
            V[i] = mu * V[i] - lr * G[i]
            P[i] = P[i] + V[i]
        return float(loss)

    return step


def _init_rows(X: np.ndarray, k: int, seed: int) -> np.ndarray:
    return X[np.sort(np.random.default_rng(seed).choice(len(X), size=k, replace=False))].copy()


def plain_kmeans(X: np.ndarray, y: Any, seed: int, k: int = 8) -> Step:
    C = _init_rows(X, k, seed)
    x2 = np.einsum("ij,ij->i", X, X)

    def step() -> float:
        nonlocal C
        d2 = x2[:, None] - 2 * X @ C.T + (C * C).sum(1)
        idx = d2.argmin(1)
        loss = np.maximum(d2[np.arange(len(X)), idx], 0).mean()
        cnt = np.bincount(idx, minlength=k)
        M = sp.csr_matrix((np.ones(len(X)), (idx, np.arange(len(X)))), shape=(k, len(X)))
        sums = M @ X
        C = np.where(cnt[:, None] > 0, sums / np.maximum(cnt, 1)[:, None], C)
        return float(loss)

    return step


def plain_gmm(X: np.ndarray, y: Any, seed: int, k: int = 8, reg: float = 1e-6) -> Step:
    n, d = X.shape
    X2 = X * X
    mu = _init_rows(X, k, seed)
    var = np.tile(X.var(0) + reg, (k, 1))
    wt = np.full(k, 1.0 / k)

    def step() -> float:
        nonlocal mu, var, wt
        pr = 1 / var
        lj = -0.5 * (X2 @ pr.T - 2 * X @ (mu * pr).T + (mu * mu * pr).sum(1) + np.log(var).sum(1)
                     + d * np.log(2 * np.pi)) + np.log(wt)
        lse = logsumexp(lj, axis=1)
        R = np.exp(lj - lse[:, None])
        nk = R.sum(0)
        mu = (R.T @ X) / nk[:, None]
        var = np.maximum((R.T @ X2) / nk[:, None] - mu * mu, 0) + reg
        wt = nk / nk.sum()
        return float(-lse.mean())

    return step


def plain_lda(C: sp.csr_matrix, y: Any, seed: int, k: int = 10, alpha: float = 0.1,
              iters: int = 100, tol: float = 1e-6) -> Step:
    beta = np.random.default_rng(seed).gamma(100.0, 0.01, size=(k, C.shape[1]))
    beta /= beta.sum(1, keepdims=True)
    doc = np.repeat(np.arange(C.shape[0]), np.diff(C.indptr))
    length = np.asarray(C.sum(1)).ravel()
    words = C.data.sum()

    def step() -> float:
        nonlocal beta
        bw = beta.T[C.indices]
        g = alpha + np.repeat(length[:, None] / k, k, axis=1)
        act = np.ones(C.shape[0], bool)
        for _ in range(iters):
            et = np.exp(psi(g) - psi(g.sum(1, keepdims=True)))
            nrm = np.einsum("ik,ik->i", et[doc], bw)
            R = sp.csr_matrix((C.data / nrm, C.indices, C.indptr), shape=C.shape)
            new = alpha + et * (R @ beta.T)
            ch = np.abs(new - g).mean(1)
            g = np.where(act[:, None], new, g)
            act &= ch >= tol
            if not act.any():
                break
        el = psi(g) - psi(g.sum(1, keepdims=True))
        et = np.exp(el)
        nrm = np.einsum("ik,ik->i", et[doc], bw)
        from scipy.special import gammaln
        bound = C.data @ np.log(nrm) + (gammaln(k * alpha) - k * gammaln(alpha)
                                        + ((alpha - g) * el).sum(1) - gammaln(g.sum(1))
                                        + gammaln(g).sum(1)).sum()
        R = sp.csr_matrix((C.data / nrm, C.indices, C.indptr), shape=C.shape)
        cnt = (R.T @ et).T * beta
        beta = cnt / cnt.sum(1, keepdims=True)
        return float(-bound / words)

    return step


def plain_gbt(X: np.ndarray, y: np.ndarray, seed: int, depth: int = 4, lr: float = 0.3, bins: int = 32,
              lam: float = 1.0, mcw: float = 1.0) -> Step:
    n, d = X.shape
    lo, hi = X.min(0), X.max(0)
    width = np.where(hi > lo, (hi - lo) / bins, 1.0)
    codes = np.clip(np.floor((X - lo) / width), 0, bins - 1).astype(np.uint8)
    F = np.full(n, y.mean())
    off = np.arange(d) * bins
    rows = np.arange(n)

    def step() -> float:
        nonlocal F
        g = F - y
        loss = 0.5 * g @ g / n
        node = np.zeros(n, dtype=np.int64)
        for level in range(depth):
            m = 2**level
            size = m * d * bins
            idx = (node[:, None] * (d * bins) + off + codes).ravel()
            G = np.bincount(idx, np.repeat(g, d), size).reshape(m, d, bins)
            H = np.bincount(idx, np.ones(n * d), size).reshape(m, d, bins)
            GL, HL = G.cumsum(2)[..., :-1], H.cumsum(2)[..., :-1]
            Gt, Ht = G[:, :1].sum(2)[..., None], H[:, :1].sum(2)[..., None]
            gain = GL**2 / (HL + lam) + (Gt - GL) ** 2 / (Ht - HL + lam) - Gt**2 / (Ht + lam)
            gain = np.where((HL >= mcw) & (Ht - HL >= mcw), gain, -np.inf).reshape(m, -1)
            best = gain.argmax(1)
            f, t = np.divmod(best, bins - 1)
            f = np.where(gain[np.arange(m), best] > 1e-12, f, -1)
            fr = f[node]
            node = 2 * node + ((fr >= 0) & (codes[rows, np.maximum(fr, 0)] > t[node]))
        L = 2**depth
        Gs, Hs = np.bincount(node, g, L), np.bincount(node, minlength=L).astype(float)
        F = F + np.where(Hs > 0, -lr * Gs / (Hs + lam), 0)[node]
        return float(loss)

    return step


if __name__ == "__main__":  # a library for benchmarks/solvers.py: nothing to run on its own
    argparse.ArgumentParser(description=__doc__).parse_args()
