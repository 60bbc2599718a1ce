"""Split-level metric functions against hand-worked examples and scikit-learn."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, f1_score, r2_score, roc_auc_score

from geofl.tasks.kernels import auc_float32
from geofl.tasks.scoring import (
    SEARCH_MAX,
    _auc_search,
    average_precision,
    f1_from_counts,
    r2_from_sums,
    roc_auc,
    roc_auc_1d,
    shifted_sum_of_squares,
    tie_group_bounds,
)


def _t(x: object) -> torch.Tensor:
    return torch.as_tensor(_a(x))


def _a(x: object) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# ----------------------------------------------------------------------------- hand examples


def test_tie_group_bounds_by_hand() -> None:
    first, last = tie_group_bounds(_t([1, 2, 2, 2, 5, 7, 7]))
    assert first.tolist() == [0, 1, 1, 1, 4, 5, 5]
    assert last.tolist() == [0, 3, 3, 3, 4, 6, 6]


def test_average_precision_by_hand() -> None:
    # ranks: + - + -  →  AP = (1/2)(1/1 + 2/3) = 5/6
    assert float(average_precision(_t([0.9, 0.8, 0.7, 0.6]), _t([1, 0, 1, 0]))) == pytest.approx(
        5 / 6
    )
    # a tie group {0.8: one +, one -} enters at once: precision at its end 2/3 for its +
    assert float(average_precision(_t([0.9, 0.8, 0.8, 0.1]), _t([1, 1, 0, 0]))) == pytest.approx(
        5 / 6
    )
    # all scores equal: one threshold, AP = prevalence
    assert float(average_precision(_t([0.3] * 5), _t([1, 0, 0, 1, 0]))) == pytest.approx(0.4)


def test_roc_auc_by_hand() -> None:
    # scikit-learn's docstring example: 3 of 4 positive–negative pairs ordered correctly
    assert float(roc_auc(_t([0.1, 0.4, 0.35, 0.8]), _t([0, 0, 1, 1]))) == pytest.approx(0.75)
    # one tied positive–negative pair counts ½: pairs (+0.5 vs -0.5) ½, (+0.5 vs -0.1) 1
    assert float(roc_auc(_t([0.5, 0.5, 0.1]), _t([1, 0, 0]))) == pytest.approx(0.75)
    assert float(roc_auc(_t([0.2] * 4), _t([1, 0, 1, 0]))) == pytest.approx(0.5)


def test_perfect_inverted_and_undefined() -> None:
    s, y = _t([4, 3, 2, 1]), _t([1, 1, 0, 0])
    assert float(average_precision(s, y)) == 1.0
    assert float(roc_auc(s, y)) == 1.0
    assert float(roc_auc(-s, y)) == 0.0
    # inverted: positives at ranks 3 and 4 → AP = (1/2)(1/3 + 2/4)
    assert float(average_precision(-s, y)) == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert math.isnan(float(average_precision(s, _t([0, 0, 0, 0]))))  # no positives
    assert float(average_precision(s, _t([1, 1, 1, 1]))) == 1.0  # no negatives
    assert average_precision_score([1, 1, 1, 1], s.numpy()) == 1.0
    assert math.isnan(float(roc_auc(s, _t([1, 1, 1, 1]))))  # one class
    assert math.isnan(float(roc_auc(s, _t([0, 0, 0, 0]))))
    assert math.isnan(float(average_precision(_t([1, float("nan"), 0]), _t([1, 0, 1]))))
    assert math.isnan(float(roc_auc(_t([1, float("inf"), 0]), _t([1, 0, 0]))))
    assert math.isnan(float(average_precision(_t([1, -float("inf"), 0]), _t([1, 0, 1]))))
    assert average_precision(torch.zeros(0, 3), torch.zeros(0, 3)).isnan().all()


def test_f1_from_counts_by_hand() -> None:
    f1 = f1_from_counts(torch.tensor([2, 0, 0]), torch.tensor([1, 3, 0]), torch.tensor([1, 0, 0]))
    assert f1[0] == pytest.approx(4 / 6)  # 2·2 / (2·2 + 1 + 1)
    assert f1[1] == 0.0  # false alarms only
    assert math.isnan(float(f1[2]))  # no positives, no predictions: undefined


def test_r2_by_hand_and_constant_targets() -> None:
    # targets 1, 2, 3 (SS_tot = 2), predictions 1, 2, 4 (SS_res = 1) → R² = 0.5
    assert float(r2_from_sums(_a([1.0]), _a([2.0]), 3)[0]) == pytest.approx(0.5)
    # constant targets: 1 if predicted exactly, else 0 (scikit-learn's force_finite)
    assert r2_from_sums(_a([0.0, 0.3]), _a([0.0, 0.0]), 2).tolist() == [1.0, 0.0]
    ref = r2_score(
        [[5.0, 5.0], [5.0, 5.0]],
        [[5.0, 5.0], [5.0, 5.0 + math.sqrt(0.15)]],
        multioutput="raw_values",
    )
    assert ref.tolist() == [1.0, 0.0]
    assert math.isnan(float(r2_from_sums(_a([0.0]), _a([0.0]), 1)[0]))


def test_shifted_sum_of_squares() -> None:
    # d = 1, 2, 3: Σd = 6, Σd² = 14 → 14 − 36/3 = 2
    ss = shifted_sum_of_squares(_a([6.0]), _a([14.0]), 3, np.array([False]))
    assert ss.tolist() == [2.0]
    # rounding residue of constant data is forced to exactly 0
    d = np.full(7, 0.1)
    sums = (d.sum().reshape(1), (d * d).sum().reshape(1))
    assert sums[1] - sums[0] ** 2 / 7 != 0
    assert shifted_sum_of_squares(*sums, 7, np.array([True])).tolist() == [0.0]
    # shifted by a training mean, a large offset keeps its digits (unshifted: garbage)
    rng = np.random.default_rng(0)
    y = 1e8 + rng.normal(size=1000)
    dd = y - (1e8 + 0.3)
    ours = shifted_sum_of_squares(dd.sum()[None], (dd * dd).sum()[None], 1000, np.array([False]))
    exact = (((y - 1e8) - (y - 1e8).mean()) ** 2).sum()  # y − 1e8 is exact (Sterbenz)
    assert float(ours[0]) == pytest.approx(exact, rel=1e-9)
    naive = (y**2).sum() - y.sum() ** 2 / len(y)
    assert abs(naive - exact) > 10


# -------------------------------------------------------------------- against scikit-learn


def _random_case(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores quantised to 0–2 decimals (many ties) and targets of random prevalence."""
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(1, 80)), int(rng.integers(1, 7))
    scores = np.round(rng.normal(size=(n, c)), int(rng.integers(0, 3)))
    prevalence = rng.random(c) * rng.choice([0.0, 1.0, 1.0, 1.0], size=c)  # some empty classes
    targets = (rng.random((n, c)) < prevalence).astype(np.int64)
    return scores, targets


