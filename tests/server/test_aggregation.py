"""Weighted mean, weightings, defenses, tier composition and update validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from geofl.server.aggregators import AGGREGATORS, weighted_mean
from geofl.server.defenses import norm_bound_mask
from geofl.server.tier import FlatTier
from geofl.server.validate import validate_update
from geofl.server.weighting import data_size_weights, uniform_weights
from geofl.update import ClientUpdate, UpdateMeta


def _meta(k: int, n: int) -> UpdateMeta:
    return UpdateMeta(client_id=k, num_samples=n, round=1)


def test_weighted_mean_by_hand() -> None:
    u = torch.tensor([[1.0, 0.0], [3.0, 4.0]])
    assert weighted_mean(u, torch.tensor([1.0, 3.0])).tolist() == [2.5, 3.0]
    assert AGGREGATORS.build("mean")(u, torch.tensor([1.0, 1.0])).delta.tolist() == [2.0, 2.0]


def test_weighted_mean_rejects_bad_weights() -> None:
    u = torch.ones(2, 3)
    with pytest.raises(ValueError, match="positive sum"):
        weighted_mean(u, torch.zeros(2))
    with pytest.raises(ValueError, match="non-negative"):
        weighted_mean(u, torch.tensor([2.0, -1.0]))
    with pytest.raises(ValueError, match=r"expected updates \[K, D\]"):
        weighted_mean(u, torch.ones(3))


finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(deadline=None)
@given(
    arrays(np.float32, st.tuples(st.integers(1, 8), st.integers(1, 16)), elements=finite),
    st.data(),
)
def test_weighted_mean_properties(updates: np.ndarray, data: st.DataObject) -> None:
    k = updates.shape[0]
    w = np.array(data.draw(st.lists(st.floats(0.01, 10.0), min_size=k, max_size=k)))
    u, wt = torch.from_numpy(updates), torch.from_numpy(w)
    out = weighted_mean(u, wt)
    # permutation invariance
    perm = torch.from_numpy(np.array(data.draw(st.permutations(list(range(k))))))
    assert torch.allclose(weighted_mean(u[perm], wt[perm]), out, atol=1e-3)
    # within coordinate-wise bounds
    assert bool((out >= u.min(0).values - 1e-3).all() and (out <= u.max(0).values + 1e-3).all())
    # scale invariance of the weights
    assert torch.allclose(weighted_mean(u, wt * 7), out, atol=1e-3)


def test_data_size_and_uniform_weights() -> None:
    metas = [_meta(0, 10), _meta(1, 30)]
    assert data_size_weights(metas, 1).tolist() == [0.25, 0.75]
    assert uniform_weights(metas, 1).tolist() == [0.5, 0.5]


def test_norm_bound_mask_by_hand() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 100.0]])  # norms 1, 2, 100; median 2
    assert norm_bound_mask(u, 3.0).tolist() == [True, True, False]


def test_flat_tier_drops_defended_updates_and_renormalises() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 100.0]])
    tier = FlatTier(
        data_size_weights, AGGREGATORS.build("mean"), [lambda x: norm_bound_mask(x, 3.0)]
    )
    res = tier(u, [_meta(0, 10), _meta(1, 30), _meta(2, 60)], 1)
    assert res.kept.tolist() == [True, True, False]
    assert res.weights.tolist() == [0.25, 0.75, 0.0]
    assert res.delta.tolist() == [0.25, 1.5]


def test_validate_update_reasons() -> None:
    ok = ClientUpdate(torch.zeros(4), _meta(0, 5))
    assert validate_update(ok, 4) is None
    nan = ClientUpdate(torch.tensor([0.0, float("nan"), float("inf"), 1.0]), _meta(0, 5))
    assert validate_update(nan, 4) == "delta has 2 non-finite values (NaN/Inf)"
    assert validate_update(ok, 5) == "delta has shape (4,), expected (5,)"
    ints = ClientUpdate(torch.zeros(4, dtype=torch.int64), _meta(0, 5))
    assert "floating" in str(validate_update(ints, 4))
    empty = ClientUpdate(torch.zeros(4), _meta(0, 0))
    assert validate_update(empty, 4) == "num_samples=0 must be positive"


@pytest.mark.parametrize(
    ("hist", "reason"),
    [
        (np.zeros(3, dtype=np.int64), "label_histogram is all zeros"),
        (np.array([2, -1, 0]), "label_histogram has negative or non-finite counts"),
        (np.array([1.0, np.nan]), "label_histogram has negative or non-finite counts"),
        (
            np.ones((2, 2)),
            "label_histogram has shape (2, 2) and dtype float64, expected [C] counts",
        ),
    ],
)
def test_validate_rejects_malformed_label_histograms(hist: np.ndarray, reason: str) -> None:
    meta = UpdateMeta(client_id=0, num_samples=5, round=1, label_histogram=hist)
    assert validate_update(ClientUpdate(torch.zeros(4), meta), 4) == reason
    good = UpdateMeta(client_id=0, num_samples=5, round=1, label_histogram=np.array([0, 5]))
    assert validate_update(ClientUpdate(torch.zeros(4), good), 4) is None


def test_validate_accepts_huge_but_finite_values() -> None:
    # the sum overflows to inf, but every entry is finite: not malformed
    big = ClientUpdate(torch.full((4,), 3e38), _meta(0, 5))
    assert validate_update(big, 4) is None
