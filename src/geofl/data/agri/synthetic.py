"""Seeded farms → tractors → field blocks with weekly phenology, soil and sensors (003 §3.1).

The public sources of 003 Table 2 (CropScape, NRCS soil data, MODIS/Sentinel-2 indices)
cannot be reached here, so :func:`generate_blocks` draws a
:class:`~geofl.data.agri.tables.FieldBlocks` with the same structure, which then goes
through the same §3.1.1 pipeline as real files (:mod:`geofl.data.agri.pipeline`).

Generative model (generators ``(seed, "synthetic_agri", purpose)``):

* **Fleet** — 35 farms in three regions (14 / 13 / 8, 003 Table 12); farm sizes
  LogNormal(0, 0.6); 120 tractors (003 Table 1): one per farm, the rest and the blocks
  dealt by size (largest remainder). A farm lies in its region's climate zone (humid,
  subhumid, semiarid) w.p. 0.75, else in a neighbouring one. Each tractor has a nominal
  3G/4G/5G uplink drawn from its region's shares (:data:`REGION_LINK_SHARES`). A region's
  zone and shares come from the geography (:data:`~geofl.data.agri.catalog.GEOGRAPHIES`:
  003's three regions, or agro-climatic regions across continents), so regions differ in
  data exactly as 003's three do: by zone (soils, weather, crops, irrigation, elevation),
  connectivity and per-farm effects.
* **Blocks** — crop from the farm's Dirichlet crop mix (zone suitability), soil from one of
  the farm's three map units (texture, OM, pH by zone; CEC, AWC, bulk density from
  pedotransfer-like rules). Two-level partition (003 §3.1.1 "Federated Partitioning"):
  a farm's blocks, ordered by (crop, texture class), are cut into as many contiguous
  near-equal runs as the farm has tractors, so tractors differ by crop and soil.
* **Weather and sensors** — weekly farm temperature (seasonal arc + AR(1)), gamma rain;
  per block a soil-moisture bucket, VPD, leaf wetness, soil temperature; nitrate from
  mineralisation, fertiliser (pre-plant and side-dress log), crop uptake and leaching.
* **Phenology** — canopy cover as a double logistic per crop (green-up / senescence week
  ± 1) times a vigour from water, organic matter and pH; weekly stress events with a
  hazard rising with heat, drought and leaf wetness dip the canopy over five weeks
  (0.55, 1, 0.75, 0.45, 0.2 of the event's depth U(0.15, 0.45)).
* **Imagery** — two acquisitions a week: linear soil/vegetation mixing of six surface
  reflectances, a cloud fraction (cloudy w.p. ``cloud_rate``: U(0.3, 1); else thin haze
  Beta(1, 20)) mixing in bright cloud, sensor noise; NDVI and EVI from the bands.
* **Yield** — potential per crop × vigour^1.2 × (1 − half the season's canopy loss) ×
  LogNormal(0, 0.07); the yield goal is the farm's expectation without the season's
  weather and stress.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from geofl.data.agri.catalog import (
    CROPS,
    FARMS_PER_REGION,
    REGION_LINK_SHARES,
    AgroRegion,
    geography_regions,
    texture_group,
)
from geofl.data.agri.pipeline import CROP_N_PER_T, uptake_fraction, weekly_composite
from geofl.data.agri.tables import FieldBlocks
from geofl.rng import numpy_generator

__all__ = ["generate_blocks", "largest_remainder", "two_level_tractors"]

_NAME = "synthetic_agri"
#: Crop suitability per climate zone (rows: humid, subhumid, semiarid; columns: CROPS).
_SUITABILITY = np.array(
    [[3.0, 3.0, 1.0, 0.3, 0.3], [2.0, 1.5, 2.0, 1.0, 1.0], [0.5, 0.3, 3.0, 2.0, 2.5]]
)
#: Per zone: sand %, clay %, OM %, pH, season temperature °C, weekly rain mm.
_ZONE = np.array(
    [
        [30.0, 26.0, 3.5, 6.2, 19.0, 28.0],
        [40.0, 22.0, 2.5, 6.8, 21.0, 20.0],
        [56.0, 15.0, 1.2, 7.8, 23.0, 11.0],
    ]
)
_GREEN_UP = np.array([6.0, 8.0, 2.0, 8.0, 7.0])
_SENESCE = np.array([19.0, 20.0, 12.0, 22.0, 19.0])
_POTENTIAL_T_HA = np.array([11.5, 3.6, 5.0, 1.4, 6.5])
#: Surface reflectance of bare soil, green canopy and cloud: blue, green, red, red-edge,
#: NIR, SWIR1.
_SOIL = np.array([0.08, 0.11, 0.14, 0.18, 0.22, 0.30])
_LEAF = np.array([0.03, 0.08, 0.035, 0.25, 0.48, 0.20])
_CLOUD = np.array([0.45, 0.45, 0.45, 0.45, 0.45, 0.35])
_DIP = np.array([0.55, 1.0, 0.75, 0.45, 0.2])
#: Relative weight of the per-acquisition view/atmosphere residual on each band (NIR most).
_VIEW = np.array([0.3, 0.3, 0.3, 0.6, 1.0, 0.6])


class _Fleet(NamedTuple):
    region: np.ndarray  # [F]
    zone: np.ndarray  # [F]
    crop_mix: np.ndarray  # [F, crops]
    tractors: np.ndarray  # [F] tractors per farm
    blocks: np.ndarray  # [F] blocks per farm
    profile: np.ndarray  # [T] nominal uplink per tractor


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """``[n]`` int64 non-negative counts summing to ``total``, proportional to ``weights``."""
    share = np.asarray(weights, dtype=np.float64) / float(np.sum(weights)) * total
    out = np.floor(share).astype(np.int64)
    order = np.argsort(-(share - out), kind="stable")
    out[order[: total - int(out.sum())]] += 1
    return out


def _fleet(
    seed: int,
    farms_per_region: tuple[int, ...],
    tractors: int,
    blocks: int,
    regions: tuple[AgroRegion, ...],
) -> _Fleet:
    rng = numpy_generator(seed, _NAME, "fleet")
    region = np.repeat(np.arange(len(farms_per_region)), farms_per_region)
    climate = np.array([r.climate for r in regions], dtype=np.int64)
    link = np.array([r.link for r in regions], dtype=np.int64)
    f = region.size
    size = rng.lognormal(0.0, 0.6, f)
    per_farm_t = 1 + largest_remainder(size, tractors - f)
    per_farm_b = per_farm_t + largest_remainder(size, blocks - int(per_farm_t.sum()))
    zone = climate[region]
    moved = rng.random(f) < 0.25
    zone = np.where(moved, np.clip(zone + rng.choice([-1, 1], f), 0, 2), zone)
    mix = np.stack([rng.dirichlet(_SUITABILITY[z]) for z in zone])
    shares = np.asarray(REGION_LINK_SHARES)[link[np.repeat(region, per_farm_t)]]
    profile = (rng.random((shares.shape[0], 1)) > np.cumsum(shares, axis=1)).sum(axis=1)
    return _Fleet(region, zone, mix, per_farm_t, per_farm_b, np.minimum(profile, 2))


def two_level_tractors(
    farm: np.ndarray, crop: np.ndarray, texture: np.ndarray, tractors_per_farm: np.ndarray
) -> np.ndarray:
    """003 §3.1.1's two-level partition: ``[B]`` int64 global tractor of every block.

    (a) tractors are grouped by farm (farm f owns tractors ``offset_f … offset_f + T_f −
    1``); (b) a farm's blocks, ordered by (crop, texture class, block index), are cut into
    ``T_f`` contiguous near-equal runs (``numpy.array_split``), so each tractor holds one or
    a few (crop, soil) strata: non-IID by crop and soil, balanced in size.
    """
    out = np.empty(farm.size, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(tractors_per_farm)])
    for f in range(tractors_per_farm.size):
        idx = np.flatnonzero(farm == f)
        idx = idx[np.lexsort((idx, texture[idx], crop[idx]))]
        for t, run in enumerate(np.array_split(idx, int(tractors_per_farm[f]))):
            out[run] = offsets[f] + t
    return out


def _soils(rng: np.random.Generator, zone: np.ndarray) -> dict[str, np.ndarray]:
    """Soil-survey properties of map units in climate ``zone`` (``[U]`` each)."""
    z = _ZONE[zone]
    u = zone.size
    sand = np.clip(z[:, 0] + rng.normal(0, 14, u), 5, 90)
    clay = np.clip(z[:, 1] + rng.normal(0, 8, u), 3, 60)
    clay = np.minimum(clay, 95 - sand)
    om = z[:, 2] * rng.lognormal(0, 0.3, u)
    silt = 100 - sand - clay
    return {
        "soil_ph": np.clip(z[:, 3] + rng.normal(0, 0.4, u), 4.5, 8.8),
        "soil_om_pct": om,
        "soil_cec": np.clip(0.55 * clay + 2.5 * om + rng.normal(0, 2, u), 2, 60),
        "sand_pct": sand,
        "silt_pct": silt,
        "clay_pct": clay,
        "awc": np.clip(0.04 + 0.0022 * silt + 0.0012 * clay + 0.01 * om, 0.04, 0.25),
        "bulk_density": np.clip(
            1.62 - 0.004 * clay - 0.05 * om + rng.normal(0, 0.04, u), 1.0, 1.75
        ),
    }


def _blocks(seed: int, fleet: _Fleet) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Farm, crop and soil (per block) of every block."""
    rng = numpy_generator(seed, _NAME, "blocks")
    farms = fleet.region.size
    units = _soils(rng, np.repeat(fleet.zone, 3))  # three map units per farm
    farm = np.repeat(np.arange(farms), fleet.blocks)
    cum = np.cumsum(fleet.crop_mix, axis=1)[farm]
    crop = np.minimum((rng.random((farm.size, 1)) > cum).sum(axis=1), len(CROPS) - 1)
    unit = farm * 3 + rng.integers(0, 3, farm.size)
    return farm, crop, {k: v[unit] for k, v in units.items()}


