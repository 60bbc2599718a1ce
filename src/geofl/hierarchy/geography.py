"""Where the fleet's regions lie relative to the LEO passes, and what a GEO step covered.

Why it matters (003 §2.2.4–2.2.5): the GEO weights and trims *regional* models, one per LEO
relay. They stand for agro-climatic regions only when a LEO pass cannot carry drivers of two
regions, i.e. when regions are farther apart than the ground a satellite sees at once. A
satellite at altitude h is above elevation ε at ground points within the central angle
λ = arccos(R·cos ε / (R + h)) − ε of its nadir (the footprint, ground radius ρ = R·λ); two
points share a pass only when they are ≤ 2ρ apart (:func:`footprint_radius_km`,
:func:`min_separation_km`).

:func:`geo_coverage` counts, for one GEO aggregation, the regional models, the agro-climatic
regions and farms of the tractors they carry, and RobustAvg's trim b = ⌊β·L⌋ (§2.2.5: zero
below ten regional models at β = 0.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geofl.errors import HierarchyError
from geofl.hierarchy.clusters import EARTH_RADIUS_KM, haversine_km
from geofl.server.robust.trimmed import trim_count

__all__ = [
    "GeoCoverage",
    "footprint_radius_km",
    "geo_coverage",
    "min_separation_km",
    "region_centres_of",
]


def footprint_radius_km(altitude_km: float, elevation_deg: float) -> float:
    """Ground radius ρ = R·λ of the area that sees a satellite at ``altitude_km`` above
    ``elevation_deg`` (module docstring; 550 km, 10°: ≈ 1,664 km)."""
    if not (altitude_km > 0 and 0 <= elevation_deg < 90):
        raise HierarchyError(
            f"footprint: need altitude > 0 km and elevation in [0, 90) degrees, got "
            f"{altitude_km!r} km, {elevation_deg!r}°"
        )
    eps = np.radians(elevation_deg)
    lam = np.arccos(EARTH_RADIUS_KM * np.cos(eps) / (EARTH_RADIUS_KM + altitude_km)) - eps
    return float(EARTH_RADIUS_KM * lam)


def min_separation_km(lat: np.ndarray, lon: np.ndarray, region: np.ndarray) -> float:
    """The smallest distance (km) between two points of different regions (∞ for one
    region): a pass can carry two regions only when this is ≤ 2ρ."""
    lat, lon = np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)
    region = np.asarray(region, dtype=np.int64)
    d = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    other = region[:, None] != region[None, :]
    return float(d[other].min()) if other.any() else float("inf")


def region_centres_of(
    region: np.ndarray, lat: np.ndarray, lon: np.ndarray
) -> tuple[tuple[float, float], ...]:
    """(lat, lon) of regions 0 … R − 1 from per-row ``region`` ids and centre
    columns (as ``synthetic_agri`` records them for a geography other than ``paper3``).

    Raises:
        HierarchyError: when a region has no row or rows of one region disagree.
    """
    region = np.asarray(region, dtype=np.int64)
    pts = np.stack([np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)], 1)
    r = int(region.max()) + 1 if region.size else 0
    out = np.full((r, 2), np.nan)
    out[region] = pts
    if np.isnan(out).any() or not np.array_equal(out[region], pts):
        raise HierarchyError(
            "region_lat/region_lon: every region needs one centre shared by all its rows"
        )
    return tuple((float(a), float(b)) for a, b in out)


@dataclass(frozen=True)
class GeoCoverage:
    """What one GEO aggregation saw (the ``geo`` block of the round's hierarchy record).

    Attributes:
        models: L, the regional models (LEO relays) aggregated.
        regions: Distinct agro-climatic regions of the tractors they carry.
        farms: Distinct farms of those tractors.
        regions_per_model: For each regional model, how many regions its tractors are in
            (1 everywhere when passes separate regions).
        trimmed: RobustAvg's b = ⌊β·L⌋ rows dropped at each end of every coordinate.
    """

    models: int
    regions: int
    farms: int
    regions_per_model: tuple[int, ...]
    trimmed: int

    def to_json(self) -> dict[str, int | list[int]]:
        """The record block."""
        return {
            "models": self.models,
            "regions": self.regions,
            "farms": self.farms,
            "regions_per_model": list(self.regions_per_model),
            "trimmed": self.trimmed,
        }


def geo_coverage(
    clients: Sequence[Sequence[int]],
    region: np.ndarray,
    farm: np.ndarray,
    *,
    trim_fraction: float,
) -> GeoCoverage:
    """Count what a GEO step received (see :class:`GeoCoverage`).

    Args:
        clients: Per regional model, the tractors whose updates it carries.
        region: ``[T]`` region of every tractor.
        farm: ``[T]`` farm of every tractor.
        trim_fraction: RobustAvg's β.
    """
    region, farm = np.asarray(region, dtype=np.int64), np.asarray(farm, dtype=np.int64)
    per_model = [np.asarray(list(c), dtype=np.int64) for c in clients]
    every = np.concatenate(per_model) if per_model else np.zeros(0, dtype=np.int64)
    return GeoCoverage(
        models=len(per_model),
        regions=int(np.unique(region[every]).size),
        farms=int(np.unique(farm[every]).size),
        regions_per_model=tuple(int(np.unique(region[c]).size) for c in per_model),
        trimmed=trim_count(len(per_model), trim_fraction) if per_model else 0,
    )
