"""003 §3.1.1's deterministic preprocessing: weekly composites, labels and task features.

The four steps of the paper's pipeline and where each lives:

(i)  remote-sensing grids → field blocks by centroid assignment: :mod:`geofl.data.agri.cdl`
     (CropScape crop raster → per-block majority crop);
(ii) imagery → cloud-masked weekly means: :func:`weekly_composite` (here);
(iii) standardisation with training-set statistics: the engine's ``data.normalize:
     standardize`` (per feature, train split only; it also rescales the one-hot columns,
     an affine change an MLP absorbs);
(iv) labels by task-specific rules: :func:`stress_labels` (Task B, the paper's rule
     verbatim) and :func:`nutrient_target` (Task A, our agronomic rule: the paper names
     only "soil survey attributes and agronomic guidelines").

:func:`task_a_samples` and :func:`task_b_samples` turn a
:class:`~geofl.data.agri.tables.FieldBlocks` into one row per (block, week) with exactly the
columns of :data:`~geofl.data.agri.catalog.TASK_A_FEATURES` (48) /
:data:`~geofl.data.agri.catalog.TASK_B_FEATURES` (52).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from geofl.data.agri.catalog import CLIMATES, CROPS, TASK_A_FEATURES, TASK_B_FEATURES, TEXTURES
from geofl.data.agri.tables import FieldBlocks
from geofl.errors import DataError

__all__ = [
    "BASELINE_WEEKS",
    "CROP_GDD_BASE_C",
    "CROP_N_PER_T",
    "AgriSamples",
    "nutrient_target",
    "stress_labels",
    "task_a_samples",
    "task_b_samples",
    "uptake_fraction",
    "weekly_composite",
]

#: Weeks of the historical NDVI/EVI baseline of the stress rule (003 §3.1.1).
BASELINE_WEEKS = 8
#: Nitrogen taken up per tonne of harvested yield, kg N/t (land-grant guideline values;
#: soybean fixes its own N and gets no N recommendation).
CROP_N_PER_T: tuple[float, ...] = (20.0, 0.0, 28.0, 110.0, 22.0)
#: Week of half the season's N uptake, per crop, and the logistic's scale in weeks.
CROP_UPTAKE_MID_WEEK: tuple[float, ...] = (12.0, 13.0, 8.0, 14.0, 12.0)
UPTAKE_SCALE_WEEKS = 2.0
#: Base temperature of growing degree days, °C, per crop.
CROP_GDD_BASE_C: tuple[float, ...] = (10.0, 10.0, 4.4, 15.6, 10.0)
#: N mineralised per % soil organic matter over a season, kg N/ha (our guideline value).
OM_N_CREDIT = 18.0
#: Depth of the nitrate test, cm (ppm → kg/ha = ppm · bulk density · depth · 0.1).
NITRATE_DEPTH_CM = 30.0


@dataclass(frozen=True)
class AgriSamples:
    """One row per (block, week) of a task.

    Attributes:
        features: ``[N, F]`` float32 in the task's column order.
        names: The F column names.
        target: ``[N]`` float32 kg N/ha (Task A) or int64 0/1 stress (Task B).
        block: ``[N]`` int64 block index of each row.
        week: ``[N]`` int64 week of each row.
    """

    features: np.ndarray
    names: tuple[str, ...]
    target: np.ndarray
    block: np.ndarray
    week: np.ndarray


def weekly_composite(
    values: np.ndarray, cloud: np.ndarray, valid: np.ndarray, cloud_max: float
) -> tuple[np.ndarray, np.ndarray]:
    """Cloud-masked weekly means of imagery (003 §3.1.1 step ii).

    An acquisition is clear when it exists (``valid``) and its cloud fraction is at most
    ``cloud_max``; a week's value is the mean of its clear acquisitions. A week without a
    clear acquisition is filled by linear interpolation in time between the block's
    nearest clear weeks (held constant before the first / after the last); our choice, the
    paper does not say.

    Args:
        values: ``[B, W, A, C]`` per-acquisition values (A acquisitions per week at most).
        cloud: ``[B, W, A]`` cloud fraction in [0, 1].
        valid: ``[B, W, A]`` bool, False for padding.
        cloud_max: Largest cloud fraction of a usable acquisition.

    Returns:
        ``([B, W, C] weekly means, [B, W] clear share of the week's acquisitions)``.

    Raises:
        DataError: naming the block index when a block has no clear week at all.
    """
    clear = valid & (cloud <= cloud_max)
    n_clear = clear.sum(axis=2)
    n_valid = np.maximum(valid.sum(axis=2), 1)
    total = np.where(clear[..., None], values, 0.0).sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = total / n_clear[..., None]
    have = n_clear > 0
    empty = np.flatnonzero(~have.any(axis=1))
    if empty.size:
        raise DataError(
            f"field block #{int(empty[0])} has no cloud-free acquisition in any week "
            f"(cloud_max={cloud_max}); raise cloud_max or drop the block"
        )
    weeks = np.arange(out.shape[1], dtype=np.float64)
    for b in np.flatnonzero(~have.all(axis=1)):
        for c in range(out.shape[2]):
            out[b, ~have[b], c] = np.interp(weeks[~have[b]], weeks[have[b]], out[b, have[b], c])
    return out, n_clear / n_valid


def uptake_fraction(crop: np.ndarray, weeks: int) -> np.ndarray:
    """``[B, W]`` share of the season's N uptake taken up before week t (logistic)."""
    mid = np.asarray(CROP_UPTAKE_MID_WEEK)[crop][:, None]
    t = np.arange(weeks, dtype=np.float64)[None, :]
    return np.asarray(1.0 / (1.0 + np.exp(-(t - mid) / UPTAKE_SCALE_WEEKS)))


def nutrient_target(blocks: FieldBlocks) -> np.ndarray:
    """Task A's label: the block's in-season N rate F_opt, kg N/ha, ``[B]``.

    003 §3.1.1 says only that Task A's targets derive "from soil survey attributes and
    agronomic guidelines"; our rule is the yield-based N balance of land-grant guidelines:

        F_opt = max(0, k_c · Y − 18 · OM − NO3_0 · ρ_b · 30 · 0.1)

    with k_c kg N per tonne of yield (:data:`CROP_N_PER_T`; 0 for soybean), Y the
    *realised* yield of the block (known after harvest, never a feature), OM the survey
    organic matter (%), NO3_0 the 0–30 cm nitrate test of week 0 (ppm; the pre-season
    test, feature ``no3_preseason_ppm``) and ρ_b the survey bulk density (g/cm³). Every
    week of a block has the same target; what changes is how much of the season the
    features have seen.
    """
    crop = np.asarray(blocks.crop)
    k = np.asarray(CROP_N_PER_T)[crop]
    demand = k * blocks.static["yield_t_ha"] - OM_N_CREDIT * blocks.soil["soil_om_pct"] * (k > 0)
    soil_n = blocks.weekly["no3_n_ppm"][:, 0] * blocks.soil["bulk_density"] * NITRATE_DEPTH_CM
    return np.asarray(np.maximum(demand - 0.1 * soil_n, 0.0))


def stress_labels(
    ndvi: np.ndarray,
    evi: np.ndarray,
    group: np.ndarray,
    *,
    k_sigma: np.ndarray | float = 1.0,
    evi_margin: np.ndarray | float = 0.08,
) -> np.ndarray:
    """Task B's deterministic stress label (003 §3.1.1, "Task B Label Rule"), ``[B, W]``.

    For weeks t ≥ 8 with μ_NDVI, σ_NDVI, μ_EVI over weeks t−8..t−1:

        y_t = [NDVI(t) < μ_NDVI − k·σ_NDVI] ∧ [EVI(t) < μ_EVI − m] ∧ [NDVI(t) < q20]

    where q20 is the 20th percentile (numpy's linear rule) of NDVI(t) over the labelled
    weeks of the block's crop-and-region ``group``. σ is the sample standard deviation
    (ddof 1, as a pandas rolling window). The paper estimates q20 on the training set; the
    engine splits after labelling (stratified by label), so we take it over every labelled
    week of the group. Weeks before 8 are 0 and not used as samples.
    k = 1.0 and m = 0.08 are the paper's; ``k_sigma`` / ``evi_margin`` give others
    (scalars, or ``[B]`` per block: the regional label drift of
    :mod:`geofl.data.agri.harder`).

    Args:
        ndvi: ``[B, W]`` cloud-masked weekly NDVI.
        evi: ``[B, W]`` cloud-masked weekly EVI.
        group: ``[B]`` int64 crop × region code of each block.
        k_sigma: σ multiplier k of condition (i), scalar or ``[B]``.
        evi_margin: EVI margin m of condition (ii), scalar or ``[B]``.
    """
    b, w = ndvi.shape
    k = BASELINE_WEEKS
    y = np.zeros((b, w), dtype=bool)
    if w <= k:
        return y
    win_n = sliding_window_view(ndvi, k, axis=1)[:, : w - k]  # [B, W-k, k]: weeks t-8..t-1
    win_e = sliding_window_view(evi, k, axis=1)[:, : w - k]
    now_n, now_e = ndvi[:, k:], evi[:, k:]
    mu, sigma = win_n.mean(axis=2), win_n.std(axis=2, ddof=1)
    q20 = np.empty_like(now_n)
    for g in np.unique(group):
        rows = group == g
        q20[rows] = np.quantile(now_n[rows], 0.2)
    ks = np.broadcast_to(np.asarray(k_sigma, dtype=np.float64), (b,))[:, None]
    margin = np.broadcast_to(np.asarray(evi_margin, dtype=np.float64), (b,))[:, None]
    below_mean = (now_n < mu - ks * sigma) & (now_e < win_e.mean(axis=2) - margin)
    y[:, k:] = below_mean & (now_n < q20)
    return y


def _lag(x: np.ndarray, k: int) -> np.ndarray:
    """``[B, W]`` x at week t−k (week 0's value before the season)."""
    return np.concatenate([np.repeat(x[:, :1], k, axis=1), x[:, : x.shape[1] - k]], axis=1)


def _rolling(x: np.ndarray, k: int, fn: str) -> np.ndarray:
    """``[B, W]`` mean / sum / std / min of weeks max(0, t−k+1)..t."""
    pad = np.concatenate([np.full((x.shape[0], k - 1), np.nan), x], axis=1)
    win = sliding_window_view(pad, k, axis=1)
    if fn == "sum":
        return np.asarray(np.nansum(win, axis=2))
    if fn == "std":
        return np.asarray(np.nanstd(win, axis=2))
    if fn == "min":
        return np.asarray(np.nanmin(win, axis=2))
    return np.asarray(np.nanmean(win, axis=2))


def _context(blocks: FieldBlocks) -> dict[str, np.ndarray]:
    """Per-block one-hot context columns (texture, crop, climate), ``[B]`` each."""
    out: dict[str, np.ndarray] = {}
    for prefix, names, codes in (
        ("texture", TEXTURES, blocks.texture),
        ("crop", CROPS, np.asarray(blocks.crop)),
        ("climate", CLIMATES, np.asarray(blocks.climate)),
    ):
        for i, name in enumerate(names):
            out[f"{prefix}_{name}"] = (codes == i).astype(np.float64)
    return out


def _gdd(blocks: FieldBlocks) -> np.ndarray:
    """``[B, W]`` growing degree days of each week (7 · max(T_mean − T_base, 0))."""
    base = np.asarray(CROP_GDD_BASE_C)[np.asarray(blocks.crop)][:, None]
    return np.asarray(7.0 * np.maximum(blocks.weekly["air_temp_mean_c"] - base, 0.0))


def _assemble(
    blocks: FieldBlocks, cols: dict[str, np.ndarray], names: tuple[str, ...], first_week: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (block, week ≥ first_week): ``[N, F]`` features, block and week indices."""
    b, w = blocks.num_blocks, blocks.weeks
    week = np.broadcast_to(np.arange(w, dtype=np.float64), (b, w))
    cols = {**cols, "week": week}
    sel = (slice(None), slice(first_week, None))
    stack = [
        np.broadcast_to(np.asarray(cols[n], dtype=np.float64).reshape(b, -1), (b, w))[sel]
        for n in names
    ]
    x = np.stack(stack, axis=2).reshape(-1, len(names))
    block_idx = np.repeat(np.arange(b), w - first_week)
    week_idx = np.tile(np.arange(first_week, w), b)
    return x, block_idx, week_idx


def _static_cols(blocks: FieldBlocks) -> dict[str, np.ndarray]:
    return {**blocks.soil, **blocks.static, **_context(blocks)}


def task_a_samples(blocks: FieldBlocks, first_week: int = 2) -> AgriSamples:
    """Task A (nutrient regression): rows (block, week ≥ ``first_week``), 48 columns."""
    w = blocks.weekly
    ndvi, evi = w["ndvi"], w["evi"]
    cols = {
        **_static_cols(blocks),
        **{k: w[k] for k in ("no3_n_ppm", "soil_moisture", "air_temp_mean_c")},
        "no3_preseason_ppm": w["no3_n_ppm"][:, 0],
        "rain_7d_mm": w["rain_mm"],
        "rain_28d_mm": _rolling(w["rain_mm"], 4, "sum"),
        "gdd_cum": np.cumsum(_gdd(blocks), axis=1),
        "ndvi_t": ndvi,
        "ndvi_t1": _lag(ndvi, 1),
        "ndvi_t2": _lag(ndvi, 2),
        "evi_t": evi,
        "evi_t1": _lag(evi, 1),
        "evi_t2": _lag(evi, 2),
        "ndvi_max_to_date": np.maximum.accumulate(ndvi, axis=1),
        "ndvi_mean_4w": _rolling(ndvi, 4, "mean"),
        "evi_mean_4w": _rolling(evi, 4, "mean"),
        "ndvi_slope_3w": (ndvi - _lag(ndvi, 2)) / 2.0,
        "red_t": w["red"],
        "nir_t": w["nir"],
        "red_edge_t": w["red_edge"],
        "swir1_t": w["swir1"],
        "n_applied_kg_ha": np.cumsum(w["n_applied_kg_ha"], axis=1),
    }
    x, block, week = _assemble(blocks, cols, TASK_A_FEATURES, first_week)
    y = np.repeat(nutrient_target(blocks), blocks.weeks - first_week)
    return AgriSamples(x.astype(np.float32), TASK_A_FEATURES, y.astype(np.float32), block, week)


def task_b_samples(
    blocks: FieldBlocks,
    *,
    k_sigma: np.ndarray | float = 1.0,
    evi_margin: np.ndarray | float = 0.08,
) -> AgriSamples:
    """Task B (crop stress): rows (block, week ≥ 8), 52 columns from weeks t−2..t only.

    ``k_sigma`` and ``evi_margin`` are the label rule's thresholds (:func:`stress_labels`;
    the paper's 1.0 and 0.08 by default).
    """
    w = blocks.weekly
    ndvi, evi = w["ndvi"], w["evi"]
    cols = {
        **_static_cols(blocks),
        "ndvi_t": ndvi,
        "ndvi_t1": _lag(ndvi, 1),
        "ndvi_t2": _lag(ndvi, 2),
        "evi_t": evi,
        "evi_t1": _lag(evi, 1),
        "evi_t2": _lag(evi, 2),
        "ndvi_d1": ndvi - _lag(ndvi, 1),
        "ndvi_d2": _lag(ndvi, 1) - _lag(ndvi, 2),
        "evi_d1": evi - _lag(evi, 1),
        "evi_d2": _lag(evi, 1) - _lag(evi, 2),
        "ndvi_mean_3w": _rolling(ndvi, 3, "mean"),
        "ndvi_std_3w": _rolling(ndvi, 3, "std"),
        "ndvi_min_3w": _rolling(ndvi, 3, "min"),
        "evi_mean_3w": _rolling(evi, 3, "mean"),
        **{f"{k}_t": w[k] for k in ("blue", "green", "red", "red_edge", "nir", "swir1")},
        "clear_t": w["clear"],
        "clear_t1": _lag(w["clear"], 1),
        "clear_t2": _lag(w["clear"], 2),
        **{k: w[k] for k in ("air_temp_max_c", "air_temp_mean_c", "soil_moisture", "vpd_kpa")},
        "leaf_wetness_h": w["leaf_wetness_h"],
        "rain_7d_mm": w["rain_mm"],
        "rain_21d_mm": _rolling(w["rain_mm"], 3, "sum"),
        "soil_moisture_mean_3w": _rolling(w["soil_moisture"], 3, "mean"),
        "gdd_3w": _rolling(_gdd(blocks), 3, "sum"),
    }
    region = np.asarray(blocks.region)
    stride = max(8, int(region.max()) + 1) if region.size else 8  # 8: codes of 003's regions
    group = np.asarray(blocks.crop) * stride + region
    labels = stress_labels(ndvi, evi, group, k_sigma=k_sigma, evi_margin=evi_margin)
    x, block, week = _assemble(blocks, cols, TASK_B_FEATURES, BASELINE_WEEKS)
    y = labels[:, BASELINE_WEEKS:].reshape(-1)
    return AgriSamples(x.astype(np.float32), TASK_B_FEATURES, y.astype(np.int64), block, week)
