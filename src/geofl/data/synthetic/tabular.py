"""Synthetic tabular farming datasets: crop yield (regression) and crop stress (binary).

Both follow the precision-farming setting of paper 003 (§3.1): each sample is a field block
of a farm in a region, described by remote-sensing vegetation-index statistics (NDVI/EVI
from Sentinel-2/MODIS), soil properties (NRCS-style organic matter, texture), weather and
management. Paper 003's Task A regresses a soil-nutrient target and Task B labels crop
stress from NDVI/EVI dynamics; here Task A is crop yield in t/ha (the agronomic quantity
those nutrient models serve) and Task B uses paper 003's stress rule verbatim.

Shared farm structure (per dataset, generator ``(seed, name, "farms")``): ``num_farms``
farms are dealt to ``num_regions`` regions round-robin; a region has a climate (season
rainfall, temperature, elevation) and each farm a soil (organic matter, sand fraction), a
fertiliser habit and a management effect. Samples are drawn i.i.d. over farms, so a
``group`` partition on ``farm`` or ``region`` gives natural feature and label shift.

Everything is vectorised numpy on generators from :func:`geofl.rng.numpy_generator`; a
dataset of 10⁴ samples takes milliseconds, so nothing is cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, ArrayDataset
from geofl.rng import numpy_generator

__all__ = [
    "STRESS_FEATURES",
    "YIELD_FEATURES",
    "StressParams",
    "YieldParams",
    "build_tabular_binary",
    "build_yield",
    "generate_stress",
    "generate_yield",
]

#: Regional climates, cycled when ``num_regions > 4``: (season rainfall mm, mean
#: temperature °C, elevation m) of a maritime lowland, a continental plain, a dry
#: Mediterranean basin and a cool upland.
_CLIMATES = ((560.0, 15.5, 60.0), (430.0, 18.0, 180.0), (300.0, 21.5, 350.0), (650.0, 13.0, 820.0))

#: Yield features, in column order (``region_<r>`` one-hot columns follow when enabled).
YIELD_FEATURES: tuple[str, ...] = (
    "ndvi_peak",
    "ndvi_mean",
    "ndvi_std",
    "soil_moisture",
    "temp_mean_c",
    "rainfall_mm",
    "elevation_m",
    "nitrogen_kg_ha",
    "soil_om_pct",
    "sand_frac",
)
#: Stress features, in column order (``crop_<name>`` one-hot columns follow).
STRESS_FEATURES: tuple[str, ...] = (
    "ndvi_t",
    "ndvi_t1",
    "ndvi_t2",
    "evi_t",
    "evi_t1",
    "ndvi_base_mean",
    "ndvi_base_std",
    "evi_base_mean",
    "temp_max_c",
    "rain_7d_mm",
    "soil_moisture",
)
_CROPS = ("cereal", "maize", "soybean")
#: Canopy NDVI at full vigour per crop (maize densest).
_CROP_NDVI = (0.72, 0.80, 0.68)


class _Farms(NamedTuple):
    region: np.ndarray  # [F] int64
    om: np.ndarray  # [F] soil organic matter, %
    sand: np.ndarray  # [F] sand fraction
    nitrogen: np.ndarray  # [F] habitual N rate, kg/ha
    effect: np.ndarray  # [F] management effect, t/ha


def _farms(seed: int, name: str, num_farms: int, num_regions: int) -> _Farms:
    """Per-farm soil, fertiliser habit and management (see the module docstring)."""
    rng = numpy_generator(seed, name, "farms")
    region = np.arange(num_farms) % num_regions
    return _Farms(
        region=region.astype(np.int64),
        om=rng.lognormal(np.log(2.2), 0.35, num_farms),
        sand=rng.beta(2.0, 3.0, num_farms),
        nitrogen=rng.uniform(60.0, 200.0, num_farms),
        effect=rng.normal(0.0, 0.35, num_farms),
    )


def _climate(num_regions: int) -> np.ndarray:
    """``[R, 3]`` rainfall (mm), temperature (°C), elevation (m) per region."""
    return np.array([_CLIMATES[r % len(_CLIMATES)] for r in range(num_regions)])


def _one_hot(index: np.ndarray, width: int) -> np.ndarray:
    """``[N, width]`` float 0/1 rows."""
    return np.asarray(np.eye(width)[index])


class YieldParams(BaseModel):
    """Parameters of ``synthetic_yield``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: int = Field(4000, gt=0, description="Field blocks (samples).")
    seed: int = Field(0, description="Seed of all random draws.")
    num_regions: int = Field(4, ge=1, description="Climate regions.")
    num_farms: int = Field(40, ge=1, description="Farms, dealt to regions round-robin.")
    noise_std: float = Field(0.45, ge=0, description="Unexplained yield noise, t/ha.")
    region_one_hot: bool = Field(True, description="Append region_<r> one-hot features.")


