"""The hierarchy's per-round figures (003 §3.1.4): staleness of every incorporated update with
its GEO weight, delivery per tier, latency per hop, bytes per hop, failovers.

Written as the ``hierarchy`` block of a :class:`~geofl.records.RoundRecord` (like the
``uplink`` block); :mod:`geofl.report.hierarchy` tabulates a run's blocks.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from geofl.engine.hierarchy.events import TierModel
from geofl.engine.hierarchy.geo import GeoResult
from geofl.hierarchy.staleness import staleness_table

__all__ = ["HOPS", "HierarchyStats", "credit_regionals", "parking_suggestion"]

#: Hops of the hierarchy, in data-flow order (uplink, then downlink).
HOPS = (
    "tractor_driver",
    "driver_leo",
    "leo_geo",
    "geo_leo",
    "leo_driver",
    "driver_tractor",
)


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


@dataclass
class HierarchyStats:
    """What one round of the hierarchy did; :meth:`to_json` is the record's block.

    Attributes:
        staleness: t − t' of every tractor update incorporated at the GEO this round.
        geo_weight: Its share of the GEO update (GEO weight of its regional model × its
            share of that model; aligned with ``staleness``).
        update_metric: The test metric (``metric``, the task's primary one) of the
            regional model w̄_l that carried the update (aligned with ``staleness``; NaN
            when not measured) — Table 10's "AUC per bucket" (:class:`StalenessBucket`).
        metric: Name of that metric (``"roc_auc"`` for Task B), or None when not measured.
        regions: One entry per regional model aggregated: LEO, t', ω_stale, ω_fair, ω̃,
            effective RobustAvg weight, clusters and tractors it covers.
        sent: Transmissions started per hop.
        delivered: Transmissions completed per hop (a late arrival counts in its round).
        bytes: Bytes per hop, as encoded and sealed (frames, tags, envelopes), put on the
            link by the sender: every transmission, delivered or not (tractor → driver:
            :func:`~geofl.engine.uplink.ground.link_bytes` of the ground uplink); nothing for a
            transmission that never started (no LEO contact, a receiver in an outage).
        airtime_s: Transmission seconds per uplink hop (tractor → driver: the ground
            uplink's; driver → LEO, LEO → GEO: 8 · bytes / rate).
        energy: Energy proxy Σ P_tx · t per uplink hop (§3.1.4).
        rejections: Refused space-hop envelopes or payloads per hop and reason.
        latency_s: Per hop, the simulated seconds of each completed transmission
            (terrestrial uplink; waiting for a pass; waiting for a relay slot; the downlink
            from GEO aggregation to a driver); ``end_to_end`` is creation → incorporation.
        failovers: Driver failures and re-elections (§2.1.6).
        driver_changes: Every change of a cluster's driver at a health check (a failover,
            or a member back in a cluster that had none): round, ``at_s``, cluster, ``old``
            → ``new`` driver (None: no driver), cause, and the uploads and downlinks that
            moved to the new driver's passes (:mod:`geofl.engine.hierarchy.drivers`).
        down: Tractors down this round (failed drivers).
        missed_downlink: Tractors that missed a global model (outage or down) and kept
            their last one (§2.1.2(4)).
        stranded: Driver models with no LEO contact left in the plan.
        geo: What the GEO aggregation saw: regional models, agro-climatic regions and
            farms, regions per model, RobustAvg's trim (:class:`~geofl.hierarchy.geography.
            GeoCoverage`); None when the GEO did not aggregate.
        events: The round's timeline, ``(t_s, kind, leo, cluster, station)`` with kind
            ``uplink`` (a driver model reached LEO ``leo`` in a pass over ``station``, the
            tractor driving ``cluster``), ``relay`` (LEO ``leo`` relayed its regional model
            to the GEO), ``geo`` (GEO aggregation) or ``downlink`` (the global model reached
            cluster ``cluster``'s driver ``station`` from LEO ``leo``); −1 where not
            applicable.
        parking: With ``hierarchy.suggest_after_s`` set, one entry per tractor skipped below
            τ_NQI this round: ``tractor``, ``t_last_s`` (simulated seconds since its last
            delivered update) and ``t_suggestion_s`` (:func:`parking_suggestion`); None
            (and absent from the record) when off.
    """

    staleness: list[int] = field(default_factory=list)
    geo_weight: list[float] = field(default_factory=list)
    update_metric: list[float] = field(default_factory=list)
    metric: str | None = None
    regions: list[dict[str, Any]] = field(default_factory=list)
    sent: Counter[str] = field(default_factory=Counter)
    delivered: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    airtime_s: dict[str, float] = field(default_factory=dict)
    energy: dict[str, float] = field(default_factory=dict)
    rejections: dict[str, dict[str, int]] = field(default_factory=dict)
    latency_s: dict[str, list[float]] = field(default_factory=dict)
    failovers: list[dict[str, Any]] = field(default_factory=list)
    driver_changes: list[dict[str, Any]] = field(default_factory=list)
    down: int = 0
    missed_downlink: int = 0
    stranded: int = 0
    geo: dict[str, Any] | None = None
    events: list[tuple[float, str, int, int, int]] = field(default_factory=list)
    parking: list[dict[str, Any]] | None = None

    def hop(
        self,
        name: str,
        *,
        sent: int = 0,
        delivered: int = 0,
        nbytes: int = 0,
        airtime_s: float = 0.0,
        energy: float = 0.0,
    ) -> None:
        """Count transmissions on hop ``name`` (bytes, airtime and energy of those sent)."""
        self.sent[name] += sent
        self.delivered[name] += delivered
        self.bytes[name] += nbytes
        if airtime_s or energy:
            self.airtime_s[name] = self.airtime_s.get(name, 0.0) + airtime_s
            self.energy[name] = self.energy.get(name, 0.0) + energy

    def latency(self, name: str, seconds: float) -> None:
        """One completed transmission's simulated latency on ``name``."""
        self.latency_s.setdefault(name, []).append(float(seconds))

    def event(
        self, t_s: float, kind: str, *, leo: int = -1, cluster: int = -1, station: int = -1
    ) -> None:
        """One timeline event (:attr:`events`)."""
        self.events.append((float(t_s), kind, int(leo), int(cluster), int(station)))

    def to_json(self) -> dict[str, Any]:
        """The ``hierarchy`` block of the round record."""
        stale = np.asarray(self.staleness, dtype=np.float64)
        w = np.asarray(self.geo_weight, dtype=np.float64)
        measured = self.update_metric if self.metric is not None else None
        table = staleness_table(self.staleness, self.geo_weight, measured)
        return {
            "staleness": list(self.staleness),
            "geo_weight": list(self.geo_weight),
            "staleness_mean": float(stale.mean()) if stale.size else None,
            "staleness_weighted": float(w @ stale / w.sum()) if w.size and w.sum() else None,
            "update_metric": [_finite(v) for v in self.update_metric],
            "metric": self.metric,
            "staleness_table": [{"bucket": b.label, **asdict(b)} for b in table],
            "regions": list(self.regions),
            "sent": {h: self.sent[h] for h in HOPS if self.sent[h]},
            "delivered": {h: self.delivered[h] for h in HOPS if self.delivered[h]},
            "bytes_by_hop": {h: self.bytes[h] for h in HOPS if self.bytes[h]},
            "airtime_s_by_hop": {h: self.airtime_s[h] for h in HOPS if h in self.airtime_s},
            "energy_by_hop": {h: self.energy[h] for h in HOPS if h in self.energy},
            "envelope_rejections": dict(self.rejections),
            "latency_s": {k: _mean(v) for k, v in sorted(self.latency_s.items())},
            "latency_n": {k: len(v) for k, v in sorted(self.latency_s.items())},
            "failovers": list(self.failovers),
            "driver_changes": list(self.driver_changes),
            "down": self.down,
            "missed_downlink": self.missed_downlink,
            "stranded": self.stranded,
            "geo": self.geo,
            "events": [list(e) for e in self.events],
        } | ({} if self.parking is None else {"parking": list(self.parking)})


def parking_suggestion(threshold_s: float, last_s: float) -> float:
    """T_suggestion = max(0, T_threshold − T_last) (003 §2.1.2): how long a tractor below
    τ_NQI may wait (park) before its update is overdue, T_last being the time since its last
    successful update and T_threshold the policy's longest allowed interval.

    The paper pairs it with Ideal_Location = f(NQI, T_suggestion) but leaves f unspecified;
    geofl reports T_suggestion only.
    """
    return max(0.0, threshold_s - last_s)


def credit_regionals(
    geo: GeoResult,
    regionals: Sequence[tuple[int, TierModel]],
    stats: HierarchyStats,
    round_idx: int,
    end_s: float,
    regional_metric: Sequence[float] | None,
) -> tuple[list[int], list[float]]:
    """The tractors the GEO incorporated and each one's share of the GEO update (effective
    GEO weight × regional share); records per regional model its weights (Eq. 8, 11, 12),
    whether the GEO strategy kept it, staleness and test metric, and per tractor update its
    staleness, weight, metric and end-to-end latency, in ``stats``."""
    participants: list[int] = []
    weights: list[float] = []
    values = list(regional_metric) if regional_metric is not None else [math.nan] * len(regionals)
    for (sat, m), w, eff, fair, stale, s, value, kept in zip(
        regionals,
        geo.weights.tolist(),
        geo.effective.tolist(),
        geo.fair.tolist(),
        geo.stale.tolist(),
        geo.staleness,
        values,
        geo.kept.tolist(),
        strict=True,
    ):
        participants.extend(m.clients)
        stats.update_metric.extend([value] * len(m.client_rounds))
        weights.extend(eff * share for share in m.tractor_weights)
        stats.staleness.extend(round_idx - r for r in m.client_rounds)
        stats.geo_weight.extend(eff * share for share in m.tractor_weights)
        stats.regions.append(
            {
                "leo": sat,
                "produced_round": m.produced_round,
                "staleness": s,
                "stale": stale,
                "fair": fair,
                "weight": w,
                "effective": eff,
                "kept": kept,
                "clusters": list(m.clusters),
                "tractors": len(m.clients),
                "test_metric": value if math.isfinite(value) else None,
            }
        )
        for created in m.client_created:
            stats.latency("end_to_end", end_s - created)
    return participants, weights
