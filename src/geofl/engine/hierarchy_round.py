"""What the hierarchy needs to know about the fleet, and its round record.

:class:`Topology` is the ground side the scheduler reads (Alg. 2's clusters, the ρ scores
re-election uses, each tractor's farm and context bin for Eq. 11); :func:`build_record`
turns a hierarchical round into the run's typed :class:`~geofl.records.RoundRecord`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from geofl.engine.clock import TierModel
from geofl.engine.hierarchy_record import HierarchyStats
from geofl.engine.hierarchy_tiers import GeoResult
from geofl.engine.scheduler import SyncScheduler, _Collected, _reported_mean
from geofl.hashing import params_sha256, update_set_sha256
from geofl.hierarchy.clusters import Clusters
from geofl.records import RoundRecord, RoundStatus
from geofl.server.sampling import Cohort

__all__ = ["Topology", "build_record"]


@dataclass(frozen=True)
class Topology:
    """The fleet as the hierarchy sees it (client id = tractor id = row).

    Attributes:
        clusters: Alg. 2's clusters and initial drivers (a cluster transmits from the
            tractor driving it).
        rho: ``[T]`` capability scores ρ_i (re-election, §2.1.6).
        farm: ``[T]`` farm of every tractor (UniqueFarmCount, Eq. 11).
        context_bin: ``[T]`` crop × soil × climate bin of every tractor (H_l).
        region: ``[T]`` geographic region 0 … R − 1 of every tractor (regional adapters of
            the personalization, §2.2.6), or None.
    """

    clusters: Clusters
    rho: np.ndarray
    farm: np.ndarray
    context_bin: np.ndarray
    region: np.ndarray | None = None


def build_record(
    sync: SyncScheduler,
    round_idx: int,
    cohort: Cohort,
    excluded: list[int],
    got: _Collected,
    regionals: Sequence[tuple[int, TierModel]],
    geo: GeoResult | None,
    params: torch.Tensor,
    stats: HierarchyStats,
    *,
    end_s: float,
    regional_metric: Sequence[float] | None = None,
) -> RoundRecord:
    """The round's record: participants are the tractors whose updates the GEO incorporated
    this round, each with its share of the GEO update (GEO weight × regional share);
    training figures are those of the updates sent this round; the ``hierarchy`` block
    holds :class:`HierarchyStats` (``end_s``: simulated time of the GEO aggregation;
    ``regional_metric``: the test metric of every regional model in ``regionals``, which
    each of its updates carries into ``update_metric`` for Table 10)."""
    participants: list[int] = []
    weights: list[float] = []
    if geo is not None:
        participants, weights = _credit_regionals(
            geo, regionals, stats, round_idx, end_s, regional_metric
        )
    metas = [u.meta for u in got.accepted]
    n = np.array([m.num_samples for m in metas], dtype=np.float64)
    primary = sync.c.task.primary_metric
    losses = np.array([m.train_loss for m in metas])
    train = np.array([m.train_metrics.get(primary, math.nan) for m in metas])
    status = RoundStatus.AGGREGATED if geo is not None else RoundStatus.NO_UPDATES
    deltas = torch.stack([m.model for _, m in regionals]) if regionals else torch.zeros(0, 1)
    return RoundRecord(
        round=round_idx,
        status=status,
        participants=participants,
        weights=weights,
        rejected=got.rejected,
        excluded=excluded,
        cohort=list(cohort.clients),
        sampling={"scheme": cohort.scheme, "rate": cohort.rate},
        train_loss=_reported_mean(n, losses),
        train_metrics={primary: _reported_mean(n, train)},
        bytes_up=int(sum(m.bytes_sent for m in metas)),
        bytes_down=int(stats.bytes["driver_tractor"]),
        client_log=got.client_log,
        epsilon=got.epsilon,
        lr=sync.lr(round_idx),
        uplink=None if sync.c.uplink is None else sync.c.uplink.summary(got.transmissions),
        hierarchy=stats.to_json(),
        model_sha256=params_sha256(params),
        update_set_sha256=update_set_sha256([s for s, _ in regionals], deltas),
    )


def _credit_regionals(
    geo: GeoResult,
    regionals: Sequence[tuple[int, TierModel]],
    stats: HierarchyStats,
    round_idx: int,
    end_s: float,
    regional_metric: Sequence[float] | None,
) -> tuple[list[int], list[float]]:
    """The tractors the GEO incorporated and each one's share of the GEO update (effective
    GEO weight × regional share); records per regional model its weights (Eq. 8, 11, 12),
    staleness and test metric, and per tractor update its staleness, weight, metric and
    end-to-end latency, in ``stats``."""
    participants: list[int] = []
    weights: list[float] = []
    values = list(regional_metric) if regional_metric is not None else [math.nan] * len(regionals)
    for (sat, m), w, eff, fair, stale, s, value in zip(
        regionals, geo.weights.tolist(), geo.effective.tolist(), geo.fair.tolist(),
        geo.stale.tolist(), geo.staleness, values, strict=True,
    ):  # fmt: skip
        participants.extend(m.clients)
        stats.update_metric.extend([value] * len(m.client_rounds))
        weights.extend(eff * share for share in m.tractor_weights)
        stats.staleness.extend(round_idx - r for r in m.client_rounds)
        stats.geo_weight.extend(eff * share for share in m.tractor_weights)
        stats.regions.append(
            {"leo": sat, "produced_round": m.produced_round, "staleness": s,
             "stale": stale, "fair": fair, "weight": w, "effective": eff,
             "clusters": list(m.clusters), "tractors": len(m.clients),
             "test_metric": value if math.isfinite(value) else None}
        )  # fmt: skip
        for created in m.client_created:
            stats.latency("end_to_end", end_s - created)
    return participants, weights
