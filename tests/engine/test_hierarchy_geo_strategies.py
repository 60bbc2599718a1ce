"""Issue 32 items 1–2: the GEO step is a strategy on the flat server's protocol.

Unit tests of the tier protocol at the GEO (the regional batch, the staleness × fairness
weighting composed into a method's tier, the paper's RobustAvg GEO), then tiny runs (12
tractors, 2–3 rounds) with DUAL-SHIELD, median / trimmed mean and FedAdam at the GEO: they
run, record what the strategy did, and a run killed after round 1 and resumed equals one
that never stopped, GEO strategy state included.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.engine.hierarchy_helpers import (
    CrashAfter,
    agri_raw,
    config,
    make_run,
    round_records,
)

from geofl.engine.experiment import run_experiment
from geofl.engine.hierarchy.events import TierModel
from geofl.engine.hierarchy.geo import (
    ComposedGeo,
    RobustAvgGeo,
    StaleFairWeighting,
    geo_batch,
    stale_fair,
)
from geofl.engine.hierarchy.scheduler import HierarchicalScheduler
from geofl.records import RoundRecord
from geofl.server.aggregators import AGGREGATORS
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, Strategy
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights, uniform_weights


def _tier(
    delta: list[float],
    produced: int,
    farms: set[int],
    bins: tuple[int, ...],
    *,
    n: int = 10,
    attempts: int = 0,
    lost: int = 0,
) -> TierModel:
    d = torch.tensor(delta)
    return TierModel(
        model=d + 10.0,
        delta=d,
        produced_round=produced,
        num_samples=n,
        clients=tuple(range(len(bins))),
        farms=frozenset(farms),
        bins=bins,
        attempts=attempts,
        nqi_lost=lost,
        clusters=(0,),
        created_s=0.0,
        tractor_weights=tuple([1.0 / len(bins)] * len(bins)),
        client_rounds=tuple([produced] * len(bins)),
        client_created=tuple([0.0] * len(bins)),
    )


def _regionals() -> list[tuple[int, TierModel]]:
    # round 4; LEO 0: t' = 3, farms 2, bins {0, 1} (H = ln 2), 1 of 4 attempts lost, 30
    # samples; LEO 3: t' = 2, 1 farm, one bin, nothing lost, 10 samples. κ = 0.5.
    return [
        (0, _tier([0.2, 0.0], 3, {0, 1}, (0, 1), n=30, attempts=4, lost=1)),
        (3, _tier([0.0, 0.4], 2, {2}, (5, 5))),
    ]


def _by_hand() -> torch.Tensor:
    wa = math.exp(-0.5) * 2 * 2 / 1.25
    wb = math.exp(-1.0) * 1 * 1 / 1.0
    return torch.tensor([wa, wb], dtype=torch.float64)


def test_the_regional_batch_carries_leo_ids_staleness_and_eq11_inputs() -> None:
    cur = torch.full((2,), 10.0)
    batch = geo_batch(cur, _regionals(), geo_delta="model")
    assert [m.client_id for m in batch.metas] == [0, 3]
    assert [m.round for m in batch.metas] == [3, 2]
    assert [m.num_samples for m in batch.metas] == [30, 10]
    assert torch.allclose(batch.deltas, torch.tensor([[0.2, 0.0], [0.0, 0.4]]))
    stale, fair = stale_fair(batch.metas, 4, kappa=0.5, fairness=True)
    assert torch.allclose(stale * fair, _by_hand())
    _, ones = stale_fair(batch.metas, 4, kappa=0.5, fairness=False)
    assert ones.tolist() == [1.0, 1.0]


def test_stale_fair_weighting_multiplies_the_methods_weighting() -> None:
    batch = geo_batch(torch.zeros(2), _regionals(), geo_delta="update")
    uni = StaleFairWeighting(uniform_weights, kappa=0.5, fairness=True)(batch.metas, 4)
    assert torch.allclose(uni / uni.sum(), _by_hand() / _by_hand().sum())
    size = StaleFairWeighting(data_size_weights, kappa=0.5, fairness=True)(batch.metas, 4)
    want = _by_hand() * torch.tensor([30.0, 10.0], dtype=torch.float64)
    assert torch.allclose(size / size.sum(), want / want.sum())


def _composed(aggregator: str, weighting: Any = uniform_weights) -> ComposedStrategy:
    tier = FlatTier(weighting, AGGREGATORS.build(aggregator, {}))
    return ComposedStrategy(tier, PlainServerOptimizer(1.0))


def test_composed_geo_is_a_strategy_whose_weighted_mean_uses_eq12() -> None:
    cur = torch.zeros(2)
    geo = ComposedGeo(_composed("mean"), kappa=0.5, fairness=True)
    protocol: Strategy = geo  # the flat server's protocol (checked by mypy)
    assert protocol.configure(4, [0, 1]).extra == {} and protocol.uploads == ()
    res = geo.step(4, cur, geo_batch(cur, _regionals(), geo_delta="update"))
    alpha = _by_hand() / _by_hand().sum()
    assert torch.allclose(res.weights, alpha) and torch.allclose(res.effective, alpha)
    want = torch.tensor([0.2 * alpha[0], 0.4 * alpha[1]], dtype=torch.float32)
    assert torch.allclose(res.params, want, atol=1e-6)
    assert res.kept.tolist() == [True, True] and res.staleness == [1, 2]


def test_paper_geo_equals_composed_mean_without_clipping_or_trimming() -> None:
    cur = torch.zeros(2)
    batch = geo_batch(cur, _regionals(), geo_delta="update")
    paper = RobustAvgGeo(kappa=0.5, clip=100.0, trim_fraction=0.0, fairness=True)
    composed = ComposedGeo(_composed("mean"), kappa=0.5, fairness=True)
    a, b = paper.step(4, cur, batch), composed.step(4, cur, batch)
    assert torch.allclose(a.params, b.params, atol=1e-7)
    assert paper.state_dict() == {}


def test_median_at_the_geo_ignores_weights_but_records_them() -> None:
    cur = torch.zeros(2)
    regionals = [*_regionals(), (5, _tier([1.0, 1.0], 4, {3}, (2,)))]
    geo = ComposedGeo(_composed("median"), kappa=0.5, fairness=True)
    res = geo.step(4, cur, geo_batch(cur, regionals, geo_delta="update"))
    assert torch.allclose(res.params, torch.tensor([0.2, 0.4]))
    assert math.isclose(float(res.weights.sum()), 1.0)


# --- runs ----------------------------------------------------------------------------

#: Ideal contacts (every cluster reaches LEO c mod n at once): fast and deterministic.
IDEAL = {"leo": {"contacts": "ideal", "n": 4, "planes": 2}, "staleness_metric": False}


def _raw(rounds: int = 2, **method: Any) -> dict[str, Any]:
    return agri_raw(IDEAL, rounds=rounds, **method)


def _run(tmp: Path, raw: dict[str, Any], name: str) -> list[RoundRecord]:
    run = make_run(config(tmp, raw, name), tmp / name)
    params, out = run.init_params, []
    for r in range(1, raw["federation"]["rounds"] + 1):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        out.append(res.record)
    return out


SHIELD = {"algorithm": {"name": "dual_shield", "k_min": 2}, "weighting": {"name": "uniform"}}


def test_dual_shield_at_the_geo_runs_and_records_cgf_and_reputations(tmp_path: Path) -> None:
    recs = _run(tmp_path, _raw(**SHIELD), "shield")
    assert all(r.status.value == "aggregated" for r in recs)
    last = recs[-1]
    assert "cgf.survivors" in last.strategy
    assert any(k.startswith("cgf.z.") for k in last.strategy)
    assert any(k.startswith("hra.reputation.") for k in last.strategy)
    assert last.hierarchy is not None
    kept = [reg["kept"] for reg in last.hierarchy["regions"]]
    assert kept and sum(kept) == last.strategy["cgf.survivors"]


@pytest.mark.parametrize(
    "aggregator", [{"name": "median"}, {"name": "trimmed_mean", "trim_fraction": 0.25}]
)
def test_robust_combiners_at_the_geo_run(tmp_path: Path, aggregator: dict[str, Any]) -> None:
    recs = _run(tmp_path, _raw(aggregator=aggregator), aggregator["name"])
    assert all(r.status.value == "aggregated" and r.participants for r in recs)
    paper = _run(tmp_path, _raw(), "paper")
    assert recs[-1].model_sha256 != paper[-1].model_sha256  # the combiner is really used


def test_median_and_trimmed_mean_at_the_geo_and_the_drivers_run(tmp_path: Path) -> None:
    tiers = {
        "driver_aggregator": {"name": "median"},
        "leo_aggregator": {"name": "trimmed_mean", "trim_fraction": 0.2},
    }
    raw = agri_raw({**IDEAL, **tiers}, rounds=2, aggregator={"name": "median"})
    recs = _run(tmp_path, raw, "tiers")
    geo_only = _run(tmp_path, _raw(aggregator={"name": "median"}), "geo-only")
    assert all(r.status.value == "aggregated" and r.participants for r in recs)
    assert recs[-1].model_sha256 != geo_only[-1].model_sha256  # the drivers' median is used
    for r in recs:  # each tractor's share: GEO weight × its (robust) share of its region
        assert math.isclose(sum(r.weights), 1.0, rel_tol=1e-9)


def test_driver_median_by_hand() -> None:
    import numpy as np

    from geofl.config.hierarchy import HierarchyConfig
    from geofl.engine.hierarchy.events import TractorUpdate
    from geofl.engine.hierarchy.tiers import driver_fedavg, driver_tier

    ups = [
        TractorUpdate(k, 1, torch.tensor([float(v)]), torch.tensor([float(v)]), 10, 0.0)
        for k, v in enumerate([0.0, 1.0, 100.0])
    ]
    zeros = np.zeros(3, dtype=np.int64)
    kw = {
        "cluster": 0,
        "farm": zeros,
        "context_bin": zeros,
        "attempts": 3,
        "nqi_lost": 0,
        "now_s": 0.0,
        "round_idx": 1,
    }
    median = HierarchyConfig(driver_aggregator={"name": "median"})  # type: ignore[arg-type]
    mean = driver_fedavg(driver_tier(HierarchyConfig()), ups, **kw)  # type: ignore[arg-type]
    med = driver_fedavg(driver_tier(median), ups, **kw)  # type: ignore[arg-type]
    assert math.isclose(float(mean.model), 101.0 / 3, rel_tol=1e-6)
    assert float(med.model) == 1.0 and float(med.delta) == 1.0


def test_fedadam_at_the_geo_runs_and_moves_the_model(tmp_path: Path) -> None:
    recs = _run(tmp_path, _raw(algorithm={"name": "fedadam"}), "adam")
    assert all(r.status.value == "aggregated" for r in recs)
    assert len({r.model_sha256 for r in recs}) == 2


@pytest.mark.slow
@pytest.mark.parametrize("method", [SHIELD, {"algorithm": {"name": "fedadam"}}])
def test_geo_strategy_state_survives_a_kill_and_resume(
    tmp_path: Path, method: dict[str, Any]
) -> None:
    raw = _raw(rounds=3, **method)
    whole = run_experiment(config(tmp_path, raw, "a"), tmp_path / "whole")
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config(tmp_path, raw, "c"), cut, subscribers=[CrashAfter(1)])
    run_experiment(config(tmp_path, raw, "c"), cut, resume=True)
    assert round_records(whole) == round_records(cut)  # model hashes, weights, CGF/HRA scalars


def test_krum_at_the_geo_with_too_few_regions_keeps_the_model(tmp_path: Path) -> None:
    # 4 LEOs, Krum with f = 0 needs K > 2: rounds where fewer than 3 regional models
    # arrive fail at the GEO with the model unchanged, never crash the run.
    raw = _raw(aggregator={"name": "krum", "num_byzantine": 0})
    recs = _run(tmp_path, raw, "krum")
    for r in recs:
        assert r.status.value in ("aggregated", "aggregation_failed")
        if r.status.value == "aggregation_failed":
            assert r.aggregation_error and not r.participants


def test_attack_behaviours_reach_tractors_through_the_shared_client_step(
    tmp_path: Path,
) -> None:
    """Collection is one public step (SyncScheduler.collect) the hierarchy calls, so a
    method's attack acts on its tractors' updates like on flat clients' (issue 32 item 3
    builds on this)."""
    attack = {"name": "scaling", "clients": [0], "factor": 10.0}
    clean = make_run(config(tmp_path, _raw(), "clean"), tmp_path / "clean")
    bad = make_run(config(tmp_path, _raw(attack=attack), "bad"), tmp_path / "bad")
    got = []
    for run in (clean, bad):
        assert isinstance(run.scheduler, HierarchicalScheduler)
        got.append(run.scheduler.sync.collect(run.init_params, [0, 1], 1))
    assert torch.allclose(got[1].accepted[0].delta, 10.0 * got[0].accepted[0].delta)
    assert torch.equal(got[1].accepted[1].delta, got[0].accepted[1].delta)
