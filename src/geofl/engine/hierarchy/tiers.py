"""The three aggregation tiers of the 003 hierarchy over the records the clock carries.

* driver: FedAvg of the cluster's arrived tractor models (§2.1.6, §2.2.1),
* LEO: redundancy filter + regional FedAvg w̄_l = (1/N_l) Σ w_i (§2.2.3, Alg. 3 l. 2–4),
  (either may instead use a robust combiner of the flat server, ``hierarchy.driver_aggregator``
  / ``leo_aggregator``: median, trimmed mean, RobustAvg),
* GEO: a strategy over the regional models (:mod:`geofl.engine.hierarchy.geo`: the paper's
  staleness × fairness RobustAvg, or the method's own server side).

Both schedulers (the event-driven one and the synchronous reference) call these functions,
with their inputs in a canonical order (tractors, clusters and LEOs by id), so a zero-delay
asynchronous run and the synchronous hierarchy aggregate exactly the same tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from geofl.engine.hierarchy.events import TierModel, TractorUpdate
from geofl.hierarchy.regional import redundancy_filter, regional_fedavg
from geofl.server.aggregators import Aggregator

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
    combiner: Aggregator | None = None,
    uniform: bool = False,
) -> TierModel:
    """A cluster driver's FedAvg: w̄_c = Σ_i (n_i / Σ n) w_i over its arrived updates — or
    a robust combiner (median, trimmed mean, RobustAvg) over the same rows and weights.

    003 §2.1.5 states the driver's average as w̄ = (1/N) Σ_i w_i (every tractor alike);
    ``uniform`` gives exactly that, while the default keeps FedAvg's sample-count weights,
    which the presets' results were produced with (a tractor with more local data counts more).

    Args:
        updates: The arrived tractor updates (any order; aggregated by client id, then
            produced round).
        cluster: The cluster id.
        farm: ``[T]`` farm of every tractor.
        context_bin: ``[T]`` context bin of every tractor.
        attempts: Uplink attempts in the cluster since its last aggregation.
        nqi_lost: Of those, lost to NQI < τ or an outage.
        now_s: Simulated time of the aggregation.
        combiner: A combiner on the flat server's protocol applied to the models and to
            the updates alike (its effective weights become the tractors' shares); None:
            FedAvg (the paper's driver, §2.1.6).
        uniform: Weight every update 1/N (003 §2.1.5) instead of n_i / Σ n.
    """
    ups = sorted(updates, key=lambda u: (u.client, u.produced_round, u.created_s))
    n = torch.tensor([u.num_samples for u in ups], dtype=torch.float64)
    share = torch.full_like(n, 1.0 / len(ups)) if uniform else n / n.sum()
    models = torch.stack([u.model for u in ups])
    deltas = torch.stack([u.delta for u in ups])
    model, delta, share = _combine(models, deltas, share, combiner)
    rounds = [u.produced_round for u in ups]
    clients = tuple(u.client for u in ups)
    return TierModel(
        model=model,
        delta=delta,
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


def _combine(
    models: torch.Tensor, deltas: torch.Tensor, share: torch.Tensor, combiner: Aggregator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(model, delta, effective shares)``: FedAvg in float32 (``combiner`` None, the
    paper's tiers), else ``combiner`` over models and updates with the same weights."""
    if combiner is None:
        w32 = share.to(torch.float32)
        return w32 @ models, w32 @ deltas, share
    on_deltas = combiner(deltas, share)
    return combiner(models, share).delta, on_deltas.delta, on_deltas.weights


def leo_regional(
    models: Sequence[TierModel],
    *,
    threshold: float,
    now_s: float,
    combiner: Aggregator | None = None,
) -> TierModel:
    """A LEO pass: drop redundant driver models (Alg. 3 l. 3), then w̄_l = (1/N_l) Σ w̄_c
    over the kept ones (§2.2.3) — or ``combiner`` (a robust combiner on the flat server's
    protocol) over them with equal weights.

    Redundancy is judged on the driver models' updates (cosine of their Δ above
    ``threshold`` to an earlier kept one): whole models are all nearly parallel (cosine ≈ 1),
    and the drivers' models may start from different global versions.
    """
    ms = sorted(models, key=lambda m: (m.clusters, m.produced_round, m.created_s))
    stacked = torch.stack([m.model for m in ms])
    deltas = torch.stack([m.delta for m in ms])
    keep = redundancy_filter(deltas, threshold=threshold)
    kept = [m for m, k in zip(ms, keep.tolist(), strict=True) if k]
    if combiner is None:
        model, delta = regional_fedavg(stacked, keep), regional_fedavg(deltas, keep)
        shares = [1.0 / len(kept)] * len(kept)
    else:
        equal = torch.full((len(kept),), 1.0 / len(kept), dtype=torch.float64)
        model, delta, eff = _combine(stacked[keep], deltas[keep], equal, combiner)
        shares = eff.tolist()
    clients: list[int] = []
    weights: list[float] = []
    for m, share in zip(kept, shares, strict=True):
        clients.extend(m.clients)
        weights.extend(w * share for w in m.tractor_weights)
    return TierModel(
        model=model,
        delta=delta,
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