def _weather(seed: int, fleet: _Fleet, weeks: int) -> tuple[np.ndarray, np.ndarray]:
    """``[F, W]`` weekly mean temperature (°C) and rain (mm) of every farm."""
    rng = numpy_generator(seed, _NAME, "weather")
    f = fleet.zone.size
    z = _ZONE[fleet.zone]
    arc = 5.0 * np.sin(np.pi * (np.arange(weeks) + 2) / (weeks + 4))
    ar = np.zeros((f, weeks))
    shocks = rng.normal(0, 1.6, (f, weeks))
    for t in range(weeks):
        ar[:, t] = 0.6 * (ar[:, t - 1] if t else 0.0) + shocks[:, t]
    temp = z[:, 4:5] - 2.5 + arc + ar + rng.normal(0, 0.8, (f, 1))
    rain = rng.gamma(0.8, z[:, 5:6] / 0.8, (f, weeks))
    return temp, rain


def _sensors(
    rng: np.random.Generator,
    temp: np.ndarray,
    rain: np.ndarray,
    soil: dict[str, np.ndarray],
    irrigated: np.ndarray,
) -> dict[str, np.ndarray]:
    """Weekly block sensors from the farm weather (``[B, W]`` each)."""
    b, w = temp.shape
    tmean = temp + rng.normal(0, 0.5, (b, w))
    tmax = tmean + 8.0 + rng.normal(0, 1.5, (b, w))
    rain = rain * rng.lognormal(0, 0.15, (b, w))
    moist = np.empty((b, w))
    level = 0.12 + 0.4 * soil["awc"]
    for t in range(w):
        gain = 0.004 * rain[:, t] - 0.004 * np.maximum(tmax[:, t] - 24.0, 0.0)
        level = np.clip(0.7 * level + 0.3 * (0.07 + 0.6 * soil["awc"]) + gain, 0.03, 0.45)
        level = np.where(irrigated > 0, np.maximum(level, 0.2), level)
        moist[:, t] = level
    rh = np.clip(0.4 + 0.006 * rain + 0.6 * (moist - 0.1) + rng.normal(0, 0.05, (b, w)), 0.1, 0.98)
    vpd = 0.611 * np.exp(17.27 * tmean / (tmean + 237.3)) * (1 - rh)
    return {
        "air_temp_mean_c": tmean,
        "air_temp_max_c": tmax,
        "rain_mm": rain,
        "soil_moisture": moist + rng.normal(0, 0.01, (b, w)),
        "soil_temp_c": tmean - 1.0 + rng.normal(0, 0.7, (b, w)),
        "vpd_kpa": vpd,
        "leaf_wetness_h": np.clip(
            2.0 + 0.25 * rain + 8.0 * rh - 4.0 + rng.normal(0, 1.5, (b, w)), 0, 24
        ),
    }


