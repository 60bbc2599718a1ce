"""The three aggregation tiers of the 003 hierarchy over the records the clock carries.

* driver: FedAvg of the cluster's arrived tractor models (§2.1.6, §2.2.1),
* LEO: redundancy filter + regional FedAvg w̄_l = (1/N_l) Σ w_i (§2.2.3, Alg. 3 l. 2–4),
* GEO: a strategy over the regional models (:mod:`geofl.engine.hierarchy_geo`: the paper's
  staleness × fairness RobustAvg, or the method's own server side).

Both schedulers (the event-driven one and the synchronous reference) call these functions,
with their inputs in a canonical order (tractors, clusters and LEOs by id), so a zero-delay
asynchronous run and the synchronous hierarchy aggregate exactly the same tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from geofl.engine.clock import TierModel, TractorUpdate
from geofl.hierarchy.regional import redundancy_filter, regional_fedavg

__all__ = ["driver_fedavg", "leo_regional"]


def driver_fedavg(
    updates: Sequence[TractorUpdate],
    *,
    cluster: int,
    farm: np.ndarray,
    context_bin: np.ndarray,
    attempts: int,
    nqi_lost: int,
    now_s: float,
) -> TierModel:
    """A cluster driver's FedAvg: w̄_c = Σ_i (n_i / Σ n) w_i over its arrived updates.

    Args:
        updates: The arrived tractor updates (any order; aggregated by client id, then
            produced round).
        cluster: The cluster id.
        farm: ``[T]`` farm of every tractor.
        context_bin: ``[T]`` context bin of every tractor.
        attempts: Uplink attempts in the cluster since its last aggregation.
        nqi_lost: Of those, lost to NQI < τ or an outage.
        now_s: Simulated time of the aggregation.
    """
    ups = sorted(updates, key=lambda u: (u.client, u.produced_round, u.created_s))
    n = torch.tensor([u.num_samples for u in ups], dtype=torch.float64)
    share = n / n.sum()
    w32 = share.to(torch.float32)
    models = torch.stack([u.model for u in ups])
    deltas = torch.stack([u.delta for u in ups])
    rounds = [u.produced_round for u in ups]
    clients = tuple(u.client for u in ups)
    return TierModel(
        model=w32 @ models,
        delta=w32 @ deltas,
        produced_round=min(rounds),
        newest_round=max(rounds),
        num_samples=int(n.sum()),
        clients=clients,
        farms=frozenset(int(farm[k]) for k in clients),
        bins=tuple(int(context_bin[k]) for k in clients),
        attempts=attempts,
        nqi_lost=nqi_lost,
        clusters=(cluster,),
        created_s=now_s,
        tractor_weights=tuple(share.tolist()),
        client_rounds=tuple(rounds),
        client_created=tuple(u.created_s for u in ups),
    )


def leo_regional(models: Sequence[TierModel], *, threshold: float, now_s: float) -> TierModel:
    """A LEO pass: drop redundant driver models (Alg. 3 l. 3), then w̄_l = (1/N_l) Σ w̄_c
    over the kept ones (§2.2.3).

    Redundancy is judged on the driver models' updates (cosine of their Δ above
    ``threshold`` to an earlier kept one): whole models are all nearly parallel (cosine ≈ 1),
    and the drivers' models may start from different global versions.
    """
    ms = sorted(models, key=lambda m: (m.clusters, m.produced_round, m.created_s))
    stacked = torch.stack([m.model for m in ms])
    deltas = torch.stack([m.delta for m in ms])
    keep = redundancy_filter(deltas, threshold=threshold)
    kept = [m for m, k in zip(ms, keep.tolist(), strict=True) if k]
    share = 1.0 / len(kept)
    clients: list[int] = []
    weights: list[float] = []
    for m in kept:
        clients.extend(m.clients)
        weights.extend(w * share for w in m.tractor_weights)
    return TierModel(
        model=regional_fedavg(stacked, keep),
        delta=regional_fedavg(deltas, keep),
        produced_round=min(m.produced_round for m in kept),
        newest_round=max(m.newest_round for m in kept),
        num_samples=sum(m.num_samples for m in kept),
        clients=tuple(clients),
        farms=frozenset().union(*(m.farms for m in kept)),
        bins=tuple(b for m in kept for b in m.bins),
        attempts=sum(m.attempts for m in ms),
        nqi_lost=sum(m.nqi_lost for m in ms),
        clusters=tuple(c for m in kept for c in m.clusters),
        created_s=now_s,
        tractor_weights=tuple(weights),
        client_rounds=tuple(r for m in kept for r in m.client_rounds),
        client_created=tuple(c for m in kept for c in m.client_created),
    )
