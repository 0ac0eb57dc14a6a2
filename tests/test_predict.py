"""Loss normalization and batched curve fitting (slaq_mpi.brain.predict); no MPI."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slaq_mpi.brain.predict import (
    FAMILY_FLAT,
    FAMILY_LINEAR,
    FAMILY_PRIOR,
    FAMILY_SUBLINEAR,
    fit_curves,
    history_windows,
    max_drops,
    normalize_drops,
    prior_reduction,
    tail_windows,
)


def sublinear(k: np.ndarray, a: float = 0.002, b: float = 0.3, c: float = 1.0, d: float = 0.2) -> np.ndarray:
    return 1.0 / (a * k**2 + b * k + c) + d


def linear(k: np.ndarray, mu: float = 0.9, b: float = 2.0, c: float = 0.5) -> np.ndarray:
    return mu ** (k - b) + c


# --- normalization ----------------------------------------------------------------------------


def test_normalize_drops_divides_by_largest_drop_so_far() -> None:
    out = normalize_drops([10.0, 8.0, 7.0, 3.0, 2.0, 2.5])
    # drops 2, 1, 4, 1, -0.5; running max 2, 2, 4, 4, 4
    np.testing.assert_allclose(out, [1.0, 0.5, 1.0, 0.25, -0.125])


def test_normalize_drops_degenerate() -> None:
    assert normalize_drops([]).shape == (0,)
    assert normalize_drops([1.0]).shape == (0,)
    out = normalize_drops([1.0, 1.0, 2.0, float("nan"), 0.5])
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[:2], [0.0, 0.0])  # no positive drop yet: 0


def test_max_drops_is_the_largest_one_step_reduction() -> None:
    rng = np.random.default_rng(1)
    hist = [np.cumsum(-rng.random(n)) + rng.normal(0, 0.3, n) for n in (0, 1, 2, 7, 40)]
    full = max_drops(hist)
    for i, h in enumerate(hist):
        d = np.diff(h)
        assert full[i] == pytest.approx(max(0.0, -d.min()) if d.size else 0.0)


def test_tail_windows_right_aligned_and_masked() -> None:
    values, mask, n = tail_windows([[1.0, 2.0], list(range(10)), [], [1.0, float("inf"), 3.0]], 4)
    np.testing.assert_array_equal(n, [2, 10, 0, 3])
    np.testing.assert_array_equal(mask[0], [False, False, True, True])
    np.testing.assert_array_equal(values[1], [6, 7, 8, 9])
    assert not mask[2].any()
    np.testing.assert_array_equal(mask[3], [False, True, False, True])


def test_prior_is_optimistic_and_concave() -> None:
    m = np.arange(0, 50, dtype=float)
    r = prior_reduction(0, m)
    assert r[1] > 0.8  # the first iteration of a new job: about one max-drop
    assert np.all(np.diff(r) > 0) and np.all(np.diff(r, 2) < 0)
    assert prior_reduction(100, 10) < prior_reduction(0, 10) / 10


# --- recovery of known curves -------------------------------------------------------------------


@pytest.mark.parametrize("params", [(0.002, 0.3, 1.0, 0.2), (0.0, 0.5, 1.0, 1.0), (0.05, 0.01, 0.5, -3.0)])
@pytest.mark.parametrize("n", [8, 30, 120])
def test_sublinear_curve_prediction(params: tuple[float, float, float, float], n: int) -> None:
    k = np.arange(n + 60, dtype=float)
    curve = sublinear(k, *params)
    total = curve[0] - curve[-1]
    # default (fast) refinement: within 2% of the total reduction; converged: essentially exact
    for steps, tol in ((None, 2e-2), (40, 1e-4)):
        kw = {} if steps is None else {"steps": steps}
        fit = fit_curves([curve[:n]], ["sublinear"], **kw)
        assert fit.family[0] == FAMILY_SUBLINEAR
        for ahead in (1, 10, 50):
            err = abs(fit.predict_loss(float(ahead))[0] - curve[n - 1 + ahead]) / total
            assert err < tol, (steps, ahead, err)


@pytest.mark.parametrize("mu", [0.5, 0.8, 0.97])
@pytest.mark.parametrize("n", [6, 40])
def test_linear_curve_recovers_rate(mu: float, n: int) -> None:
    k = np.arange(n + 30, dtype=float)
    curve = linear(k, mu=mu, b=1.0, c=2.0)
    fit = fit_curves([curve[:n]], ["linear"], steps=20)
    assert fit.family[0] == FAMILY_LINEAR
    assert fit.p1[0] == pytest.approx(-math.log(mu), rel=1e-3)
    assert fit.floor[0] == pytest.approx(2.0, abs=1e-6)
    pred = fit.predict_loss(np.array([10.0]))[0]
    assert pred == pytest.approx(curve[n + 9], rel=1e-6)


def test_unknown_class_picks_family_by_residual() -> None:
    k = np.arange(40, dtype=float)
    fit = fit_curves([linear(k, mu=0.7), sublinear(k)], ["unknown", "unknown"])
    assert fit.family.tolist() == [FAMILY_LINEAR, FAMILY_SUBLINEAR]


def test_batch_equals_one_by_one() -> None:
    rng = np.random.default_rng(7)
    hist = []
    for i in range(12):
        k = np.arange(int(rng.integers(3, 80)), dtype=float)
        base = sublinear(k) if i % 2 else linear(k, mu=0.85)
        hist.append(base + rng.normal(0, 1e-3, k.size))
    classes = ["sublinear", "linear", "unknown"] * 4
    batch = fit_curves(hist, classes).reduction(np.full(12, 20.0))
    alone = [fit_curves([h], [c]).reduction(np.array([20.0]))[0] for h, c in zip(hist, classes, strict=True)]
    np.testing.assert_allclose(batch, alone, rtol=1e-9, atol=1e-12)


def test_noisy_curve_prediction_is_reasonable() -> None:
    rng = np.random.default_rng(3)
    k = np.arange(200, dtype=float)
    clean = sublinear(k)
    noisy = clean + rng.normal(0, 2e-4, k.size)
    fit = fit_curves([noisy[:100]], ["sublinear"])
    err = abs(fit.predict_loss(10.0)[0] - clean[109]) / (clean[0] - clean[-1])
    assert err < 5e-3


# --- normalized reductions and degenerate histories -------------------------------------------------


def test_reduction_is_in_max_drop_units_and_concave_in_iterations() -> None:
    k = np.arange(300, dtype=float)
    curve = sublinear(k)
    fit = fit_curves([curve[:50]], ["sublinear"], steps=40)
    m = np.arange(0, 200, dtype=float)[None, :]
    red = fit.reduction(m)[0]
    max_drop = curve[0] - curve[1]
    expected = (curve[49] - curve[49 + m[0].astype(int)]) / max_drop
    np.testing.assert_allclose(red[:100], expected[:100], atol=5e-3 * expected[99])
    assert red[0] == 0 and np.all(np.diff(red) >= 0) and np.all(np.diff(red, 2) <= 1e-12)


def test_new_jobs_get_the_optimistic_prior() -> None:
    k = np.arange(80, dtype=float)
    fit = fit_curves([[], [5.0], [5.0, 4.0], sublinear(k)], ["sublinear"] * 4)
    assert fit.family[:3].tolist() == [FAMILY_PRIOR] * 3
    red = fit.reduction(np.full(4, 10.0))
    assert red[0] > 2.0 and red[1] > 2.0
    assert red[3] < red[0] / 5  # a mature job's normalized drops are small
    assert fit.predict_loss(10.0)[2] < 4.0  # prior in loss units: scaled by the drop seen


def test_young_prior_weight_is_bounded_by_the_jobs_last_reduction() -> None:
    """After n losses the fit is blended with the span prior (weight 1/n), but never with more
    weight than the job's last reduction over the prior's reduction in that iteration: a job
    that converged in its first iteration is not promised a third of its span."""
    from dataclasses import replace

    from slaq_mpi.brain.predict import span_prior_reduction

    hist = [[1.0, 0.5, 1.0 / 3.0],  # exactly the prior's pace (x / (1 + x) of a span of 1)
            [1.0, 0.0124, 0.0003],  # converged: its second drop is 1% of its first
            [1.0, 0.6, 0.65]]  # its last iteration raised the loss
    fit = fit_curves(hist, ["sublinear", "linear", "sublinear"])
    np.testing.assert_allclose(fit.last_drop, [1.0 / 6.0, 0.0121, 0.0], rtol=1e-12)
    fit = replace(fit, span=np.ones(3))
    red = fit.reduction(np.full(3, 10.0))
    fitted = fit.drop(np.full(3, 10.0))
    prior = float(span_prior_reduction(2.0, 10.0))
    assert red[0] == pytest.approx(2.0 / 3.0 * fitted[0] + prior / 3.0, rel=1e-9)
    pace = 0.0121 / (1.0 / 6.0)
    w = pace / 3.0
    assert red[1] == pytest.approx((1 - w) * fitted[1] + w * prior, rel=1e-9)
    assert red[1] < 0.01 < prior / 3.0  # the unbounded blend promised more than 0.08
    assert red[2] == pytest.approx(fitted[2], rel=1e-9)
    # a pace too large for floats is fast (full weight); a NaN loss last is no reduction
    from slaq_mpi.brain.predict import _prior_pace

    assert _prior_pace(np.array([1e300]), np.array([1e-10]), np.array([2.0])).tolist() == [1.0]
    assert fit_curves([[1.0, 0.5, 0.3, float("nan")]]).last_drop.tolist() == [0.0]


@pytest.mark.parametrize(
    "history",
    [
        [3.0, 3.0, 3.0, 3.0, 3.0, 3.0],
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        [1.0, float("nan"), 0.5, float("inf"), 0.3, 0.2, -float("inf"), 0.1],
        [1e300, 1e299, 1e298, 1e297, 1e296],
        [1e-300, 5e-301, 2e-301, 1e-301, 5e-302, 4e-302],
        [-5.0, -6.0, -6.5, -6.7, -6.8, -6.85],
        [1.0, 0.5, 0.9, 0.2, 0.8, 0.1, 0.7],
        [2.0, 1.0, 1.0],
        [2.0, 1.0, 0.0],
    ],
)
def test_degenerate_histories_never_nan(history: list[float]) -> None:
    for cls in ("sublinear", "linear", "unknown"):
        fit = fit_curves([history], [cls])
        for ahead in (0.0, 1.0, 10.0, 1e6):
            assert np.isfinite(fit.reduction(ahead)).all()
            assert (fit.reduction(ahead) >= 0).all()
            assert np.isfinite(fit.predict_loss(ahead)).all() or not np.isfinite(history[-1])


def test_flat_and_increasing_predict_no_reduction() -> None:
    fit = fit_curves([[3.0] * 10, list(range(10))], ["sublinear", "linear"])
    assert fit.family.tolist() == [FAMILY_FLAT, FAMILY_FLAT]
    np.testing.assert_array_equal(fit.reduction(10.0), [0.0, 0.0])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=40),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["sublinear", "linear", "unknown"]),
    st.floats(0.0, 1e7),
)
def test_any_history_gives_finite_nonnegative_reductions(
    histories: list[list[float]], cls: str, ahead: float
) -> None:
    fit = fit_curves(histories, [cls] * len(histories))
    red = fit.reduction(np.full(len(histories), ahead))
    assert np.isfinite(red).all() and (red >= 0).all()
    values, mask, n, md = history_windows(histories)
    assert np.isfinite(md).all() and (md >= 0).all()


@pytest.mark.parametrize(("window", "decay", "seed"), [(16, 6.0, 11), (8, 0.3, 12), (16, 0.3, 13),
                                                    (64, 24.0, 14)])
def test_curve_memo_gives_the_batch_fit_bit_for_bit_refitting_only_changed_histories(
        window: int, decay: float, seed: int) -> None:
    """Fits reused across calls must equal fitting every history at once from scratch: the
    brain stays a function of its snapshot while most jobs keep their fits between epochs.
    (A small decay makes the grid search's residuals tiny and ties close: a row's sums that
    changed in their last bits with the batch, as BLAS products do, picked other fits.)"""
    from slaq_mpi.brain.memo import CurveMemo
    from slaq_mpi.brain.predict import class_codes, fit_windows

    rng = np.random.default_rng(seed)
    k = np.arange(300, dtype=np.float64)
    curves = [sublinear(k, a=rng.uniform(0, 0.01), b=rng.uniform(0.05, 1)) + 1e-3 * rng.standard_normal(300)
              for _ in range(8)]
    curves += [linear(k, mu=rng.uniform(0.7, 0.99)) + 1e-4 * rng.standard_normal(300) for _ in range(8)]
    curves += [np.full(300, 2.0), np.r_[np.nan, k[1:]]]  # flat, and one with a NaN
    ids = [f"j{i}" for i in range(len(curves))]
    length = rng.integers(0, 40, size=len(curves))
    classes = class_codes(rng.choice(["sublinear", "linear", "unknown"], size=len(curves)).tolist())
    memo = CurveMemo(window=window, decay=decay)
    refits: list[int] = []
    asked: list[int] = []
    fitted = fit_windows
    import slaq_mpi.brain.memo as memo_module

    def counting(values, *args, **kw):  # type: ignore[no-untyped-def]
        refits.append(values.shape[0])
        return fitted(values, *args, **kw)

    memo_module.fit_windows = counting
    try:
        for _ in range(25):
            moved = rng.random(len(curves)) < 0.3
            length = length + moved * rng.integers(1, 5, size=len(curves))
            hist = [tuple(c[:n].tolist()) for c, n in zip(curves, length, strict=True)]
            keep = np.flatnonzero(rng.random(len(curves)) < 0.9)  # jobs come and go
            sub_ids, sub_hist = [ids[i] for i in keep], [hist[i] for i in keep]
            got = memo.fit(sub_ids, sub_hist, classes[keep])
            asked.append(len(keep))
            values, mask, n = tail_windows(sub_hist, window)
            want = fitted(values, mask, n, max_drops(sub_hist), classes[keep], decay)
            for name in ("family", "amp", "p1", "p2", "floor", "last", "n", "max_drop", "rms", "last_drop"):
                np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
            assert got.family.dtype == want.family.dtype
    finally:
        memo_module.fit_windows = fitted
    # the first call fits everything; later ones only what changed or came back
    assert refits[0] == asked[0]
    assert sum(refits[1:]) < 0.6 * sum(asked[1:])


def test_a_fit_does_not_depend_on_the_batch_it_is_computed_in() -> None:
    """Each job's fit is the same alone as in a batch of hundreds (the reuse of fits across
    decisions relies on it). Rounded losses and a small decay make the grid search's residuals
    near-ties, where sums that change in their last bits with the batch pick other fits."""
    rng = np.random.default_rng(5)
    window, decay = 16, 0.3
    hist: list[tuple[float, ...]] = []
    for _ in range(250):
        k = np.arange(int(rng.integers(3, 3 * window)), dtype=np.float64)
        kind = int(rng.integers(0, 4))
        if kind == 0:
            h = 1.0 / (rng.uniform(0.01, 1.0) * k + 1.0) + rng.uniform(0.0, 1.0)
        elif kind == 1:
            h = rng.uniform(0.1, 10.0) * np.exp(-rng.uniform(1e-3, 3.0) * k) + rng.uniform(0.0, 1.0)
        elif kind == 2:
            h = np.round(1.0 / (0.3 * k + 1.0) + 0.5, int(rng.integers(2, 5)))
        else:
            h = 1.0 / (0.2 * k + 1.0) + rng.normal(0.0, 1e-3, k.size)
        hist.append(tuple(h.tolist()))
    codes = rng.integers(0, 3, len(hist)).astype(np.int8)
    from slaq_mpi.brain.predict import fit_windows

    values, mask, n = tail_windows(hist, window)
    batch = fit_windows(values, mask, n, max_drops(hist), codes, decay)
    fields = ("family", "amp", "p1", "p2", "floor", "last", "n", "max_drop", "rms")
    for i, h in enumerate(hist):
        values, mask, n = tail_windows([h], window)
        alone = fit_windows(values, mask, n, max_drops([h]), codes[i : i + 1], decay)
        for name in fields:
            assert getattr(alone, name)[0] == getattr(batch, name)[i] or (
                np.isnan(getattr(alone, name)[0]) and np.isnan(getattr(batch, name)[i])), (i, name)