def generate_yield(params: YieldParams) -> dict[str, np.ndarray]:
    """Draw the yield dataset.

    Generative model per field block ``i`` of farm ``f`` in region ``r`` (wheat-like):
    rainfall ~ rain_r·LogNormal(0, 0.25); temperature ~ N(T_r, 2.5²); soil moisture (m³/m³)
    rises with rainfall and falls with sand; applied N ~ N_f·LogNormal(0, 0.2). Yield is a
    product of limiting factors times a 9 t/ha potential,

        y = 9 · (1 − e^{−water/280}) · e^{−((T − 17)/6)²} · (1 − 0.6·e^{−(N + 25·OM)/80})
            + effect_f + ε,   ε ~ N(0, noise_std²),

    with ``water = rainfall·(0.55 + soil moisture)``, clipped below at 0.2 t/ha. NDVI
    statistics observe the canopy (the noiseless biomass term) with saturation
    (``0.15 + 0.75·(1 − e^{−0.35·y_canopy})``) and sensor noise, so they are informative
    but not sufficient; a linear model misses the saturations and the temperature optimum.

    Returns:
        ``features`` float32 ``[N, F]`` (:data:`YIELD_FEATURES` then ``region_<r>``),
        ``yield_t_ha`` float32 ``[N]``, metadata ``region``, ``farm`` (int64 ``[N]``).
    """
    n = params.num_samples
    farms = _farms(params.seed, "synthetic_yield", params.num_farms, params.num_regions)
    clim = _climate(params.num_regions)
    rng = numpy_generator(params.seed, "synthetic_yield", "samples")
    farm = rng.integers(0, params.num_farms, n)
    region = farms.region[farm]
    rain = clim[region, 0] * rng.lognormal(0.0, 0.25, n)
    temp = clim[region, 1] + rng.normal(0.0, 2.5, n)
    elev = clim[region, 2] + rng.normal(0.0, 40.0, n)
    sand = farms.sand[farm]
    moist = 0.08 + 0.24 / (1 + np.exp(-(rain - 420.0) / 110.0)) - 0.07 * sand
    moist = np.clip(moist + rng.normal(0.0, 0.02, n), 0.03, 0.45)
    nitrogen = farms.nitrogen[farm] * rng.lognormal(0.0, 0.2, n)
    om = farms.om[farm]
    water = 1 - np.exp(-rain * (0.55 + moist) / 280.0)
    heat = np.exp(-(((temp - 17.0) / 6.0) ** 2))
    nutrient = 1 - 0.6 * np.exp(-(nitrogen + 25.0 * om) / 80.0)
    canopy = 9.0 * water * heat * nutrient
    y = np.maximum(canopy + farms.effect[farm] + rng.normal(0, params.noise_std, n), 0.2)
    green = 0.15 + 0.75 * (1 - np.exp(-0.35 * canopy))
    peak = np.clip(green + rng.normal(0.0, 0.03, n), 0.05, 0.95)
    mean = np.clip(peak * rng.uniform(0.62, 0.78, n), 0.05, 0.9)
    std = np.abs(0.35 * (peak - mean) + rng.normal(0.0, 0.01, n))
    cols = [peak, mean, std, moist, temp, rain, elev, nitrogen, om, sand]
    x = np.stack(cols, axis=1)
    if params.region_one_hot:
        x = np.concatenate([x, _one_hot(region, params.num_regions)], axis=1)
    return {
        "features": x.astype(np.float32),
        "yield_t_ha": y.astype(np.float32),
        "region": region.astype(np.int64),
        "farm": farm.astype(np.int64),
    }


@DATASETS.register("synthetic_yield", params=YieldParams)
def build_yield(params: YieldParams, *, cache_dir: Path) -> ArrayDataset:
    """Tabular crop-yield regression: ``[N, F]`` features → yield ``[N]`` t/ha (``real``).

    Args:
        params: Dataset parameters.
        cache_dir: Unused (generation takes milliseconds).
    """
    arrays = generate_yield(params)
    names = YIELD_FEATURES
    if params.region_one_hot:
        names += tuple(f"region_{r}" for r in range(params.num_regions))
    return ArrayDataset(
        inputs=torch.from_numpy(arrays["features"]),
        targets=torch.from_numpy(arrays["yield_t_ha"]),
        classes=("yield_t_ha",),
        bands=names,
        metadata={"region": arrays["region"], "farm": arrays["farm"]},
        name="synthetic_yield",
        target_kind="real",
    )


