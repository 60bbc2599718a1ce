"""GEO weights: staleness (003 Eq. 8), fairness (Eq. 11), entropy H_l, normalisation (Eq. 12)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geofl.errors import HierarchyError
from geofl.hierarchy.weights import (
    context_entropy,
    fairness_weights,
    geo_weights,
    staleness_weights,
)


def test_staleness_by_hand() -> None:
    # t = 5, t' = 5, 4, 2, κ = 0.5 → exp(0), exp(−0.5), exp(−1.5)
    w = staleness_weights(5, [5, 4, 2], kappa=0.5)
    assert w.dtype == torch.float64
    assert w.tolist() == pytest.approx([1.0, 0.6065306597126334, 0.22313016014842982], rel=1e-15)
    assert staleness_weights(5, torch.tensor([1, 3]), kappa=0.0).tolist() == [1.0, 1.0]
    assert staleness_weights(10, np.array([0]), kappa=1.0).item() == pytest.approx(math.exp(-10))


@pytest.mark.parametrize("kappa", [-0.1, math.nan, math.inf])
def test_negative_or_non_finite_kappa_is_refused(kappa: float) -> None:
    with pytest.raises(HierarchyError, match="kappa"):
        staleness_weights(3, [1, 2], kappa=kappa)


def test_a_model_from_the_future_is_refused() -> None:
    with pytest.raises(HierarchyError, match="produced_round"):
        staleness_weights(3, [2, 4], kappa=0.1)


def test_entropy_of_known_bins() -> None:
    assert context_entropy([0, 0, 1, 1], eps=0.0) == pytest.approx(math.log(2), rel=1e-15)
    assert context_entropy([3, 5, 7, 9], eps=0.0) == pytest.approx(math.log(4), rel=1e-15)
    assert context_entropy([2, 2, 2], eps=0.0) == 0.0
    # p = (1/2, 1/4, 1/4): H = ½ ln 2 + ½ ln 4 = 1.5 ln 2
    assert context_entropy([0, 0, 1, 2], eps=0.0) == pytest.approx(1.5 * math.log(2), rel=1e-15)
    # ε of §2.2.4 only guards log(0): a tiny shift
    assert context_entropy([0, 1]) == pytest.approx(math.log(2), abs=1e-11)
    assert context_entropy([]) == 0.0
    with pytest.raises(HierarchyError, match="bins"):
        context_entropy([-1, 0])


def test_fairness_product_and_normalisation_by_hand() -> None:
    # UFC · exp(H) / (1 + loss): 14·2/1 = 28; 13·1/1.5 = 26/3; 8·4/2 = 16
    fair = fairness_weights([14, 13, 8], [math.log(2), 0.0, math.log(4)], [0.0, 0.5, 1.0])
    assert fair.tolist() == pytest.approx([28.0, 26 / 3, 16.0], rel=1e-14)
    total = 28.0 + 26 / 3 + 16.0
    w = geo_weights(torch.ones(3, dtype=torch.float64), fair)
    assert w.tolist() == pytest.approx([28 / total, 26 / 3 / total, 16 / total], rel=1e-14)
    assert w.sum().item() == pytest.approx(1.0, rel=1e-15)
    # Eq. 12 with staleness: ω = stale · fair, then normalised
    stale = staleness_weights(2, [2, 1, 0], kappa=math.log(2))  # 1, ½, ¼
    w = geo_weights(stale, fair)
    raw = [28.0, 13 / 3, 4.0]
    assert w.tolist() == pytest.approx([r / sum(raw) for r in raw], rel=1e-14)


def test_a_region_without_farms_gets_no_weight() -> None:
    fair = fairness_weights([0, 5], [0.0, 0.0], [0.0, 0.0])
    assert geo_weights([1.0, 1.0], fair).tolist() == [0.0, 1.0]
    with pytest.raises(HierarchyError, match="every region's weight is 0"):
        geo_weights([1.0, 1.0], [0.0, 0.0])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([1, 2], [0.0, 0.0], [0.0, 1.5]), "nqi_loss"),
        (([-1, 2], [0.0, 0.0], [0.0, 0.0]), "unique_farms"),
        (([1, 2], [0.0], [0.0, 0.0]), "differ in length"),
        (([1, 2], [0.0, math.nan], [0.0, 0.0]), "entropy"),
    ],
)
def test_bad_fairness_inputs_are_refused(args: tuple[list[float], ...], match: str) -> None:
    with pytest.raises(HierarchyError, match=match):
        fairness_weights(*args)


def test_a_single_bin_has_exactly_zero_entropy() -> None:
    from geofl.hierarchy.weights import context_entropy

    assert context_entropy([3, 3, 3]) == 0.0
