"""Field blocks joined with their context: the record between the readers and the features.

A :class:`FieldBlocks` is what 003 §3.1.1's pipeline holds after step (i) (remote-sensing
grids assigned to field blocks: the CDL majority crop per block) and step (ii) (imagery
aggregated to cloud-masked weekly means): ``B`` field blocks with their farm, tractor,
region, crop, soil and management context, and ``W`` weeks of vegetation indices, bands and
sensor readings. The synthetic generator and the real-format readers both produce one; the
feature and label construction of :mod:`geofl.data.agri.pipeline` only reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from geofl.data.agri.catalog import CLIMATES, CROPS, MAX_REGIONS, texture_group
from geofl.errors import DataError

__all__ = [
    "IMAGERY_COLUMNS",
    "SENSOR_COLUMNS",
    "SOIL_COLUMNS",
    "STATIC_COLUMNS",
    "FieldBlocks",
]

#: Soil survey properties per block (SSURGO, 0–30 cm, component-weighted).
SOIL_COLUMNS: tuple[str, ...] = (
    "soil_ph",
    "soil_om_pct",
    "soil_cec",
    "sand_pct",
    "silt_pct",
    "clay_pct",
    "awc",
    "bulk_density",
)
#: Per-block soil tests, management and the realised yield (Task A's label source only).
STATIC_COLUMNS: tuple[str, ...] = (
    "soil_p_ppm",
    "soil_k_ppm",
    "yield_goal_t_ha",
    "yield_t_ha",
    "prev_legume",
    "irrigated",
    "elevation_m",
)
#: Cloud-masked weekly means of the imagery (indices and surface reflectance).
IMAGERY_COLUMNS: tuple[str, ...] = (
    "ndvi",
    "evi",
    "blue",
    "green",
    "red",
    "red_edge",
    "nir",
    "swir1",
)
#: Weekly field-sensor and weather readings; ``rain_mm`` and ``n_applied_kg_ha`` are weekly
#: totals, the others weekly means.
SENSOR_COLUMNS: tuple[str, ...] = (
    "air_temp_max_c",
    "air_temp_mean_c",
    "rain_mm",
    "soil_moisture",
    "soil_temp_c",
    "vpd_kpa",
    "leaf_wetness_h",
    "no3_n_ppm",
    "n_applied_kg_ha",
)


@dataclass(frozen=True)
class FieldBlocks:
    """``B`` field blocks over ``W`` weeks (003 §3.1.1 after steps i–ii).

    Attributes:
        block_id: ``[B]`` block names (strings).
        farm: ``[B]`` int64 farm index.
        tractor: ``[B]`` int64 tractor index (the federated client, 003 §3.1).
        region: ``[B]`` int64 region index (0 = high NQI … 2 = low NQI, 003 Table 12; up to
            :data:`~geofl.data.agri.catalog.MAX_REGIONS` − 1 in a wider geography).
        climate: ``[B]`` int64 index into :data:`~geofl.data.agri.catalog.CLIMATES`.
        crop: ``[B]`` int64 index into :data:`~geofl.data.agri.catalog.CROPS`.
        soil: :data:`SOIL_COLUMNS` → ``[B]`` float64.
        static: :data:`STATIC_COLUMNS` → ``[B]`` float64.
        weekly: :data:`IMAGERY_COLUMNS` + :data:`SENSOR_COLUMNS` + ``clear`` (share of
            the week's acquisitions that passed the cloud mask) → ``[B, W]`` float64.
        link_profile: ``[B]`` int64 nominal uplink of the block's tractor (0 = 3G, 1 = 4G,
            2 = 5G), or −1 where unknown.

    Raises:
        DataError: when lengths, shapes or index ranges disagree.
    """

    block_id: np.ndarray
    farm: np.ndarray
    tractor: np.ndarray
    region: np.ndarray
    climate: np.ndarray
    crop: np.ndarray
    soil: Mapping[str, np.ndarray]
    static: Mapping[str, np.ndarray]
    weekly: Mapping[str, np.ndarray]
    link_profile: np.ndarray

    def __post_init__(self) -> None:
        b = len(self.block_id)
        for name in ("farm", "tractor", "region", "climate", "crop", "link_profile"):
            if np.asarray(getattr(self, name)).shape != (b,):
                raise DataError(f"field blocks: {name} must have one entry per block ({b})")
        for what, keys, shape in (
            ("soil", SOIL_COLUMNS, (b,)),
            ("static", STATIC_COLUMNS, (b,)),
            ("weekly", (*IMAGERY_COLUMNS, *SENSOR_COLUMNS, "clear"), (b, self.weeks)),
        ):
            table = getattr(self, what)
            missing = [k for k in keys if k not in table]
            if missing:
                raise DataError(f"field blocks: {what} lacks columns {missing}")
            bad = [k for k in keys if np.asarray(table[k]).shape != shape]
            if bad:
                raise DataError(f"field blocks: {what} columns {bad} are not of shape {shape}")
        for name, size in (
            ("region", MAX_REGIONS),
            ("climate", len(CLIMATES)),
            ("crop", len(CROPS)),
        ):
            v = np.asarray(getattr(self, name))
            if v.size and (v.min() < 0 or v.max() >= size):
                raise DataError(f"field blocks: {name} index outside 0..{size - 1}")

    @property
    def num_blocks(self) -> int:
        """B."""
        return len(self.block_id)

    @property
    def weeks(self) -> int:
        """W."""
        return int(np.asarray(self.weekly["ndvi"]).shape[1])

    @property
    def texture(self) -> np.ndarray:
        """``[B]`` int64 index into :data:`~geofl.data.agri.catalog.TEXTURES`."""
        return texture_group(self.soil["sand_pct"], self.soil["clay_pct"])
