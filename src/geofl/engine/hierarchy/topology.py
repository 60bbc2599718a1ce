"""What the hierarchy needs to know about the fleet: :class:`Topology`, the ground side the
scheduler reads (Alg. 2's clusters, the ρ scores re-election uses, each tractor's farm and
context bin for Eq. 11)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geofl.hierarchy.clusters import Clusters

__all__ = ["Topology"]


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
        model_type: ``[T]`` M_i, the model/sensor schema score each tractor sends in χ
            (003 Alg. 1 l. 6), or None.
        location: ``[T, 2]`` λ_i, (lat, lon) degrees each tractor sends in χ, or None.
    """

    clusters: Clusters
    rho: np.ndarray
    farm: np.ndarray
    context_bin: np.ndarray
    region: np.ndarray | None = None
    model_type: np.ndarray | None = None
    location: np.ndarray | None = None
