"""Vocabulary of paper 003's agricultural tasks: crops, soils, climates, regions, features.

Everything the generator, the real-format readers and the §3.1.1 pipeline must agree on
lives here: the crop classes and the CropScape/CDL codes that map to them, the USDA soil
texture groups, the climate zones, the three regions of 003 Table 12 (14 / 13 / 8 farms),
the geographies the synthetic fleet can be placed in (:data:`GEOGRAPHIES`) and the exact
feature columns of Task A (48, 003 Table 1) and Task B (52).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

__all__ = [
    "CDL_CROP_CODES",
    "CDL_NON_CROP_CODES",
    "CLIMATES",
    "CROPS",
    "FARMS_PER_REGION",
    "GEOGRAPHIES",
    "MAX_REGIONS",
    "REGION_LINK_SHARES",
    "TASK_A_FEATURES",
    "TASK_B_FEATURES",
    "TEXTURES",
    "AgroRegion",
    "geography_regions",
    "texture_group",
]

#: Crop classes (CropScape context bins of 003 Table 2).
CROPS: tuple[str, ...] = ("corn", "soybean", "small_grain", "cotton", "sorghum")

#: CropScape / Cropland Data Layer codes (USDA NASS legend) of each crop class.
CDL_CROP_CODES: Mapping[int, int] = {
    1: 0,
    12: 0,
    13: 0,  # corn, sweet corn, pop/ornamental corn
    5: 1,  # soybeans
    21: 2,
    22: 2,
    23: 2,
    24: 2,
    27: 2,
    28: 2,  # barley, durum/spring/winter wheat, rye, oats
    2: 3,  # cotton
    4: 4,  # sorghum
}

#: CDL codes of land that is not a crop (background, hay/pasture, fallow, forest, water,
#: developed, wetlands): ignored when a block's majority crop is taken.
CDL_NON_CROP_CODES: frozenset[int] = frozenset(
    {0, 37, 59, 60, 61, 63, 64, 65, 81, 82, 83, 87, 88, 92, 111, 112, 121, 122, 123, 124}
    | {131, 141, 142, 143, 152, 176, 190, 195}
)

#: USDA texture families used as the soil class of the two-level partition (003 §3.1.1).
TEXTURES: tuple[str, ...] = ("coarse", "medium", "fine")

#: Climate zones of the farms' context.
CLIMATES: tuple[str, ...] = ("humid", "subhumid", "semiarid")

#: Farms per region, 003 Table 12: high-, medium- and low-NQI regions.
FARMS_PER_REGION: tuple[int, ...] = (14, 13, 8)

#: Nominal 3G / 4G / 5G shares of a region's tractors. 003 §3.1.3 gives only the fleet-wide
#: 31 / 49 / 20 %; these per-region shares (our choice) give that mix with 003 Table 12's
#: farm counts and order the regions by connectivity as its average NQIs (0.81/0.63/0.41).
REGION_LINK_SHARES: tuple[tuple[float, float, float], ...] = (
    (0.10, 0.50, 0.40),
    (0.30, 0.55, 0.15),
    (0.70, 0.30, 0.00),
)


class AgroRegion(NamedTuple):
    """One agro-climatic region of a geography.

    Attributes:
        name: Short name (documentation and reports).
        lat, lon: Centre, decimal degrees.
        climate: Index into :data:`CLIMATES`: the zone its farms lie in (w.p. 0.75; else a
            neighbouring zone), which sets soils, weather, crop mix and irrigation.
        link: Index into :data:`REGION_LINK_SHARES`: its tractors' 3G/4G/5G mix (high,
            medium or low NQI).
    """

    name: str
    lat: float
    lon: float
    climate: int
    link: int


#: Where the synthetic fleet's regions lie (the dataset's ``geography`` parameter).
#:
#: ``paper3`` — 003 Table 12's three regions (high / medium / low NQI; humid / subhumid /
#: semiarid) at Ames IA, Salina KS and Limon CO. They are 490–900 km apart, inside one LEO
#: footprint, so one pass carries drivers of all three.
#:
#: ``world`` — thirteen agro-climatic regions on six continents (our choice, in this order;
#: a geography of N regions takes the first N). Every pair of centres is ≥ 3,600 km apart
#: on the great circle (the closest: North China Plain – Punjab, 3,605 km), so that no LEO
#: pass covers farms of two regions: at 003's 550 km altitude and 10° elevation mask a
#: satellite's footprint has a ground radius ρ = R·(arccos(R·cos ε / (R + h)) − ε) ≈
#: 1,664 km, two ground points see it at once only when they are ≤ 2ρ ≈ 3,329 km apart, and
#: farms lie within ~3σ = 120 km of their centre (``farm_spread_km`` 40), so centres need
#: ≥ 3,329 + 240 ≈ 3,570 km. The first eight lie where a LEO overhead also sees 003's GEO
#: at 98° W (the default ``geo_longitude_deg``), so their passes are relayed as they end,
#: one region per regional model; a LEO over the last five cannot reach that GEO and carries
#: their drivers' models until it can, possibly over a second region (the round record's
#: ``hierarchy.geo.regions_per_model`` shows it). Climate zone and connectivity per region
#: are our reading of each region (Köppen class; rural mobile coverage).
GEOGRAPHIES: Mapping[str, tuple[AgroRegion, ...]] = {
    "paper3": (
        AgroRegion("corn_belt_ames_ia", 42.03, -93.62, 0, 0),
        AgroRegion("central_plains_salina_ks", 38.84, -97.61, 1, 1),
        AgroRegion("semiarid_west_limon_co", 39.26, -103.69, 2, 2),
    ),
    "world": (
        AgroRegion("us_corn_belt", 42.03, -93.62, 0, 0),
        AgroRegion("argentine_pampas", -33.89, -60.57, 0, 1),
        AgroRegion("beauce_france", 48.20, 1.80, 1, 0),
        AgroRegion("llanos_colombia", 4.50, -72.00, 0, 2),
        AgroRegion("matanuska_alaska", 61.60, -149.10, 1, 2),
        AgroRegion("groundnut_basin_senegal", 14.50, -16.00, 2, 2),
        AgroRegion("canterbury_new_zealand", -43.50, 172.00, 1, 1),
        AgroRegion("central_maui_hawaii", 20.80, -156.30, 2, 1),
        AgroRegion("north_china_plain", 38.04, 114.51, 1, 0),
        AgroRegion("punjab_india", 30.90, 75.85, 2, 1),
        AgroRegion("free_state_south_africa", -28.50, 26.50, 2, 1),
        AgroRegion("central_java", -7.50, 110.50, 0, 1),
        AgroRegion("ethiopian_highlands", 9.00, 38.70, 1, 2),
    ),
}

#: The most regions any geography has (the bound on a field block's region index).
MAX_REGIONS = max(len(g) for g in GEOGRAPHIES.values())


def geography_regions(name: str, n: int) -> tuple[AgroRegion, ...]:
    """The first ``n`` regions of geography ``name`` (ValueError naming what to change)."""
    if name not in GEOGRAPHIES:
        raise ValueError(f"geography {name!r} is not one of {sorted(GEOGRAPHIES)}")
    regions = GEOGRAPHIES[name]
    if not 1 <= n <= len(regions):
        raise ValueError(
            f"geography {name!r} has {len(regions)} regions but {n} were asked for: give "
            f"1 to {len(regions)} entries in farms_per_region"
        )
    return regions[:n]


def _one_hot(prefix: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{prefix}_{n}" for n in names)


#: Task A (nutrient regression) columns: 48 (003 Table 1).
TASK_A_FEATURES: tuple[str, ...] = (
    # soil survey, SSURGO 0–30 cm (NRCS Soil Data Mart, 003 Table 2)
    "soil_ph",
    "soil_om_pct",
    "soil_cec",
    "sand_pct",
    "silt_pct",
    "clay_pct",
    "awc",
    "bulk_density",
    # nutrient probes / soil tests
    "soil_p_ppm",
    "soil_k_ppm",
    "no3_preseason_ppm",
    # weekly sensors and weather
    "no3_n_ppm",
    "soil_moisture",
    "air_temp_mean_c",
    "rain_7d_mm",
    "rain_28d_mm",
    "gdd_cum",
    # vegetation indices (cloud-masked weekly means) and their season-to-date statistics
    "ndvi_t",
    "ndvi_t1",
    "ndvi_t2",
    "evi_t",
    "evi_t1",
    "evi_t2",
    "ndvi_max_to_date",
    "ndvi_mean_4w",
    "evi_mean_4w",
    "ndvi_slope_3w",
    # reflectance at week t
    "red_t",
    "nir_t",
    "red_edge_t",
    "swir1_t",
    # management log and context
    "yield_goal_t_ha",
    "n_applied_kg_ha",
    "prev_legume",
    "irrigated",
    "week",
    "elevation_m",
    *_one_hot("texture", TEXTURES),
    *_one_hot("crop", CROPS),
    *_one_hot("climate", CLIMATES),
)

#: Task B (crop stress) columns: 52 (003 Table 1), all from weeks t−2..t (003 §3.1.1).
TASK_B_FEATURES: tuple[str, ...] = (
    # lagged indices, deltas and 3-week rolling statistics
    "ndvi_t",
    "ndvi_t1",
    "ndvi_t2",
    "evi_t",
    "evi_t1",
    "evi_t2",
    "ndvi_d1",
    "ndvi_d2",
    "evi_d1",
    "evi_d2",
    "ndvi_mean_3w",
    "ndvi_std_3w",
    "ndvi_min_3w",
    "evi_mean_3w",
    # reflectance at week t and the clear-sky share of each week's acquisitions
    "blue_t",
    "green_t",
    "red_t",
    "red_edge_t",
    "nir_t",
    "swir1_t",
    "clear_t",
    "clear_t1",
    "clear_t2",
    # weather and field sensors over t−2..t
    "air_temp_max_c",
    "air_temp_mean_c",
    "rain_7d_mm",
    "rain_21d_mm",
    "soil_moisture",
    "soil_moisture_mean_3w",
    "vpd_kpa",
    "leaf_wetness_h",
    "gdd_3w",
    # soil survey and context
    "soil_ph",
    "soil_om_pct",
    "soil_cec",
    "sand_pct",
    "clay_pct",
    "awc",
    "week",
    "irrigated",
    "elevation_m",
    *_one_hot("texture", TEXTURES),
    *_one_hot("crop", CROPS),
    *_one_hot("climate", CLIMATES),
)


def texture_group(sand_pct: np.ndarray, clay_pct: np.ndarray) -> np.ndarray:
    """``[n]`` int64 index into :data:`TEXTURES` from sand and clay percentages.

    A coarsening of the USDA texture triangle into its three families: *fine* = clay ≥ 27 %
    (clay loam, silty clay loam and the clays), *coarse* = sand ≥ 52 % with clay < 20 %
    (sands, loamy sands, sandy loams), *medium* = the rest (loam, silt loam, silt, sandy
    clay loam).
    """
    sand, clay = np.asarray(sand_pct, dtype=np.float64), np.asarray(clay_pct, dtype=np.float64)
    out = np.ones(sand.shape, dtype=np.int64)
    out[(sand >= 52.0) & (clay < 20.0)] = 0
    out[clay >= 27.0] = 2
    return out