class StressParams(BaseModel):
    """Parameters of ``synthetic_tabular_binary``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: int = Field(6000, gt=0, description="Field-block weeks (samples).")
    seed: int = Field(0, description="Seed of all random draws.")
    num_regions: int = Field(4, ge=1, description="Climate regions.")
    num_farms: int = Field(40, ge=1, description="Farms, dealt to regions round-robin.")
    stress_rate: float = Field(
        0.05, gt=0, lt=1, description="Base probability of a stress event (before weather)."
    )
    observation_noise: float = Field(
        0.03, ge=0, description="Std of sensor noise on the observed NDVI/EVI."
    )
    cloud_rate: float = Field(
        0.15, ge=0, le=1, description="Share of weekly composites with residual cloud."
    )


def generate_stress(params: StressParams) -> dict[str, np.ndarray]:
    """Draw the crop-stress dataset (paper 003, Task B label rule).

    Per field-block week ``t`` of farm ``f`` (crop ``c``, region ``r``): an 8-week NDVI
    baseline μ = NDVI_c − 0.04·(r mod 3) + N(0, 0.04) with week-to-week std σ ~ U(0.03,
    0.07); EVI ≈ 0.62·NDVI − 0.03. A stress event (drought, heat, disease) happens with
    probability ``sigmoid(logit(stress_rate) + 1.2·heat + 1.3·drought)`` from the week's
    maximum temperature and soil moisture; it lowers NDVI by d ~ U(0.02, 0.25) at ``t``,
    half of that at ``t−1`` and nothing at ``t−2``. The label is paper 003's rule on the
    *true* indices:

        y = [NDVI_t < μ − σ] ∧ [EVI_t < μ_EVI − 0.08] ∧ [NDVI_t < q20(crop, region)]

    with q20 the 20th NDVI_t percentile of the crop in the region over the dataset. The
    features observe the indices with ``observation_noise`` (residual cloud), so the rule
    cannot be recovered exactly: sensor noise (``observation_noise``) and, in a
    ``cloud_rate`` share of the weekly composites, residual cloud that lowers NDVI by
    U(0.05, 0.2) (EVI by 0.62 of that), which looks like a stress drop. Positives are about
    9 % at the defaults, from 6 % (cool upland) to 13 % (hot, dry basin).

    Returns:
        ``features`` float32 ``[N, F]`` (:data:`STRESS_FEATURES` then ``crop_<name>``),
        ``stress`` int64 ``[N]`` 0/1, metadata ``region``, ``farm``, ``crop`` (int64).
    """
    n = params.num_samples
    farms = _farms(params.seed, "synthetic_tabular_binary", params.num_farms, params.num_regions)
    clim = _climate(params.num_regions)
    rng = numpy_generator(params.seed, "synthetic_tabular_binary", "samples")
    farm = rng.integers(0, params.num_farms, n)
    region = farms.region[farm]
    crop = (farm // params.num_regions) % len(_CROPS)  # each farm grows one crop
    base = np.asarray(_CROP_NDVI)[crop] - 0.04 * (region % 3) + rng.normal(0.0, 0.04, n)
    sigma = rng.uniform(0.03, 0.07, n)
    temp, rain, moist = _stress_weather(rng, clim, region, farms.sand[farm])
    ndvi, evi = _stress_indices(rng, params.stress_rate, base, sigma, temp, moist)
    evi_base = 0.62 * base - 0.03
    q20 = _group_quantile(ndvi[:, 0], crop * params.num_regions + region, 0.2)
    y = (ndvi[:, 0] < base - sigma) & (evi[:, 0] < evi_base - 0.08) & (ndvi[:, 0] < q20)
    seen = _stress_observed(rng, params, ndvi, evi, base, sigma, evi_base)
    cols = [*seen, temp, rain, moist]
    x = np.concatenate([np.stack(cols, axis=1), _one_hot(crop, len(_CROPS))], axis=1)
    return {
        "features": x.astype(np.float32),
        "stress": y.astype(np.int64),
        "region": region.astype(np.int64),
        "farm": farm.astype(np.int64),
        "crop": crop.astype(np.int64),
    }


def _stress_weather(
    rng: np.random.Generator, clim: np.ndarray, region: np.ndarray, sand: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The week's maximum temperature (°C), rain (mm) and soil moisture, each ``[N]``.

    Args:
        rng: The samples' generator (three draws of ``N``: temperature, rain, moisture).
        clim: ``[R, 3]`` region climates (rain, temperature, elevation).
        region: ``[N]`` region of each sample.
        sand: ``[N]`` sand fraction of each sample's farm.
    """
    n = region.shape[0]
    temp = clim[region, 1] + 9.0 + rng.normal(0.0, 3.5, n)
    rain = rng.gamma(1.5, clim[region, 0] / 40.0, n)
    moist = 0.1 + 0.005 * rain - 0.07 * sand + rng.normal(0.0, 0.03, n)
    moist = np.clip(moist, 0.03, 0.45)
    return temp, rain, moist


