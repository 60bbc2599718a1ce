"""LEO redundancy filter and regional FedAvg (003 §2.2.3, Alg. 3 l. 3–4); personalisation."""

from __future__ import annotations

import math

import pytest
import torch

from geofl.errors import HierarchyError
from geofl.hierarchy.personalize import personalize, regional_adapters
from geofl.hierarchy.regional import redundancy_filter, regional_fedavg


def _angles(*deg: float) -> torch.Tensor:
    return torch.tensor([[math.cos(math.radians(a)), math.sin(math.radians(a))] for a in deg])


def test_redundancy_filter_by_hand() -> None:
    # a = (1, 0); b ≈ a (cos 0.99995); c ⟂ a; d at 45° (cos 0.707 to a and to c)
    m = torch.tensor([[1.0, 0.0], [0.99, 0.01], [0.0, 1.0], [0.7, 0.7]])
    assert redundancy_filter(m, threshold=0.9).tolist() == [True, False, True, True]
    assert redundancy_filter(m, threshold=0.5).tolist() == [True, False, True, False]
    assert redundancy_filter(m, threshold=1.0).all()  # off
    assert redundancy_filter(torch.ones(3, 2), threshold=1.0).all()  # even exact copies


def test_compared_with_kept_updates_only() -> None:
    # 0°, 20°, 40° with threshold cos 30°: 20° duplicates 0° and is dropped; 40° is 40° from
    # the only kept update, so it stays (a chain does not drop transitively).
    keep = redundancy_filter(_angles(0, 20, 40), threshold=math.cos(math.radians(30)))
    assert keep.tolist() == [True, False, True]


def test_reference_is_subtracted_and_zero_rows_are_never_redundant() -> None:
    ref = torch.tensor([100.0, 100.0])
    models = ref + torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    assert redundancy_filter(models, threshold=0.99).tolist() == [True, False, False]  # raw ≈ 1
    assert redundancy_filter(models, threshold=0.99, reference=ref).tolist() == [True, False, True]
    z = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    assert redundancy_filter(z, threshold=0.5).all()


def test_regional_fedavg_is_the_unweighted_mean_of_kept_models() -> None:
    m = torch.tensor([[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]])
    assert regional_fedavg(m, torch.tensor([True, True, False])).tolist() == [2.0, 3.0]
    assert regional_fedavg(m).tolist() == pytest.approx([104 / 3, 106 / 3])
    with pytest.raises(HierarchyError, match="N_l = 0"):
        regional_fedavg(m, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(HierarchyError, match="threshold"):
        redundancy_filter(m, threshold=-2.0)


def test_personalization_mix_by_hand() -> None:
    # 0.5·(1, 0) + 0.3·(0, 1) + 0.2·(2, 2) = (0.9, 0.7)
    g, a, w = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([2.0, 2.0])
    assert personalize(g, a, w, alpha=0.5, beta=0.3).tolist() == pytest.approx([0.9, 0.7])
    assert torch.equal(personalize(g, a, w, alpha=1.0, beta=0.0), g)
    assert torch.equal(personalize(g, a, w, alpha=0.0, beta=0.0), w)
    assert personalize(g, a, w, alpha=0.7, beta=0.3).tolist() == pytest.approx([0.7, 0.3])
    rows = personalize(g, torch.stack([a, g]), torch.stack([w, w]), alpha=0.5, beta=0.5)
    assert rows.tolist() == [[0.5, 0.5], [1.0, 0.0]]  # broadcasts over tractors


@pytest.mark.parametrize(
    ("alpha", "beta", "match"),
    [(0.8, 0.3, r"alpha \+ beta = 1\.1 > 1"), (-0.1, 0.2, "alpha"), (0.2, math.nan, "beta")],
)
def test_personalization_weights_off_the_simplex_are_refused(
    alpha: float, beta: float, match: str
) -> None:
    with pytest.raises(HierarchyError, match=match):
        personalize(torch.zeros(2), torch.zeros(2), torch.zeros(2), alpha=alpha, beta=beta)


def test_regional_adapters_mean_per_region_with_global_fallback() -> None:
    models = torch.tensor([[1.0, 1.0], [3.0, 3.0], [10.0, 0.0]])
    fallback = torch.tensor([7.0, 7.0])
    out = regional_adapters(models, torch.tensor([0, 0, 2]), num_regions=3, fallback=fallback)
    assert out.tolist() == [[2.0, 2.0], [7.0, 7.0], [10.0, 0.0]]
    with pytest.raises(HierarchyError, match="region"):
        regional_adapters(models, torch.tensor([0, 3, 0]), num_regions=3, fallback=fallback)
