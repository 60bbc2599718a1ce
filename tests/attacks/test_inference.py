"""The passive attribute-inference attack: AUC protocol and its no-leak property."""

from __future__ import annotations

import numpy as np
import pytest

from geofl.attacks.inference import AttributeInferenceParams, attack_auc
from geofl.attacks.observe import feature_names, update_statistics
from geofl.rng import numpy_generator

P = AttributeInferenceParams(n_estimators=50)


def test_separable_attribute_gives_auc_one() -> None:
    rng = numpy_generator(0, "test")
    y = np.repeat(np.array([True, False] * 15), 4)  # 30 clients x 4 windows
    X = rng.normal(size=(len(y), 5))
    X[:, 2] += 5.0 * y
    groups = np.repeat(np.arange(3), 40)  # three "seeds"
    out = attack_auc(X, y, groups, P)
    assert out["auc"] == 1.0 and out["n_samples"] == 120
    assert out["positive_fraction"] == 0.5 and all(a == 1.0 for a in out["fold_auc"])


def test_grouped_cv_does_not_leak_client_identity() -> None:
    # Each client has a unique, stable feature fingerprint and a random label. A protocol
    # that put a client's windows in both train and test would memorise the fingerprint
    # (AUC ≈ 1); grouping by client keeps the attacker at chance.
    rng = numpy_generator(1, "test")
    clients = np.repeat(np.arange(40), 5)
    fingerprint = rng.normal(size=(40, 6))
    X = fingerprint[clients] + 0.01 * rng.normal(size=(200, 6))
    y = rng.random(40)[clients] < 0.5
    out = attack_auc(X, y, clients, P)
    assert 0.25 < out["auc"] < 0.75
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import KFold, cross_val_predict

    leaky = cross_val_predict(
        RandomForestClassifier(50, random_state=0),
        X,
        y,
        cv=KFold(5, shuffle=True, random_state=0),
        method="predict_proba",
    )[:, 1]
    assert roc_auc_score(y, leaky) > 0.95  # what the grouped protocol avoids


def test_single_class_labels_give_nan_auc() -> None:
    X = np.zeros((6, 2))
    out = attack_auc(X, np.zeros(6, dtype=bool), np.arange(6), P)
    assert np.isnan(out["auc"])


def test_update_statistics_by_hand() -> None:
    import torch

    u = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]])
    agg = torch.tensor([1.0, 0.0, 0.0])
    layers = [("a", 0, 2), ("b", 2, 3)]
    f = update_statistics(u, aggregate=agg, previous=None, layers=layers)
    names = feature_names(layers)
    assert f.shape == (2, len(names)) == (2, 6 + 3 * 2)
    row = dict(zip(names, f[0].tolist(), strict=True))
    assert row["update.norm"] == pytest.approx(5.0)
    assert row["update.mean"] == pytest.approx(7 / 3)
    assert row["update.max_abs"] == 4.0
    assert row["update.cos_aggregate"] == pytest.approx(3 / 5)
    assert row["update.cos_previous"] == 0.0
    assert row["a.norm"] == pytest.approx(5.0) and row["a.mean"] == pytest.approx(3.5)
    assert row["b.norm"] == 0.0 and row["b.std"] == 0.0
    assert f[1, names.index("update.cos_aggregate")] == 0.0
