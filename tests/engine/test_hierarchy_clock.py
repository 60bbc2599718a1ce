"""The hierarchy's event queue: order by (time, kind, insertion), windows, checkpoints; and the
tiers' arithmetic by hand (driver FedAvg, LEO regional mean, GEO weights Eq. 8 × 11 / Eq. 12)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.hierarchy.events import (
    Downlink,
    DriverDeadline,
    EventQueue,
    Relay,
    TierModel,
    TractorArrival,
    TractorUpdate,
)
from geofl.engine.hierarchy.geo import GeoResult, RobustAvgGeo, geo_batch
from geofl.engine.hierarchy.tiers import driver_fedavg, driver_tier, leo_regional, leo_tier


def _upd(client: int, rnd: int, value: float, n: int = 1) -> TractorUpdate:
    delta = torch.full((3,), value)
    return TractorUpdate(client, rnd, delta + 1.0, delta, n, 0.0)


def test_events_pop_by_time_then_kind_then_insertion() -> None:
    q = EventQueue()
    q.push(5.0, Relay(0))
    q.push(5.0, DriverDeadline(1, 1))
    q.push(5.0, TractorArrival(1, _upd(3, 1, 0.0)))
    q.push(5.0, DriverDeadline(0, 1))
    q.push(1.0, Relay(2))
    q.push(5.0, Downlink(0, 1))
    got = [(t, e) for t, e in q.pop_until(10.0)]
    assert [t for t, _ in got] == [1.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    kinds = [type(e).__name__ for _, e in got]
    assert kinds == [
        "Relay",
        "Downlink",
        "TractorArrival",
        "DriverDeadline",
        "DriverDeadline",
        "Relay",
    ]
    deadlines = [e for _, e in got if isinstance(e, DriverDeadline)]
    assert [d.cluster for d in deadlines] == [1, 0]  # insertion order among equals


def test_window_is_half_open_unless_inclusive_and_takes_events_pushed_inside() -> None:
    q = EventQueue()
    q.push(10.0, Relay(0))
    q.push(3.0, Relay(1))
    seen = []
    for t, e in q.pop_until(10.0):
        seen.append((t, e))
        if t == 3.0:
            q.push(4.0, Relay(5))  # scheduled while handling: still inside the window
    assert [(t, e.sat) for t, e in seen] == [(3.0, 1), (4.0, 5)]  # type: ignore[union-attr]
    assert q.peek_time() == 10.0
    assert [t for t, _ in q.pop_until(10.0, inclusive=True)] == [10.0]
    assert len(q) == 0 and q.peek_time() is None


def test_queue_state_round_trips_through_a_pickle() -> None:
    q = EventQueue()
    for i, t in enumerate([7.0, 2.0, 2.0, 9.0, 2.0]):
        q.push(t, Relay(i))
    q2 = EventQueue()
    q2.load_state_dict(pickle.loads(pickle.dumps(q.state_dict())))
    q.push(2.0, Relay(99))
    q2.push(2.0, Relay(99))
    a = [(t, e.sat) for t, e in q.pop_until(math.inf)]  # type: ignore[union-attr]
    b = [(t, e.sat) for t, e in q2.pop_until(math.inf)]  # type: ignore[union-attr]
    assert a == b == [(2.0, 1), (2.0, 2), (2.0, 4), (2.0, 99), (7.0, 0), (9.0, 3)]


def test_driver_fedavg_is_sample_weighted_and_order_free() -> None:
    farm = np.array([0, 0, 1])
    bins = np.array([4, 5, 6])
    ups = [_upd(2, 3, 3.0, n=1), _upd(0, 2, 0.0, n=3)]
    kw = {"cluster": 7, "farm": farm, "context_bin": bins, "attempts": 4, "nqi_lost": 1}
    tier = driver_tier(HierarchyConfig())
    m = driver_fedavg(tier, ups, now_s=12.0, round_idx=1, **kw)  # type: ignore[arg-type]
    assert torch.allclose(m.delta, torch.full((3,), 0.75))  # (3·0 + 1·3) / 4
    assert torch.allclose(m.model, torch.full((3,), 1.75))
    assert m.clients == (0, 2) and m.client_rounds == (2, 3)
    assert (m.produced_round, m.num_samples) == (2, 4)
    assert m.farms == frozenset({0, 1}) and m.bins == (4, 6) and m.tractor_weights == (0.75, 0.25)
    again = driver_fedavg(tier, ups[::-1], now_s=12.0, round_idx=1, **kw)  # type: ignore[arg-type]
    assert torch.equal(again.model, m.model)


def _tier(
    cluster: int,
    value: torch.Tensor,
    rnd: int,
    farms: set[int],
    bins: tuple[int, ...],
    attempts: int = 0,
    lost: int = 0,
) -> TierModel:
    return TierModel(
        value + 10.0,
        value,
        rnd,
        1,
        (cluster,),
        frozenset(farms),
        bins,
        attempts,
        lost,
        (cluster,),
        0.0,
        (1.0,),
        (rnd,),
        (0.0,),
    )


def test_leo_regional_drops_a_duplicate_direction_then_means() -> None:
    a = _tier(0, torch.tensor([1.0, 0.0]), 2, {0}, (1,))
    dup = _tier(1, torch.tensor([2.0, 0.0]), 1, {1}, (2,))  # same direction as a: redundant
    b = _tier(2, torch.tensor([0.0, 4.0]), 3, {2}, (3,))
    tier = leo_tier(HierarchyConfig(redundancy_threshold=0.99))
    reg = leo_regional(tier, [b, dup, a], now_s=0.0, round_idx=1)
    assert reg.clusters == (0, 2)  # kept, in cluster order
    assert torch.allclose(reg.delta, torch.tensor([0.5, 2.0]))
    assert torch.allclose(reg.model, torch.tensor([10.5, 12.0]))
    assert reg.produced_round == 2 and reg.tractor_weights == (0.5, 0.5)


def test_geo_weights_by_hand_staleness_times_fairness() -> None:
    # round 4; A: t' = 3, farms 2, bins {0, 1} (H = ln 2), 1 of 4 attempts lost;
    # B: t' = 2, 1 farm, one bin (H = 0), nothing lost. κ = 0.5.
    a = _tier(0, torch.tensor([0.2, 0.0]), 3, {0, 1}, (0, 1), attempts=4, lost=1)
    b = _tier(1, torch.tensor([0.0, 0.4]), 2, {2}, (5, 5))
    cur = torch.tensor([10.0, 10.0])
    res = geo_aggregate(
        cur, [a, b], 4, kappa=0.5, clip=100.0, trim_fraction=0.0, fairness=True, geo_delta="model"
    )
    wa = math.exp(-0.5) * 2 * 2 / 1.25
    wb = math.exp(-1.0) * 1 * 1 / 1.0
    alpha = torch.tensor([wa, wb], dtype=torch.float64) / (wa + wb)
    assert res.staleness == [1, 2]
    assert torch.allclose(res.weights, alpha, atol=1e-9)
    want = cur + torch.tensor([0.2 * alpha[0], 0.4 * alpha[1]], dtype=torch.float32)
    assert torch.allclose(res.params, want, atol=1e-6)
    flat = geo_aggregate(
        cur, [a, b], 4, kappa=0.0, clip=100.0, trim_fraction=0.0, fairness=False, geo_delta="update"
    )
    assert torch.allclose(flat.weights, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert torch.allclose(flat.params, cur + torch.tensor([0.1, 0.2]), atol=1e-6)


def test_geo_clips_each_regional_delta_to_c() -> None:
    a = _tier(0, torch.tensor([30.0, 40.0]), 1, {0}, (0,))  # ‖Δ‖ = 50 → clipped to 1
    res = geo_aggregate(
        torch.zeros(2),
        [a],
        1,
        kappa=1.0,
        clip=1.0,
        trim_fraction=0.0,
        fairness=True,
        geo_delta="update",
    )
    assert torch.allclose(res.params, torch.tensor([0.6, 0.8]), atol=1e-6)
    with pytest.raises(Exception, match=r"kappa|κ"):
        geo_aggregate(
            torch.zeros(2),
            [a],
            1,
            kappa=-1.0,
            clip=1.0,
            trim_fraction=0.0,
            fairness=True,
            geo_delta="update",
        )


def geo_aggregate(
    cur: torch.Tensor,
    models: list[TierModel],
    round_idx: int,
    *,
    kappa: float,
    clip: float,
    trim_fraction: float,
    fairness: bool,
    geo_delta: str,
) -> GeoResult:
    """The paper's GEO step over ``models`` (LEO l relays ``models[l]``)."""
    geo = RobustAvgGeo(kappa=kappa, clip=clip, trim_fraction=trim_fraction, fairness=fairness)
    batch = geo_batch(cur, list(enumerate(models)), geo_delta=geo_delta)
    return geo.step(round_idx, cur, batch)


