"""The tractor fleet of paper 003's hierarchy: who, where, which model, how capable.

One row per tractor, and the row index *is* the federated client id: the fleet is built
from the same per-block (or per-sample) ``tractor`` / ``farm`` / ``region`` columns as the
``synthetic_agri`` / ``agri_files`` datasets (:mod:`geofl.data.agri`), so tractor ``i`` of
the fleet is client ``i`` of ``partition: {name: group, key: tractor}``.

What the agri data does not carry is drawn here, seeded (generators
``(seed, "hierarchy_fleet", purpose)``):

* **Locations** (Alg. 2's λ_i). 003 gives no coordinates; its three regions (Table 12:
  high / medium / low NQI, humid / subhumid / semiarid) are placed at documented centres
  (:data:`REGION_CENTRES`): the US Corn Belt (Ames, Iowa), the central Plains (Salina,
  Kansas) and the semi-arid West (Limon, eastern Colorado) — all three inside one LEO
  footprint. The ``world`` geography (:data:`~geofl.data.agri.catalog.GEOGRAPHIES`) puts up
  to thirteen regions ≥ 3,600 km apart instead, so that LEO passes separate them
  (:mod:`geofl.hierarchy.geography`). Each farm's centre is the region centre plus an
  isotropic Gaussian offset of ``farm_spread_km`` (σ, per axis, in a local tangent plane),
  each tractor its farm centre plus ``tractor_spread_km``.
* **Capability reports** (§2.1.4 ρ inputs, raw units): compute GFLOPS ~
  LogNormal(ln 500, 0.5); energy efficiency GFLOPS/W ~ LogNormal(ln 20, 0.4); latency ms ~
  Uniform over the tractor's nominal link range of 003 Table 3 (3G 150–500, 4G 60–150,
  5G 20–60; unknown profile: 4G); concurrency (parallel streams) ~ Uniform{1, …, 8}.
* **Model type** M_i (Alg. 2): the index of the task in :data:`MODEL_TYPES` — one task per
  run gives one model-type group; a per-tractor array mixes tasks.

Context bins (for H_l, 003 §2.2.4): bin = (crop · |textures| + texture) · |climates| +
climate; a tractor's bin is the most frequent bin of its rows (ties: lowest bin).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geofl.data.agri.catalog import (
    CLIMATES,
    CROPS,
    FARMS_PER_REGION,
    GEOGRAPHIES,
    TEXTURES,
    geography_regions,
)
from geofl.data.agri.synthetic import generate_blocks
from geofl.errors import HierarchyError
from geofl.rng import numpy_generator

__all__ = [
    "CAPABILITY_FIELDS",
    "KM_PER_DEGREE",
    "LINK_LATENCY_MS",
    "MODEL_TYPES",
    "REGION_CENTRES",
    "Fleet",
    "check_locations",
    "context_bins",
    "fleet_from_context",
    "synthetic_fleet",
]

#: Model types M_i (Alg. 2): 003's Task A (nutrient regression) and Task B (crop stress).
MODEL_TYPES: tuple[str, ...] = ("nutrient", "stress")
#: Columns of :attr:`Fleet.capability` (003 §2.1.4: x_p, x_e, x_l, x_c before normalisation).
CAPABILITY_FIELDS: tuple[str, ...] = (
    "compute_gflops",
    "gflops_per_watt",
    "latency_ms",
    "concurrency",
)
#: (lat, lon) degrees of each region's centre, in 003 Table 12's order (high, medium, low NQI):
#: Ames IA (Corn Belt, humid), Salina KS (central Plains, subhumid), Limon CO (semi-arid West).
#: (The ``paper3`` geography of :data:`~geofl.data.agri.catalog.GEOGRAPHIES`.)
REGION_CENTRES: tuple[tuple[float, float], ...] = tuple(
    (r.lat, r.lon) for r in GEOGRAPHIES["paper3"]
)
#: Nominal one-way latency range (ms) of the 3G / 4G / 5G profiles, 003 Table 3.
LINK_LATENCY_MS: tuple[tuple[float, float], ...] = ((150.0, 500.0), (60.0, 150.0), (20.0, 60.0))
#: Kilometres per degree of latitude on the mean sphere (R = 6371.0088 km).
KM_PER_DEGREE = 6371.0088 * np.pi / 180.0

_NAME = "hierarchy_fleet"


@dataclass(frozen=True)
class Fleet:
    """One row per tractor; the row index is the client id.

    Attributes:
        farm: ``[T]`` int64 farm index.
        region: ``[T]`` int64 geographic region (003 Table 12).
        lat: ``[T]`` float64 latitude, degrees in [−90, 90].
        lon: ``[T]`` float64 longitude, degrees in [−180, 180].
        model_type: ``[T]`` int64 task / model schema M_i (index into :data:`MODEL_TYPES`).
        capability: ``[T, 4]`` float64 raw reports, columns :data:`CAPABILITY_FIELDS`.
        context_bin: ``[T]`` int64 (crop × soil texture × climate zone) bin, for H_l.
        link_profile: ``[T]`` int64 nominal uplink 0 = 3G, 1 = 4G, 2 = 5G, −1 unknown.

    Raises:
        HierarchyError: on ragged columns, a location out of range or a non-finite report.
    """

    farm: np.ndarray
    region: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    model_type: np.ndarray
    capability: np.ndarray
    context_bin: np.ndarray
    link_profile: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.farm).shape[0] if np.asarray(self.farm).ndim == 1 else -1
        for name in ("farm", "region", "lat", "lon", "model_type", "context_bin", "link_profile"):
            if np.asarray(getattr(self, name)).shape != (t,):
                raise HierarchyError(f"fleet.{name}: expected one entry per tractor ({t})")
        if np.asarray(self.capability).shape != (t, len(CAPABILITY_FIELDS)):
            raise HierarchyError(
                f"fleet.capability: expected shape ({t}, {len(CAPABILITY_FIELDS)}), got "
                f"{np.asarray(self.capability).shape}"
            )
        if not np.isfinite(self.capability).all():
            raise HierarchyError("fleet.capability: reports must be finite")
        check_locations(self.lat, self.lon, field="fleet")

    @property
    def num_tractors(self) -> int:
        """T."""
        return int(np.asarray(self.farm).shape[0])


def check_locations(lat: np.ndarray, lon: np.ndarray, *, field: str) -> None:
    """Raise :class:`HierarchyError` naming ``field`` unless every (lat, lon) is on Earth."""
    lat, lon = np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)
    for name, v, bound in (("lat", lat, 90.0), ("lon", lon, 180.0)):
        bad = np.flatnonzero(~(np.abs(v) <= bound))  # also catches NaN
        if bad.size:
            i = int(bad[0])
            raise HierarchyError(
                f"{field}.{name}[{i}] = {float(v.flat[i])!r} is outside [−{bound:g}, {bound:g}] "
                "degrees; give latitude/longitude in decimal degrees"
            )


def context_bins(crop: np.ndarray, texture: np.ndarray, climate: np.ndarray) -> np.ndarray:
    """``[N]`` int64 bin of (crop × soil texture × climate zone), 003 §2.2.4's H_l bins."""
    crop, texture, climate = (np.asarray(a, dtype=np.int64) for a in (crop, texture, climate))
    for name, v, size in (
        ("crop", crop, len(CROPS)),
        ("texture", texture, len(TEXTURES)),
        ("climate", climate, len(CLIMATES)),
    ):
        if v.size and (v.min() < 0 or v.max() >= size):
            raise HierarchyError(f"context.{name}: index outside 0..{size - 1}")
    return np.asarray((crop * len(TEXTURES) + texture) * len(CLIMATES) + climate)


