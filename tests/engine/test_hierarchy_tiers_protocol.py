"""Issue 32 item 1: the driver, LEO and GEO tiers of the 003 hierarchy are tiers on the flat
server's protocol (:class:`~geofl.server.tier.FlatTier`): defenses → weighting → combiner,
given the members' models beside their updates. Checked by hand on tiny inputs."""

from __future__ import annotations

import numpy as np
import torch

from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.hierarchy import tiers
from geofl.engine.hierarchy.events import TierModel, TractorUpdate
from geofl.engine.hierarchy.geo import RobustAvgGeo
from geofl.server.aggregators import build_mean
from geofl.server.tier import FlatTier
from geofl.server.weighting import uniform_weights
from geofl.update import UpdateMeta


def _counts(metas: list[UpdateMeta], round_idx: int) -> torch.Tensor:
    return torch.tensor([float(m.num_samples) for m in metas], dtype=torch.float64)


def test_a_flat_tier_combines_companion_models_with_the_updates_weights() -> None:
    # updates [1, 0], [3, 0] with n = 1, 3 → weights 1/4, 3/4; models = 10 + update·2
    updates = torch.tensor([[1.0, 0.0], [3.0, 0.0]])
    models = torch.tensor([[12.0, 10.0], [16.0, 10.0]])
    metas = [UpdateMeta(0, 1, 1), UpdateMeta(1, 3, 1)]
    res = FlatTier(_counts, build_mean(None))(updates, metas, 1, models=models)  # type: ignore[arg-type]
    assert torch.allclose(res.delta, torch.tensor([2.5, 0.0]))  # 1/4·1 + 3/4·3
    assert res.model is not None
    assert torch.allclose(res.model, torch.tensor([15.0, 10.0]))  # 1/4·12 + 3/4·16
    assert res.weights.tolist() == [0.25, 0.75] and res.num_samples == 4
    plain = FlatTier(uniform_weights, build_mean(None))(updates, metas, 1)  # type: ignore[arg-type]
    assert plain.model is None  # without models: the flat server's result, unchanged


def test_the_three_tiers_are_flat_tiers() -> None:
    cfg = HierarchyConfig(redundancy_threshold=0.9)
    drv, leo = tiers.driver_tier(cfg), tiers.leo_tier(cfg)
    assert isinstance(drv, FlatTier) and drv.defenses == ()
    assert isinstance(leo, FlatTier) and isinstance(leo.defenses[0], tiers.RedundancyDefense)
    assert leo.defenses[0].threshold == 0.9
    geo = RobustAvgGeo(kappa=0.5, clip=1.0, trim_fraction=0.1, fairness=True)
    assert isinstance(geo.tier, FlatTier)


def test_the_leo_tier_drops_a_redundant_driver_update_as_a_defense() -> None:
    # deltas [1, 0], [2, 0] (parallel: the second is redundant), [0, 4]
    leo = tiers.leo_tier(HierarchyConfig(redundancy_threshold=0.99))
    deltas = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    metas = [UpdateMeta(c, 1, 1) for c in range(3)]
    res = leo(deltas, metas, 1, models=deltas + 10.0)
    assert res.kept.tolist() == [True, False, True]
    assert res.weights.tolist() == [0.5, 0.0, 0.5]
    assert torch.equal(res.delta, torch.tensor([0.5, 2.0]))
    assert res.model is not None and torch.equal(res.model, torch.tensor([10.5, 12.0]))


def test_driver_and_leo_records_follow_their_tiers() -> None:
    ups = [
        TractorUpdate(k, 1, torch.tensor([10.0 + v]), torch.tensor([v]), n, 0.0)
        for k, (v, n) in enumerate([(1.0, 1), (5.0, 3)])
    ]
    zeros = np.zeros(2, dtype=np.int64)
    kw = {"farm": zeros, "context_bin": zeros, "attempts": 2, "nqi_lost": 0, "now_s": 0.0}
    tier = tiers.driver_tier(HierarchyConfig())
    a = tiers.driver_fedavg(tier, ups, cluster=0, round_idx=1, **kw)  # type: ignore[arg-type]
    assert float(a.delta) == 4.0 and float(a.model) == 14.0  # (1·1 + 3·5) / 4
    assert a.tractor_weights == (0.25, 0.75)
    b = TierModel(
        torch.tensor([10.0]),
        torch.tensor([-2.0]),
        1,
        2,
        (2,),
        frozenset({0}),
        (0,),
        1,
        0,
        (1,),
        0.0,
        (1.0,),
        (1,),
        (0.0,),
    )
    reg = tiers.leo_regional(tiers.leo_tier(HierarchyConfig()), [b, a], now_s=0.0, round_idx=1)
    assert float(reg.delta) == 1.0 and float(reg.model) == 12.0  # (4 − 2) / 2, (14 + 10) / 2
    assert reg.clients == (0, 1, 2) and reg.tractor_weights == (0.125, 0.375, 0.5)
