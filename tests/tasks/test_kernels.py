"""The tasks' compiled split reductions (:mod:`geofl.tasks.kernels`) on hand-checked
numbers, with NaN and infinite values."""

from __future__ import annotations

import math

import numpy as np

from geofl.tasks.binary import bce_total
from geofl.tasks.kernels import binary_terms, regression_terms


def test_binary_terms_by_hand() -> None:
    z = np.array([2.0, -1.0, 0.0, 3.0], np.float32)
    ls = np.log(1.0 / (1.0 + np.exp(-z.astype(np.float64))))
    positive = np.array([True, False, True, False])
    terms = binary_terms(z, ls, positive, 0.0)  # positive when z ≥ 0
    sum_z, pos_z, sum_ls, pos_ls, tp, predicted, n_pos = terms
    assert (sum_z, pos_z) == (4.0, 2.0)
    assert math.isclose(sum_ls, float(ls.sum()), rel_tol=1e-15)
    assert math.isclose(pos_ls, float(ls[0] + ls[2]), rel_tol=1e-15)
    assert (tp, predicted, n_pos) == (2, 3, 2)  # z = 2 and z = 0 hit; z = 3 is a false alarm
    # Σℓ = Σ softplus(z) over negatives + Σ softplus(−z) over positives
    softplus = np.log1p(np.exp(z.astype(np.float64)))
    want = softplus[1] + softplus[3] + (softplus[0] - z[0]) + (softplus[2] - z[2])
    assert math.isclose(bce_total(terms, None), float(want), rel_tol=1e-12)
    # pos_weight p scales the positives' term −log σ(z)
    assert math.isclose(bce_total(terms, 3.0), float(want) - 2.0 * pos_ls, rel_tol=1e-12)


def test_binary_terms_with_nan_and_infinite_logits() -> None:
    z = np.array([np.nan, np.inf, -1.0], np.float32)
    ls = np.array([np.nan, 0.0, -1.3132616875182228])
    terms = binary_terms(z, ls, np.array([False, True, True]), 0.5)
    assert math.isnan(terms[0]) and math.isnan(bce_total(terms, None))
    assert terms[4:] == (1, 1, 2)  # NaN is never predicted positive; +inf is


def test_regression_terms_by_hand_and_nan_ranges() -> None:
    y = np.array([[12.0, 1.0], [8.0, np.nan], [10.0, 3.0]], np.float32)
    z = np.array([[1.0, 0.0], [-1.0, 0.0], [0.5, 0.0]], np.float32)
    mu, inv_sigma = np.array([10.0, 2.0]), np.array([0.5, 1.0])
    sums = np.zeros((4, 2))
    low, high = np.full(2, np.inf), np.full(2, -np.inf)
    regression_terms(z, y, mu, inv_sigma, sums, low, high)
    # output 0: d = 1, −1, 0; e = d − ẑ = 0, 0, −0.5
    np.testing.assert_array_equal(sums[:, 0], [0.0, 2.0, 0.25, 0.5])
    assert (low[0], high[0]) == (-1.0, 1.0)
    # output 1: a NaN target makes its sums and range NaN, and they stay NaN
    assert np.isnan(sums[:, 1]).all() and np.isnan(low[1]) and np.isnan(high[1])
    regression_terms(z[:1], y[:1], mu, inv_sigma, sums, low, high)
    assert np.isnan(low[1]) and np.isnan(high[1]) and (low[0], high[0]) == (-1.0, 1.0)
    np.testing.assert_array_equal(sums[:, 0], [1.0, 3.0, 0.25, 0.5])