@pytest.mark.parametrize("seed", range(60))
def test_average_precision_and_auc_match_sklearn(seed: int) -> None:
    scores, targets = _random_case(seed)
    ap = average_precision(torch.from_numpy(scores), torch.from_numpy(targets)).numpy()
    auc = roc_auc(torch.from_numpy(scores), torch.from_numpy(targets)).numpy()
    for c in range(scores.shape[1]):
        pos = int(targets[:, c].sum())
        if pos == 0:
            assert np.isnan(ap[c])
        else:
            assert ap[c] == pytest.approx(average_precision_score(targets[:, c], scores[:, c]))
        if 0 < pos < len(targets):
            assert auc[c] == pytest.approx(roc_auc_score(targets[:, c], scores[:, c]))
            one = roc_auc(torch.from_numpy(scores[:, c]), torch.from_numpy(targets[:, c]))
            assert float(one) == pytest.approx(auc[c])
        else:
            assert np.isnan(auc[c])


@pytest.mark.parametrize("seed", range(30))
def test_f1_and_r2_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    n, c = int(rng.integers(1, 50)), int(rng.integers(1, 6))
    truth = rng.random((n, c)) < rng.random(c) * 0.6
    pred = rng.random((n, c)) < rng.random(c) * 0.6
    tp, fp, fn = (truth & pred).sum(0), (~truth & pred).sum(0), (truth & ~pred).sum(0)
    ours = f1_from_counts(*(torch.from_numpy(x) for x in (tp, fp, fn))).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if c == 1:  # scikit-learn reads an [N, 1] array as binary, not multi-label
            ref = [f1_score(truth[:, 0], pred[:, 0], zero_division=np.nan)]
        else:
            ref = f1_score(truth, pred, average=None, zero_division=np.nan)
    np.testing.assert_allclose(ours, ref, equal_nan=True)

    y = rng.normal(size=(n, c)) * rng.choice([1e-3, 1.0, 1e3]) + rng.choice([0.0, 1e5])
    y_hat = y + rng.normal(size=(n, c))
    ss_tot = ((y - y.mean(0)) ** 2).sum(0)
    r2 = r2_from_sums(((y - y_hat) ** 2).sum(0), ss_tot, n)
    if n >= 2:
        ref_r2 = r2_score(y, y_hat, multioutput="raw_values")
        np.testing.assert_allclose(r2, ref_r2, rtol=1e-7, atol=1e-9)
    else:
        assert np.isnan(r2).all()


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=2, max_size=40).filter(
        lambda rows: 0 < sum(b for _, b in rows) < len(rows)
    )
)
def test_ranking_metrics_on_few_distinct_scores(rows: list[tuple[int, bool]]) -> None:
    """Five possible scores only: almost every sample is in a tie group."""
    scores = np.array([s for s, _ in rows], dtype=np.float64)
    targets = np.array([b for _, b in rows], dtype=np.int64)
    ap = float(average_precision(torch.from_numpy(scores), torch.from_numpy(targets)))
    auc = float(roc_auc(torch.from_numpy(scores), torch.from_numpy(targets)))
    assert ap == pytest.approx(average_precision_score(targets, scores))
    assert auc == pytest.approx(roc_auc_score(targets, scores))


