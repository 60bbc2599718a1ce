"""The driver and LEO tiers of the 003 hierarchy: flat-server tiers over the records the
clock carries.

Each is a :class:`~geofl.server.tier.FlatTier` (defenses → weighting → combiner, the
protocol of the flat server and of the GEO's strategy), given the members' models beside
their updates (:class:`~geofl.server.tier.Tier`'s ``models``):

* driver: weighting n_i (FedAvg, §2.1.6) or 1/N (§2.1.5, ``driver_weights: uniform``),
  combiner the paper's FedAvg in float32 (:class:`DriverMean`) or a robust combiner of the
  flat server (``hierarchy.driver_aggregator``: median, trimmed mean, RobustAvg);
* LEO: the redundancy filter as a defense on the drivers' updates (Alg. 3 l. 3,
  :class:`RedundancyDefense`), equal weights, combiner the regional mean
  w̄_l = (1/N_l) Σ w̄_c (§2.2.3, Alg. 3 l. 4, :class:`RegionalMean`) or a robust one
  (``hierarchy.leo_aggregator``);
* GEO: a strategy over the regional models (:mod:`geofl.engine.hierarchy.geo`).

:func:`driver_fedavg` and :func:`leo_regional` run a tier and carry the bookkeeping the tiers
above need (:class:`~geofl.engine.hierarchy.events.TierModel`). Both schedulers (the
event-driven one and the synchronous reference) call them with inputs in a canonical order
(tractors, clusters and LEOs by id), so a zero-delay asynchronous run and the synchronous
hierarchy aggregate exactly the same tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from geofl.config.base import Component
from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.hierarchy.events import TierModel, TractorUpdate
from geofl.hierarchy.regional import redundancy_filter, regional_fedavg
from geofl.server.aggregators import AGGREGATORS, Aggregate, Aggregator
from geofl.server.tier import FlatTier, Tier
from geofl.update import UpdateMeta

__all__ = [
    "DriverMean",
    "RedundancyDefense",
    "RegionalMean",
    "driver_fedavg",
    "driver_tier",
    "leo_regional",
    "leo_tier",
]


class DriverMean:
    """The driver's FedAvg on the flat server's aggregator protocol: Σ_i α_i w_i with the
    normalised weights cast to float32 (one float32 matrix–vector product, §2.1.6)."""

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return Aggregate(weights.to(torch.float32) @ updates, weights)


class RegionalMean:
    """The LEO's regional FedAvg w̄_l = (1/N_l) Σ w̄_c (Alg. 3 l. 4): the sum in float64
    divided by N_l. The weights the tier gives are equal (1/N_l each); unequal ones (never
    from :func:`leo_tier`) are applied as a float64 weighted sum."""

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        if bool((weights == weights[0]).all()):
            return Aggregate(regional_fedavg(updates), weights)
        w = weights.to(torch.float64)
        return Aggregate((w @ updates.to(torch.float64)).to(updates.dtype), weights)


class RedundancyDefense:
    """Alg. 3 l. 3 as a defense: drop a driver update whose cosine to an earlier kept one
    exceeds ``threshold`` (:func:`~geofl.hierarchy.regional.redundancy_filter`).

    It judges updates, not models: whole models are all nearly parallel (cosine ≈ 1), and
    the drivers' models may start from different global versions."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, updates: torch.Tensor) -> torch.Tensor:
        return redundancy_filter(updates, threshold=self.threshold)