def _stress_indices(
    rng: np.random.Generator,
    stress_rate: float,
    base: np.ndarray,
    sigma: np.ndarray,
    temp: np.ndarray,
    moist: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """True NDVI ``[N, 3]`` (weeks t, t−1, t−2) and EVI ``[N, 2]`` (t, t−1), stress drops in.

    A stress event happens with probability ``sigmoid(logit(stress_rate) + 1.2·heat +
    1.3·drought)`` and lowers NDVI by its drop at ``t``, half of it at ``t−1``.

    Args:
        rng: The samples' generator (event, drop, weekly noise, EVI noise, in order).
        stress_rate: Base probability of a stress event.
        base: ``[N]`` 8-week NDVI baseline μ.
        sigma: ``[N]`` week-to-week NDVI std σ.
        temp: ``[N]`` maximum temperature (°C).
        moist: ``[N]`` soil moisture.
    """
    n = base.shape[0]
    heat, drought = np.maximum(temp - 30.0, 0) / 3.0, np.maximum(0.15 - moist, 0) / 0.05
    z = np.log(stress_rate / (1 - stress_rate)) + 1.2 * heat + 1.3 * drought
    event = rng.random(n) < 1 / (1 + np.exp(-z))
    drop = event * rng.uniform(0.02, 0.25, n)
    weekly = base[:, None] + sigma[:, None] * rng.normal(0.0, 1.0, (n, 3))
    ndvi = weekly - drop[:, None] * np.array([1.0, 0.5, 0.0])  # columns t, t-1, t-2
    evi = 0.62 * ndvi[:, :2] - 0.03 + rng.normal(0.0, 0.01, (n, 2))
    return ndvi, evi


def _stress_observed(
    rng: np.random.Generator,
    params: StressParams,
    ndvi: np.ndarray,
    evi: np.ndarray,
    base: np.ndarray,
    sigma: np.ndarray,
    evi_base: np.ndarray,
) -> list[np.ndarray]:
    """The index feature columns as observed: residual cloud and sensor noise added.

    Args:
        rng: The samples' generator (cloud, then the noise of each column, in order).
        params: Dataset parameters (``cloud_rate``, ``observation_noise``).
        ndvi: ``[N, 3]`` true NDVI of weeks t, t−1, t−2.
        evi: ``[N, 2]`` true EVI of weeks t, t−1.
        base: ``[N]`` NDVI baseline μ.
        sigma: ``[N]`` NDVI week-to-week std σ.
        evi_base: ``[N]`` EVI baseline μ_EVI.

    Returns:
        Eight ``[N]`` columns: NDVI t, t−1, t−2, EVI t, t−1, μ, σ, μ_EVI.
    """
    n = base.shape[0]
    obs = params.observation_noise
    # Residual cloud lowers both indices of a week's composite, mimicking a stress drop.
    cloud = (rng.random((n, 3)) < params.cloud_rate) * rng.uniform(0.05, 0.2, (n, 3))
    seen_ndvi = ndvi - cloud + rng.normal(0.0, obs, ndvi.shape)
    seen_evi = evi - 0.62 * cloud[:, :2] + rng.normal(0.0, obs, evi.shape)
    base_seen = base + rng.normal(0.0, obs / 2, n)  # an 8-week mean: less noisy
    return [*seen_ndvi.T, *seen_evi.T, base_seen, sigma, evi_base + rng.normal(0.0, obs / 2, n)]


def _group_quantile(values: np.ndarray, group: np.ndarray, q: float) -> np.ndarray:
    """Per sample, the ``q`` quantile of ``values`` over the samples of its group."""
    keys, inverse = np.unique(group, return_inverse=True)
    per_group = np.array([np.quantile(values[inverse == g], q) for g in range(keys.size)])
    return np.asarray(per_group[inverse])


@DATASETS.register("synthetic_tabular_binary", params=StressParams)
def build_tabular_binary(params: StressParams, *, cache_dir: Path) -> ArrayDataset:
    """Tabular crop-stress detection: ``[N, F]`` features → 0/1 (``binary``, imbalanced).

    Args:
        params: Dataset parameters.
        cache_dir: Unused (generation takes milliseconds).
    """
    arrays = generate_stress(params)
    return ArrayDataset(
        inputs=torch.from_numpy(arrays["features"]),
        targets=torch.from_numpy(arrays["stress"]),
        classes=("healthy", "stressed"),
        bands=STRESS_FEATURES + tuple(f"crop_{c}" for c in _CROPS),
        metadata={k: arrays[k] for k in ("region", "farm", "crop")},
        name="synthetic_tabular_binary",
        target_kind="binary",
    )
