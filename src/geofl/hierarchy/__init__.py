"""Paper 003's space layer, ground pieces: fleet → clusters and drivers → LEO/GEO weights.

A round's data flow reads down the modules:

* :mod:`~geofl.hierarchy.fleet` — the tractors: farm, region, location, model type,
  capability report, context bin (003 §2.1.4, §3.1, Table 12);
* :mod:`~geofl.hierarchy.clusters` — Alg. 2 cluster formation by model type and haversine
  radius, ρ-based driver election, health monitoring and failover (§2.1.4–2.1.6);
* :mod:`~geofl.hierarchy.regional` — LEO redundancy filter and regional FedAvg (§2.2.3,
  Alg. 3 lines 2–4);
* :mod:`~geofl.hierarchy.weights` — GEO staleness (Eq. 8) × fairness (Eq. 11) weights,
  normalised (Eq. 12); the robust GEO aggregate itself is
  :func:`geofl.server.robust.robust_avg` (§2.2.5);
* :mod:`~geofl.hierarchy.personalize` — regional adapters and on-tractor personalisation
  (§2.2.6);
* :mod:`~geofl.hierarchy.staleness` — Table 10's staleness buckets of the incorporated
  updates.

Everything here is a pure function or a small state machine; the event-driven engine
(:mod:`geofl.engine.hierarchy.scheduler`) composes them.
"""

from __future__ import annotations

from geofl.hierarchy.clusters import (
    Clusters,
    DriverMonitor,
    Failover,
    MonitorState,
    capability_score,
    elect,
    form_clusters,
    haversine_km,
)
from geofl.hierarchy.fleet import (
    MODEL_TYPES,
    REGION_CENTRES,
    Fleet,
    context_bins,
    fleet_from_context,
    synthetic_fleet,
)
from geofl.hierarchy.personalize import personalize, regional_adapters
from geofl.hierarchy.regional import redundancy_filter, regional_fedavg
from geofl.hierarchy.weights import (
    context_entropy,
    fairness_weights,
    geo_weights,
    staleness_weights,
)

__all__ = [
    "MODEL_TYPES",
    "REGION_CENTRES",
    "Clusters",
    "DriverMonitor",
    "Failover",
    "Fleet",
    "MonitorState",
    "capability_score",
    "context_bins",
    "context_entropy",
    "elect",
    "fairness_weights",
    "fleet_from_context",
    "form_clusters",
    "geo_weights",
    "haversine_km",
    "personalize",
    "redundancy_filter",
    "regional_adapters",
    "regional_fedavg",
    "staleness_weights",
    "synthetic_fleet",
]