def test_personalization_by_hand() -> None:
    from geofl.config.hierarchy import PersonalizationConfig
    from geofl.engine.hierarchy.personal import Personalization

    p = Personalization(PersonalizationConfig(alpha=0.5, beta=0.25), np.array([0, 0, 1, 2]))
    from dataclasses import replace

    m1 = replace(_tier(0, torch.zeros(2), 1, {0}, (0,)), model=torch.ones(2), clients=(0, 1))
    m2 = replace(_tier(1, torch.zeros(2), 1, {1}, (0,)), model=torch.full((2,), 3.0), clients=(2,))
    p.publish(1, torch.zeros(2), [m1, m2])
    # A_0 = [1, 1] (m1: tractors of region 0), A_1 = [3, 3], A_2 = ŵ (no regional model)
    assert p.adapters[1].tolist() == [[1.0, 1.0], [3.0, 3.0], [0.0, 0.0]]
    p.trained(0, torch.tensor([10.0, 10.0]))
    p.adopt(0, 1, torch.zeros(2))  # 0.5·0 + 0.25·1 + 0.25·10
    p.adopt(2, 1, torch.zeros(2))  # no local model yet: w_i = ŵ → 0.25·3
    assert p.held(0).tolist() == [2.75, 2.75]  # type: ignore[union-attr]
    assert p.held(2).tolist() == [0.75, 0.75]  # type: ignore[union-attr]
    assert p.held(1) is None
    p.prune({2})
    assert p.adapters == {}