def _per_tractor(tractor: np.ndarray, values: np.ndarray, name: str, t: int) -> np.ndarray:
    """The single value of ``values`` each tractor's rows share (HierarchyError if not)."""
    out = np.full(t, -1, dtype=np.int64)
    out[tractor] = values
    if not np.array_equal(out[tractor], values):
        i = int(tractor[np.flatnonzero(out[tractor] != values)[0]])
        raise HierarchyError(f"context.{name}: tractor {i} has rows with different {name}s")
    return out


def _offsets_km(rng: np.random.Generator, n: int, sigma_km: float) -> np.ndarray:
    return rng.normal(0.0, sigma_km, (n, 2)) if sigma_km > 0 else np.zeros((n, 2))


def _move(lat: np.ndarray, lon: np.ndarray, km: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points ``km`` ([N, 2] north, east) away from (lat, lon) in the local tangent plane."""
    new_lat = np.clip(lat + km[:, 0] / KM_PER_DEGREE, -89.0, 89.0)
    new_lon = lon + km[:, 1] / (KM_PER_DEGREE * np.cos(np.radians(new_lat)))
    return new_lat, (new_lon + 180.0) % 360.0 - 180.0


def _capabilities(rng: np.random.Generator, profile: np.ndarray) -> np.ndarray:
    t = profile.size
    lo, hi = np.asarray(LINK_LATENCY_MS)[np.where(profile < 0, 1, profile)].T
    return np.stack(
        [
            rng.lognormal(np.log(500.0), 0.5, t),
            rng.lognormal(np.log(20.0), 0.4, t),
            rng.uniform(lo, hi),
            rng.integers(1, 9, t).astype(np.float64),
        ],
        axis=1,
    )


def fleet_from_context(
    tractor: np.ndarray,
    farm: np.ndarray,
    region: np.ndarray,
    crop: np.ndarray,
    texture: np.ndarray,
    climate: np.ndarray,
    link_profile: np.ndarray,
    *,
    seed: int = 0,
    task: str = "stress",
    model_type: Sequence[int] | np.ndarray | None = None,
    region_centres: Sequence[tuple[float, float]] = REGION_CENTRES,
    farm_spread_km: float = 40.0,
    tractor_spread_km: float = 1.5,
) -> Fleet:
    """The fleet of the tractors named by per-row (block or sample) context columns.

    Takes the metadata columns of the agri datasets as they are (``dataset.metadata``:
    ``tractor``, ``farm``, ``region``, ``crop``, ``soil`` as ``texture``, ``climate``,
    ``link_profile``) and draws locations and capability reports (module docstring).

    Args:
        tractor, farm, region, crop, texture, climate, link_profile: ``[N]`` int per row;
            tractor ids must be 0 … T−1, each with at least one row.
        seed: Seed of the drawn locations and reports.
        task: Model type of every tractor (a name in :data:`MODEL_TYPES`) …
        model_type: … unless this ``[T]`` array gives one per tractor.
        region_centres: (lat, lon) of each region's centre.
        farm_spread_km, tractor_spread_km: σ of farm and tractor location offsets.

    Raises:
        HierarchyError: on inconsistent rows, a missing tractor, a bad task or location.
    """
    tractor, t = _tractor_ids(tractor)
    farm_t = _per_tractor(tractor, np.asarray(farm, dtype=np.int64), "farm", t)
    region_t = _per_tractor(tractor, np.asarray(region, dtype=np.int64), "region", t)
    profile_t = _per_tractor(tractor, np.asarray(link_profile, dtype=np.int64), "link_profile", t)
    centres = _centres(region_centres, region_t)
    bins = context_bins(crop, texture, climate)
    n_bins = len(CROPS) * len(TEXTURES) * len(CLIMATES)
    counts = np.zeros((t, n_bins), dtype=np.int64)
    np.add.at(counts, (tractor, bins), 1)
    lat, lon = _locations(seed, farm_t, region_t, centres, farm_spread_km, tractor_spread_km)
    return Fleet(
        farm=farm_t,
        region=region_t,
        lat=lat,
        lon=lon,
        model_type=_model_types(task, model_type, t),
        capability=_capabilities(numpy_generator(seed, _NAME, "capability"), profile_t),
        context_bin=np.asarray(np.argmax(counts, axis=1), dtype=np.int64),
        link_profile=profile_t,
    )


def _tractor_ids(tractor: np.ndarray) -> tuple[np.ndarray, int]:
    """``[N]`` int64 tractor ids and their count T, checked to be 0 … T−1, each with a row."""
    tractor = np.asarray(tractor, dtype=np.int64)
    if tractor.size == 0 or tractor.min() < 0:
        raise HierarchyError("context.tractor: need ≥ 1 row and tractor ids ≥ 0")
    t = int(tractor.max()) + 1
    seen = np.bincount(tractor, minlength=t)
    if not seen.all():
        raise HierarchyError(f"context.tractor: tractor {int(np.argmin(seen))} has no rows")
    return tractor, t


def _centres(region_centres: Sequence[tuple[float, float]], region_t: np.ndarray) -> np.ndarray:
    """``[R, 2]`` float64 (lat, lon) of the region centres, checked to be valid locations
    and to cover every region id in ``region_t``."""
    centres = np.asarray(region_centres, dtype=np.float64).reshape(-1, 2)
    check_locations(centres[:, 0], centres[:, 1], field="region_centres")
    if region_t.min() < 0 or region_t.max() >= centres.shape[0]:
        raise HierarchyError(
            f"region_centres: {centres.shape[0]} centres but region ids up to {region_t.max()}"
        )
    return centres


def _locations(
    seed: int,
    farm_t: np.ndarray,
    region_t: np.ndarray,
    centres: np.ndarray,
    farm_spread_km: float,
    tractor_spread_km: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``[T]`` latitudes and longitudes: each farm offset from its region's centre (σ
    ``farm_spread_km``), each tractor from its farm (σ ``tractor_spread_km``)."""
    n_farms = int(farm_t.max()) + 1
    farm_region = np.zeros(n_farms, dtype=np.int64)
    farm_region[farm_t] = region_t
    f_lat, f_lon = _move(
        centres[farm_region, 0],
        centres[farm_region, 1],
        _offsets_km(numpy_generator(seed, _NAME, "farm_location"), n_farms, farm_spread_km),
    )
    rng_t = numpy_generator(seed, _NAME, "tractor_location")
    return _move(f_lat[farm_t], f_lon[farm_t], _offsets_km(rng_t, len(farm_t), tractor_spread_km))


def _model_types(task: str, model_type: Sequence[int] | np.ndarray | None, t: int) -> np.ndarray:
    if model_type is not None:
        m = np.asarray(model_type, dtype=np.int64)
        if m.shape != (t,) or m.min() < 0:
            raise HierarchyError(f"model_type: expected {t} non-negative ints, got {m.shape}")
        return m
    if task not in MODEL_TYPES:
        raise HierarchyError(f"task: {task!r} is not one of {list(MODEL_TYPES)}")
    return np.full(t, MODEL_TYPES.index(task), dtype=np.int64)


def synthetic_fleet(
    seed: int = 0,
    *,
    task: str = "stress",
    num_blocks: int = 5168,
    num_tractors: int = 120,
    farms_per_region: Sequence[int] = FARMS_PER_REGION,
    region_centres: Sequence[tuple[float, float]] | None = None,
    farm_spread_km: float = 40.0,
    tractor_spread_km: float = 1.5,
    geography: str = "paper3",
) -> Fleet:
    """The fleet of ``synthetic_agri`` with the same ``seed``, sizes and ``geography`` (003
    Table 1, 12).

    Draws the same field blocks as the dataset (:func:`geofl.data.agri.synthetic.
    generate_blocks`, ~0.6 s at the default size), so tractor ``i`` here is client ``i``
    there: 120 tractors of 35 farms in three regions (14 / 13 / 8 farms). Locations and
    reports are drawn with generators of ``seed`` as in :func:`fleet_from_context`, around
    ``region_centres`` (None: the geography's centres, :data:`REGION_CENTRES` for
    ``paper3``).

    Raises:
        ValueError: when ``geography`` is unknown or has fewer regions than
            ``farms_per_region`` has entries.
    """
    if region_centres is None:
        regions = geography_regions(geography, len(farms_per_region))
        region_centres = [(r.lat, r.lon) for r in regions]
    blocks = generate_blocks(
        seed,
        num_blocks=num_blocks,
        num_tractors=num_tractors,
        farms_per_region=tuple(farms_per_region),
        geography=geography,
    )
    return fleet_from_context(
        blocks.tractor,
        blocks.farm,
        blocks.region,
        blocks.crop,
        blocks.texture,
        blocks.climate,
        blocks.link_profile,
        seed=seed,
        task=task,
        region_centres=region_centres,
        farm_spread_km=farm_spread_km,
        tractor_spread_km=tractor_spread_km,
    )