@pytest.mark.parametrize("seed", range(30))
def test_1d_auc_path_equals_the_general_one_to_the_bit(seed: int) -> None:
    """``[N]`` scores take one compiled radix sort (float32) or one sort and a binary search
    per positive (float64, ``roc_auc_1d``); the general path (a ``[N, 1]`` column) gives
    the same float64, with and without ties, in float32 and float64, and both match
    scikit-learn."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000)) if seed % 5 else int(rng.integers(8193, 20000))
    scale = 10.0 ** float(rng.integers(-30, 30))  # sign-magnitude order over all exponents
    scores = (rng.normal(size=n) * scale).astype(np.float32)
    scores[: n // 7] = -np.abs(scores[: n // 7])
    if seed % 3 == 0:  # tie groups of every size, signed zeros among them
        scores = np.round(scores / scale * 4).astype(np.float32)
        scores[::11] = -0.0
    targets = rng.random(n) < rng.choice([0.02, 0.3, 0.9])
    if seed % 2:
        scores = scores.astype(np.float64)
    s, y = torch.from_numpy(scores), torch.from_numpy(targets)
    fast, general = roc_auc(s, y), roc_auc(s[:, None], y[:, None])[0]
    one_d = roc_auc_1d(scores, targets)  # radix sort (float32); float64: search ≤ SEARCH_MAX
    assert one_d is None if (n > SEARCH_MAX and seed % 2) else one_d is not None
    for other in (_auc_search(scores, targets),) + (
        (auc_float32(scores, targets), one_d) if not seed % 2 else ()
    ):
        assert other == fast.item() or (math.isnan(other) and math.isnan(fast.item()))
    if 0 < targets.sum() < n:
        assert fast.dtype == torch.float64 and fast.item() == general.item()
        assert fast.item() == pytest.approx(roc_auc_score(targets, scores), rel=1e-12)
    else:
        assert math.isnan(fast.item()) and math.isnan(general.item())


def test_auc_signed_zeros_ties_and_non_finite_leave_the_fast_path() -> None:
    f32 = torch.float32
    # −0.0 and +0.0 are one tie group (a positive and a negative: ½)
    s = torch.tensor([-0.0, 0.0, 1.0, -1.0], dtype=f32)
    y = torch.tensor([1, 0, 1, 0])
    assert roc_auc(s, y).item() == roc_auc_score(y.numpy(), s.numpy()) == 0.875
    tied = torch.tensor([0.5, 0.5, 0.1, 0.9], dtype=f32)
    assert roc_auc(tied, torch.tensor([1, 0, 0, 1])).item() == pytest.approx(0.875)
    assert math.isnan(roc_auc(torch.tensor([1.0, math.nan, 0.0], dtype=f32), y[:3]).item())
    assert math.isnan(roc_auc(torch.tensor([1.0, 2.0], dtype=f32), torch.tensor([1, 1])).item())
    # an infinite score: NaN, as the general path gives
    for bad in (math.inf, -math.inf):
        for dtype in (np.float32, np.float64):
            scores = np.array([1.0, bad, 0.0], dtype=dtype)
            assert math.isnan(roc_auc_1d(scores, np.array([True, False, False])) or 0.0)
            if dtype == np.float32:
                assert math.isnan(auc_float32(scores, np.array([True, False, False])))
            general = roc_auc(torch.from_numpy(scores)[:, None], torch.tensor([[1], [0], [0]]))
            assert math.isnan(general.item())
    assert math.isnan(roc_auc_1d(np.zeros(3), np.zeros(3, dtype=bool)) or 0.0)  # one class
    assert roc_auc_1d(np.zeros(SEARCH_MAX + 1), np.ones(SEARCH_MAX + 1, dtype=bool)) is None


@pytest.mark.parametrize("kind", ["offset", "extremes", "one_digit", "all_tied"])
def test_radix_auc_on_adversarial_float32_scores(kind: str) -> None:
    """The radix sort's keys order every float32 (denormals, ±max, signed zeros, a large
    common offset) and skip passes whose digit never changes: the same float64 as the
    sort-and-search path."""
    rng = np.random.default_rng(len(kind))
    n = 5000
    if kind == "offset":  # 1e4 + tiny noise: only the low digits differ
        scores = np.float32(1e4) + (rng.normal(size=n) * 1e-3).astype(np.float32)
    elif kind == "extremes":
        pool = np.array([-0.0, 0.0, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, 1.0], np.float32)
        scores = rng.choice(pool, n)
    elif kind == "one_digit":  # keys differ only in the lowest radix digit
        scores = (np.float32(1.0) + np.arange(n, dtype=np.float32) % 7 * 2**-23).astype(np.float32)
    else:
        scores = np.full(n, 0.25, np.float32)
    targets = rng.random(n) < 0.4
    got = roc_auc_1d(scores, targets)
    assert got == _auc_search(scores, targets)
    assert got == roc_auc(torch.from_numpy(scores)[:, None], torch.from_numpy(targets)[:, None])[0]
    if kind != "extremes":  # scikit-learn's threshold arithmetic overflows at ±3.4e38
        assert got == pytest.approx(roc_auc_score(targets, scores), rel=1e-12)
    if kind == "all_tied":
        assert got == 0.5
