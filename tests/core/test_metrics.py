"""Metrics pinned to hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geofl.tasks.metrics import confusion_matrix, metrics_from_confusion, rolling_std


def test_confusion_and_metrics_by_hand() -> None:
    y = torch.tensor([0, 0, 1, 1])
    p = torch.tensor([0, 1, 1, 1])
    cm = confusion_matrix(y, p, 3)
    assert cm.tolist() == [[1, 1, 0], [0, 2, 0], [0, 0, 0]]
    m = metrics_from_confusion(cm, loss_sum=2.0)
    assert m["accuracy"] == 0.75
    # F1_0 = 2·1/(2·1+0+1) = 2/3, F1_1 = 2·2/(2·2+1+0) = 4/5; class 2 absent → excluded.
    assert m["macro_f1"] == pytest.approx((2 / 3 + 4 / 5) / 2)
    assert m["loss"] == 0.5
    assert m["per_class_accuracy"][:2] == [0.5, 1.0]
    assert math.isnan(m["per_class_accuracy"][2])
    assert m["n"] == 4


def test_macro_f1_matches_sklearn_definition_on_random_data() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 300)
    p = np.where(rng.random(300) < 0.6, y, rng.integers(0, 5, 300))
    m = metrics_from_confusion(confusion_matrix(torch.tensor(y), torch.tensor(p), 5), 0.0)
    f1s = []
    for c in range(5):
        tp = np.sum((y == c) & (p == c))
        fp = np.sum((y != c) & (p == c))
        fn = np.sum((y == c) & (p != c))
        f1s.append(2 * tp / (2 * tp + fp + fn))
    assert m["macro_f1"] == pytest.approx(np.mean(f1s))
    assert m["accuracy"] == pytest.approx(np.mean(y == p))


def test_rolling_std_by_hand() -> None:
    out = rolling_std(np.array([1.0, 3.0, 5.0, 5.0]), window=2)
    assert np.isnan(out[0])
    assert out[1:].tolist() == [1.0, 1.0, 0.0]
    w3 = rolling_std(np.array([0.0, 0.0, 3.0]), window=3)
    assert w3[-1] == pytest.approx(np.sqrt(2.0))  # mean 1, deviations 1,1,4 → var 2


def test_rolling_std_short_series_and_bad_window() -> None:
    assert np.isnan(rolling_std(np.ones(3), window=10)).all()
    with pytest.raises(ValueError, match="window"):
        rolling_std(np.ones(3), window=0)
