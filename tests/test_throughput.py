"""Seconds-per-iteration model (slaq_mpi.brain.throughput); no MPI."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slaq_mpi.brain.throughput import (
    MIN_POPULATION_JOBS,
    SERIAL_FRACTION,
    fit_throughput,
    fit_throughput_flat,
    population_serial_fraction,
)


def law(a: float, alpha: float = 1.0, beta: float = 0.02, gamma: float = 0.01) -> float:
    return alpha / a + beta + gamma * math.log2(a)


def test_prior_without_observations() -> None:
    m = fit_throughput([[]], prior_seconds=2.0)
    assert m.seconds(np.array([1.0]))[0] == pytest.approx(2.0, rel=1e-6)
    # near-linear scaling with a small serial fraction
    expect = 2.0 * ((1 - SERIAL_FRACTION) / 8 + SERIAL_FRACTION)
    assert m.seconds(np.array([8.0]))[0] == pytest.approx(expect, rel=1e-6)


def test_one_core_count_scales_near_linearly_from_it() -> None:
    m = fit_throughput([[(4, 0.3), (4, 0.3)]])
    t = m.seconds(np.array([[1.0, 4.0, 8.0, 64.0]]))[0]
    assert t[1] == pytest.approx(0.3, rel=1e-6)
    assert 0.5 < t[2] / t[1] < 0.65  # doubling the cores almost halves the time
    assert t[0] > t[1] > t[2] > t[3] > 0


def test_two_core_counts_are_interpolated() -> None:
    m = fit_throughput([[(2, law(2)), (8, law(8))]])
    t = m.seconds(np.array([[2.0, 8.0]]))[0]
    np.testing.assert_allclose(t, [law(2), law(8)], rtol=0.02)


def test_recovers_known_law_from_many_core_counts() -> None:
    obs = [(a, law(a)) for a in (1, 2, 4, 8, 16, 32, 64)]
    m = fit_throughput([obs])
    assert m.alpha[0] == pytest.approx(1.0, rel=0.02)
    assert m.beta[0] == pytest.approx(0.02, rel=0.1)
    assert m.gamma[0] == pytest.approx(0.01, rel=0.1)
    assert m.best_cores()[0] == pytest.approx(math.log(2) / 0.01, rel=0.15)


def test_bad_observations_are_ignored() -> None:
    m = fit_throughput([[(0, 1.0), (2, -1.0), (4, float("nan")), (8, float("inf"))], [(2, 0.0)]], 3.0)
    np.testing.assert_allclose(m.seconds(np.array([1.0, 1.0])), [3.0, 3.0], rtol=1e-6)
    assert m.observed.tolist() == [0, 0]


def test_batch_equals_one_by_one() -> None:
    obs = [[(1, 1.0)], [(2, 0.6), (4, 0.35)], [(a, law(a, 0.5, 0.1, 0.02)) for a in (1, 3, 9, 27)], []]
    batch = fit_throughput(obs, 1.5).seconds(np.full((4, 3), [1.0, 5.0, 50.0]))
    alone = np.vstack([fit_throughput([o], 1.5).seconds(np.array([[1.0, 5.0, 50.0]])) for o in obs])
    np.testing.assert_allclose(batch, alone, rtol=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(-2, 5000), st.floats(allow_nan=True, allow_infinity=True)),
                 max_size=8),
        min_size=1, max_size=5,
    ),
    st.floats(1e-6, 1e6),
)
def test_any_observations_give_positive_finite_times(
    obs: list[list[tuple[int, float]]], prior: float
) -> None:
    m = fit_throughput(obs, prior)
    assert (m.alpha >= 0).all() and (m.beta > 0).all() and (m.gamma >= 0).all()
    t = m.seconds(np.tile([1.0, 2.0, 16.0, 16384.0], (len(obs), 1)))
    assert np.isfinite(t).all() and (t > 0).all()


def _flat(observations: list[list[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    owner = np.repeat(np.arange(len(observations)), [len(o) for o in observations])
    pairs = np.array([p for o in observations for p in o], dtype=np.float64).reshape(-1, 2)
    return owner, pairs[:, 0], pairs[:, 1]


def test_learned_serial_prior_from_jobs_with_data() -> None:
    """Jobs seen on 3+ core counts that scale almost perfectly teach the prior of a job seen on
    one core count: it is then predicted to scale like them (not with the 5% default)."""
    scalers = [[(a, law(a, alpha=k, beta=1e-4 * k, gamma=0.0)) for a in (1, 4, 16)]
               for k in (1.0, 2.0, 3.0, 4.0)]
    lone = [(1, 2.0)]
    owner, cores, secs = _flat([*scalers, lone])
    fixed = fit_throughput_flat(owner, cores, secs, 5)
    learned = fit_throughput_flat(owner, cores, secs, 5, learn_serial=True)
    share = population_serial_fraction(learned)
    assert share == pytest.approx(1e-4, rel=0.2)
    # the data-decided jobs are the same fits either way
    np.testing.assert_allclose(learned.seconds(np.array([2.0] * 4 + [1.0]))[:4],
                               fixed.seconds(np.array([2.0] * 4 + [1.0]))[:4], rtol=1e-9)
    # the lone job keeps its observation and now scales near-perfectly
    assert learned.seconds(np.array([1.0] * 5))[4] == pytest.approx(2.0, rel=1e-3)
    t64 = learned.seconds(np.array([64.0] * 5))[4]
    assert t64 == pytest.approx(2.0 * ((1 - share) / 64 + share), rel=0.02)
    assert t64 < 0.5 * fixed.seconds(np.array([64.0] * 5))[4]


def test_learned_serial_prior_needs_enough_jobs() -> None:
    """Fewer than MIN_POPULATION_JOBS data-decided jobs: the default prior, identical fits."""
    obs = [[(a, law(a)) for a in (1, 4, 16)], [(2, 0.5)], []]
    owner, cores, secs = _flat(obs)
    fixed = fit_throughput_flat(owner, cores, secs, 3)
    learned = fit_throughput_flat(owner, cores, secs, 3, learn_serial=True)
    assert population_serial_fraction(learned) == SERIAL_FRACTION
    np.testing.assert_allclose(learned.alpha, fixed.alpha)
    np.testing.assert_allclose(learned.beta, fixed.beta)
    assert learned.distinct.tolist() == [3, 1, 0]
    assert MIN_POPULATION_JOBS > 1


def test_core_counts_in_a_narrow_range_keep_the_data_speed_up() -> None:
    """Seen only at 518-639 cores, ``1/a`` and ``log2(a)`` are nearly collinear: the
    unconstrained fit made both coefficients negative, pinning both left a constant model
    (0.44 s on any core count, for a job that takes 243 s on one). Pinning the worse term alone,
    in units of the data's own one-core time, recovers the scaling."""
    true = (243.434, 0.01, 0.002)
    cores = np.array([639.0, 639.0, 559.0, 518.0])
    seconds = true[0] / cores + true[1] + true[2] * np.log2(cores)
    model = fit_throughput_flat(np.zeros(4, dtype=np.int64), cores, seconds, 1, learn_serial=True)
    probe = np.array([1.0, 64.0, 600.0])
    want = true[0] / probe + true[1] + true[2] * np.log2(probe)
    np.testing.assert_allclose(model.seconds(probe), want, rtol=0.05)