def _canopy(
    rng: np.random.Generator,
    crop: np.ndarray,
    vigour: np.ndarray,
    s: dict[str, np.ndarray],
    stress_scale: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``[B, W]`` canopy cover after stress dips, and the season's relative canopy loss."""
    b, w = s["soil_moisture"].shape
    t = np.arange(w, dtype=np.float64)[None, :]
    g = _GREEN_UP[crop][:, None] + rng.uniform(-1, 1, (b, 1))
    sen = _SENESCE[crop][:, None] + rng.uniform(-1, 1, (b, 1))
    fc = vigour[:, None] * (1 / (1 + np.exp(-(t - g) / 1.5)) - 1 / (1 + np.exp(-(t - sen) / 1.8)))
    fc = np.clip(fc, 0.0, 1.0)
    heat = np.maximum(s["air_temp_max_c"] - 31.0, 0.0)
    drought = np.maximum(0.14 - s["soil_moisture"], 0.0)
    wet = np.maximum(s["leaf_wetness_h"] - 10.0, 0.0)
    z = -3.6 + np.log(stress_scale) + 0.45 * heat + 25.0 * drought + 0.15 * wet
    event = (rng.random((b, w)) < 1 / (1 + np.exp(-z))) & (fc > 0.2)
    depth = event * rng.uniform(0.15, 0.45, (b, w))
    dip = np.zeros((b, w))
    for k, share in enumerate(_DIP):
        dip[:, k:] += share * depth[:, : w - k]
    eff = fc * (1 - np.minimum(dip, 0.8))
    loss = (fc - eff).sum(axis=1) / np.maximum(fc.sum(axis=1), 1e-9)
    return eff, loss


def _imagery(
    rng: np.random.Generator,
    fc: np.ndarray,
    om: np.ndarray,
    cloud_rate: float,
    acq: int,
    view_noise: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Per acquisition ``[B, W, A, 8]`` (NDVI, EVI, six bands) and cloud fraction."""
    b, w = fc.shape
    soil = _SOIL * (1.0 - 0.04 * np.minimum(om, 6.0))[:, None]  # darker with organic matter
    surface = fc[..., None] * _LEAF + (1 - fc[..., None]) * soil[:, None, :]  # [B, W, 6]
    cloudy = rng.random((b, w, acq)) < cloud_rate
    frac = np.where(cloudy, rng.uniform(0.3, 1.0, (b, w, acq)), rng.beta(1.0, 20.0, (b, w, acq)))
    refl = (1 - frac[..., None]) * surface[:, :, None, :] + frac[..., None] * _CLOUD
    view = np.exp(rng.normal(0, view_noise, (b, w, acq, 1)) * _VIEW)  # BRDF / haze residual
    refl = np.clip(refl * view + rng.normal(0, 0.004, refl.shape), 0.001, 1.0)
    blue, red, nir = refl[..., 0], refl[..., 2], refl[..., 4]
    ndvi = (nir - red) / (nir + red)
    evi = 2.5 * (nir - red) / (nir + 6 * red - 7.5 * blue + 1)
    return np.concatenate([ndvi[..., None], evi[..., None], refl], axis=3), frac


def _nitrate(
    rng: np.random.Generator,
    crop: np.ndarray,
    y: np.ndarray,
    soil: dict[str, np.ndarray],
    s: dict[str, np.ndarray],
    legume: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``[B, W]`` measured 0–30 cm nitrate (ppm) and the fertiliser log (kg N/ha a week)."""
    b, w = s["rain_mm"].shape
    kg_per_ppm = soil["bulk_density"] * 3.0
    n_crop = np.asarray(CROP_N_PER_T)[crop] > 0
    applied = np.zeros((b, w))
    applied[:, 1] = n_crop * rng.choice([0.0, 40.0, 60.0, 90.0], b)  # after the week-0 test
    side = n_crop & (rng.random(b) < 0.5)
    week = np.clip(np.round(_GREEN_UP[crop] + 3).astype(int), 0, w - 1)
    applied[np.flatnonzero(side), week[side]] = rng.uniform(40, 80, int(side.sum()))
    u = uptake_fraction(crop, w + 1)
    uptake = (np.asarray(CROP_N_PER_T)[crop] * y)[:, None] * np.diff(u, axis=1)
    pool = np.maximum(3.0 + 1.2 * soil["soil_om_pct"] + 4.0 * legume + rng.normal(0, 1.5, b), 1.0)
    no3 = np.empty((b, w))
    coarse = soil["sand_pct"] / 100.0
    for t in range(w):
        mineral = 0.12 * soil["soil_om_pct"] * np.clip(s["soil_temp_c"][:, t] / 20, 0, 1.5)
        leach = 0.015 * coarse * np.maximum(s["rain_mm"][:, t] - 25, 0) * pool
        pool = pool + mineral + (applied[:, t] - 0.8 * uptake[:, t]) / kg_per_ppm - leach
        pool = np.maximum(pool, 1.0)
        no3[:, t] = pool
    return no3 * rng.lognormal(0, 0.08, (b, w)), applied


def _vigour(
    rng: np.random.Generator,
    zone: np.ndarray,
    soil: dict[str, np.ndarray],
    moist: np.ndarray,
    irrigated: np.ndarray,
    effect: np.ndarray,
) -> np.ndarray:
    """``[B]`` canopy vigour in [0.3, 1] from water, organic matter, pH and management."""
    water = np.where(irrigated > 0, 1.0, np.clip((moist - 0.06) / 0.2, 0, 1))
    om = np.clip(soil["soil_om_pct"] / 4.0, 0, 1)
    ph = np.exp(-(((soil["soil_ph"] - 6.5) / 1.5) ** 2))
    return np.asarray(np.clip(0.35 + 0.4 * water + 0.1 * om + 0.15 * ph + effect, 0.3, 1.0))


def _static(
    rng: np.random.Generator,
    soil: dict[str, np.ndarray],
    zone: np.ndarray,
    y: np.ndarray,
    goal: np.ndarray,
    legume: np.ndarray,
    irrigated: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per-block static columns: soil P and K tests, yield and its goal, the previous
    crop, irrigation and elevation by climate zone."""
    b = zone.size
    return {
        "soil_p_ppm": rng.lognormal(np.log(22.0), 0.45, b),
        "soil_k_ppm": rng.lognormal(np.log(150.0), 0.35, b) * (0.7 + soil["clay_pct"] / 60),
        "yield_goal_t_ha": goal,
        "yield_t_ha": y,
        "prev_legume": legume,
        "irrigated": irrigated,
        "elevation_m": np.array([220.0, 480.0, 950.0])[zone] + rng.normal(0, 60, b),
    }


def generate_blocks(
    seed: int = 0,
    *,
    num_blocks: int = 5168,
    num_tractors: int = 120,
    farms_per_region: tuple[int, ...] = FARMS_PER_REGION,
    weeks: int = 26,
    acquisitions: int = 2,
    cloud_rate: float = 0.3,
    cloud_max: float = 0.2,
    stress_scale: float = 1.0,
    view_noise: float = 0.08,
    geography: str = "paper3",
) -> FieldBlocks:
    """Draw the field blocks (see the module docstring) and composite their imagery.

    Defaults give 003 Table 1's fleet (120 tractors, 35 farms) and, over 26 weeks,
    5168 × 24 = 124,032 Task A rows (paper: 124,043) and 5168 × 18 = 93,024 Task B rows
    (paper: 95,351). ``geography`` (:data:`~geofl.data.agri.catalog.GEOGRAPHIES`) gives
    region r its climate zone and link mix: ``paper3`` is zone r and shares r of the
    three regions, as before geographies existed; ``world`` has one entry of
    ``farms_per_region`` per region, up to thirteen.

    Raises:
        ValueError: when ``geography`` is unknown or has fewer regions than
            ``farms_per_region`` has entries.
    """
    regions = geography_regions(geography, len(farms_per_region))
    fleet = _fleet(seed, tuple(farms_per_region), num_tractors, num_blocks, regions)
    farm, crop, soil = _blocks(seed, fleet)
    rng = numpy_generator(seed, _NAME, "season")
    b = farm.size
    irrigated = (rng.random(b) < np.array([0.05, 0.15, 0.35])[fleet.zone[farm]]).astype(float)
    legume = (rng.random(b) < np.where(crop == 1, 0.1, 0.45)).astype(float)
    temp, rain = _weather(seed, fleet, weeks)
    sensors = _sensors(rng, temp[farm], rain[farm], soil, irrigated)
    effect = rng.normal(0, 0.06, fleet.region.size)[farm]
    mean_moist = sensors["soil_moisture"].mean(axis=1)
    vigour = _vigour(rng, fleet.zone[farm], soil, mean_moist, irrigated, effect)
    fc, loss = _canopy(rng, crop, vigour, sensors, stress_scale)
    y = _POTENTIAL_T_HA[crop] * vigour**1.2 * (1 - 0.5 * loss) * rng.lognormal(0, 0.07, b)
    expected = _vigour(rng, fleet.zone[farm], soil, np.full(b, 0.2), irrigated, effect)
    goal = _POTENTIAL_T_HA[crop] * expected**1.2 * rng.lognormal(0, 0.08, b)
    no3, applied = _nitrate(rng, crop, y, soil, sensors, legume)
    raw, cloud = _imagery(rng, fc, soil["soil_om_pct"], cloud_rate, acquisitions, view_noise)
    comp, clear = weekly_composite(raw, cloud, np.ones(cloud.shape, dtype=bool), cloud_max)
    names = ("ndvi", "evi", "blue", "green", "red", "red_edge", "nir", "swir1")
    weekly = {n: comp[..., i] for i, n in enumerate(names)}
    weekly.update(sensors, no3_n_ppm=no3, n_applied_kg_ha=applied, clear=clear)
    texture = texture_group(soil["sand_pct"], soil["clay_pct"])
    tractor = two_level_tractors(farm, crop, texture, fleet.tractors)
    static = _static(rng, soil, fleet.zone[farm], y, goal, legume, irrigated)
    return FieldBlocks(
        block_id=np.array([f"B{i:05d}" for i in range(b)]),
        farm=farm,
        tractor=tractor,
        region=fleet.region[farm],
        climate=fleet.zone[farm],
        crop=crop,
        soil=soil,
        static=static,
        weekly=weekly,
        link_profile=fleet.profile[tractor],
    )