def _sample_counts(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
    """n_i, unnormalised (the tier normalises: n_i / Σ n)."""
    return torch.tensor([m.num_samples for m in metas], dtype=torch.float64)


def _equal(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
    """1 for every row (the tier normalises: 1/N)."""
    return torch.ones(len(metas), dtype=torch.float64)


def _combiner(comp: Component | None, paper: Aggregator) -> Aggregator:
    """``comp`` from the flat server's registry; ``paper`` (the 003 mean, bit for bit)
    when unset or ``mean``."""
    if comp is None or comp.name == "mean":
        return paper
    return AGGREGATORS.build(comp.name, comp.params)


def driver_tier(cfg: HierarchyConfig) -> FlatTier:
    """The drivers' tier of ``cfg`` (module docstring)."""
    weighting = _equal if cfg.driver_weights == "uniform" else _sample_counts
    return FlatTier(weighting, _combiner(cfg.driver_aggregator, DriverMean()))


def leo_tier(cfg: HierarchyConfig) -> FlatTier:
    """The LEOs' tier of ``cfg`` (module docstring)."""
    defense = RedundancyDefense(cfg.redundancy_threshold)
    return FlatTier(_equal, _combiner(cfg.leo_aggregator, RegionalMean()), (defense,))


def driver_fedavg(
    tier: Tier,
    updates: Sequence[TractorUpdate],
    *,
    cluster: int,
    farm: np.ndarray,
    context_bin: np.ndarray,
    attempts: int,
    nqi_lost: int,
    now_s: float,
    round_idx: int,
) -> TierModel:
    """A cluster driver's aggregate by ``tier`` (:func:`driver_tier`) over its arrived
    updates, sorted by client id, then produced round.

    Args:
        tier: The drivers' tier.
        updates: The arrived tractor updates (any order).
        cluster: The cluster id.
        farm: ``[T]`` farm of every tractor.
        context_bin: ``[T]`` context bin of every tractor.
        attempts: Uplink attempts in the cluster since its last aggregation.
        nqi_lost: Of those, lost to NQI < τ or an outage.
        now_s: Simulated time of the aggregation.
        round_idx: The global round (the tier's weighting may read it).
    """
    ups = sorted(updates, key=lambda u: (u.client, u.produced_round, u.created_s))
    metas = [UpdateMeta(u.client, u.num_samples, u.produced_round) for u in ups]
    res = tier(
        torch.stack([u.delta for u in ups]),
        metas,
        round_idx,
        models=torch.stack([u.model for u in ups]),
    )
    assert res.model is not None  # given models, a tier returns their combination
    rounds = [u.produced_round for u in ups]
    clients = tuple(u.client for u in ups)
    return TierModel(
        model=res.model,
        delta=res.delta,
        produced_round=min(rounds),
        num_samples=sum(u.num_samples for u in ups),
        clients=clients,
        farms=frozenset(int(farm[k]) for k in clients),
        bins=tuple(int(context_bin[k]) for k in clients),
        attempts=attempts,
        nqi_lost=nqi_lost,
        clusters=(cluster,),
        created_s=now_s,
        tractor_weights=tuple(res.weights.tolist()),
        client_rounds=tuple(rounds),
        client_created=tuple(u.created_s for u in ups),
    )


def leo_regional(
    tier: Tier, models: Sequence[TierModel], *, now_s: float, round_idx: int
) -> TierModel:
    """A LEO pass: ``tier`` (:func:`leo_tier`: redundancy filter, then the regional mean or
    a robust combiner with equal weights) over the driver models of the pass, sorted by
    cluster, then produced round. Attempts and NQI losses count every driver model of the
    pass, the rest only the kept ones."""
    ms = sorted(models, key=lambda m: (m.clusters, m.produced_round, m.created_s))
    metas = [UpdateMeta(m.clusters[0], m.num_samples, m.produced_round) for m in ms]
    res = tier(
        torch.stack([m.delta for m in ms]),
        metas,
        round_idx,
        models=torch.stack([m.model for m in ms]),
    )
    assert res.model is not None  # given models, a tier returns their combination
    kept = [
        (m, s) for m, k, s in zip(ms, res.kept.tolist(), res.weights.tolist(), strict=True) if k
    ]
    return TierModel(
        model=res.model,
        delta=res.delta,
        produced_round=min(m.produced_round for m, _ in kept),
        num_samples=sum(m.num_samples for m, _ in kept),
        clients=tuple(c for m, _ in kept for c in m.clients),
        farms=frozenset().union(*(m.farms for m, _ in kept)),
        bins=tuple(b for m, _ in kept for b in m.bins),
        attempts=sum(m.attempts for m in ms),
        nqi_lost=sum(m.nqi_lost for m in ms),
        clusters=tuple(c for m, _ in kept for c in m.clusters),
        created_s=now_s,
        tractor_weights=tuple(w * s for m, s in kept for w in m.tractor_weights),
        client_rounds=tuple(r for m, _ in kept for r in m.client_rounds),
        client_created=tuple(c for m, _ in kept for c in m.client_created),
    )
