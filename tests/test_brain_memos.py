"""What the policy keeps across decisions gives bit for bit what a decision from scratch gives:
the throughput fits (:mod:`slaq_mpi.brain.speedmemo`), the gain rows
(:mod:`slaq_mpi.brain.gainrows`) and the greedy on them (:func:`allocate_by_rows`)."""

from __future__ import annotations

import numpy as np
import pytest

from slaq_mpi.brain.allocate import allocate_by_gain, allocate_by_rows, positive_marginals
from slaq_mpi.brain.speedmemo import ThroughputMemo
from slaq_mpi.brain.throughput import fit_throughput_flat, flat_observations

pytestmark = pytest.mark.fast


def _observations(rng: np.random.Generator, jobs: int) -> list[tuple[tuple[int, float], ...]]:
    out = []
    for _ in range(jobs):
        work, serial = rng.uniform(0.5, 50.0), rng.uniform(0.0, 0.3)
        kinds = rng.integers(0, 5)  # 0: never observed; 1-2: few core counts; 3+: many
        cores = rng.choice([1, 2, 4, 8, 16, 32, 64], size=int(rng.integers(1, 80)))
        cores = cores[cores <= 2 ** max(int(kinds) - 1, 0) * 4] if kinds < 3 else cores
        secs = work * ((1 - serial) / cores + serial) * rng.lognormal(0.0, 0.05, cores.size)
        out.append(() if kinds == 0 else tuple(zip(cores.tolist(), secs.tolist(), strict=True)))
    return out


def _scratch(obs: list[tuple[tuple[int, float], ...]], prior: float) -> tuple[np.ndarray, ...]:
    m = fit_throughput_flat(*flat_observations(obs), len(obs), prior, learn_serial=True)
    return m.alpha, m.beta, m.gamma, m.observed, m.distinct


def test_throughput_memo_equals_the_fit_from_scratch_over_decisions() -> None:
    rng = np.random.default_rng(11)
    memo = ThroughputMemo()
    ids = [f"j{i:02d}" for i in range(14)]
    obs = _observations(rng, len(ids))
    for step in range(25):
        # a few jobs report (more observations), one leaves and one arrives now and then
        for i in rng.choice(len(ids), size=3, replace=False).tolist():
            more = _observations(rng, 1)[0]
            obs[i] = (obs[i] + more)[-70:]
        if step % 6 == 5:
            ids = ids[1:] + [f"n{step:02d}"]
            obs = obs[1:] + _observations(rng, 1)
        prior = 1.0 if step < 20 else 2.5
        got = memo.fit(ids, obs, prior)
        for a, b in zip((got.alpha, got.beta, got.gamma, got.observed, got.distinct),
                        _scratch(obs, prior), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_on_rows_equals_the_lazy_greedy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    jobs = int(rng.integers(1, 9))
    width = int(rng.integers(1, 40))
    # gains with flat stretches and ties (rounded), some not concave, some decreasing
    table = np.round(np.cumsum(rng.exponential(1.0, (jobs, width)) * (rng.random((jobs, width)) < 0.7),
                               axis=1) * rng.choice([1.0, -0.2], size=(jobs, 1)), 1)
    caps = rng.integers(1, width + 1, size=jobs)
    spread = rng.integers(1, width + 1, size=jobs)
    for capacity in (jobs, jobs + 3, jobs * width // 2 + 1, jobs * width + 5):
        def gain(rows: np.ndarray, cores: np.ndarray) -> np.ndarray:
            return table[rows[:, None], np.clip(cores.astype(np.int64), 1, width) - 1]

        lazy = allocate_by_gain(gain, caps, capacity, spread, 1e-9)
        rows = allocate_by_rows([positive_marginals(table[j], 1e-9) for j in range(jobs)], caps,
                                capacity, spread, 1e-9)
        np.testing.assert_array_equal(rows, lazy)
