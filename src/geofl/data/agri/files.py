"""``agri_files``: paper 003's tasks from the real formats a user brings (003 Table 2).

A directory ``root`` holds::

    blocks.csv      one row per field block: block_id, farm, tractor, region (1–3, 003
                    Table 12), climate (humid / subhumid / semiarid), xmin, ymin, xmax,
                    ymax (block rectangle in the CDL raster's map units), mukey,
                    soil_p_ppm, soil_k_ppm, yield_goal_t_ha, yield_t_ha (realised, Task A's
                    label source), prev_legume (0/1), irrigated (0/1), elevation_m
    cdl.tif         CropScape / CDL GeoTIFF clip (:mod:`geofl.data.agri.cdl`)
    soil.csv        SSURGO component × horizon table (:mod:`geofl.data.agri.ssurgo`)
    weekly/<block_id>.csv  per-block time series (:mod:`geofl.data.agri.vi`)

joined by 003 §3.1.1's deterministic pipeline: (i) CDL pixels → blocks by centroid,
majority crop; soil by ``mukey``; (ii) cloud-masked weekly composites; (iii) train-split
standardisation in the engine; (iv) the task's labels (:mod:`geofl.data.agri.pipeline`).
Farms and tractors are numbered in sorted order of their names.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.agri.catalog import CLIMATES
from geofl.data.agri.cdl import block_crops, read_cdl
from geofl.data.agri.csvtable import read_csv
from geofl.data.agri.dataset import AgriTask, blocks_to_dataset
from geofl.data.agri.pipeline import weekly_composite
from geofl.data.agri.ssurgo import read_soil_table
from geofl.data.agri.tables import IMAGERY_COLUMNS, SENSOR_COLUMNS, SOIL_COLUMNS, FieldBlocks
from geofl.data.agri.vi import read_block_series
from geofl.data.base import DATASETS, ArrayDataset
from geofl.errors import DataError

__all__ = ["AgriFilesParams", "build_agri_files", "read_field_blocks"]

_BLOCK_COLUMNS = (
    "block_id",
    "farm",
    "tractor",
    "region",
    "climate",
    "xmin",
    "ymin",
    "xmax",
    "ymax",
    "mukey",
    "soil_p_ppm",
    "soil_k_ppm",
    "yield_goal_t_ha",
    "yield_t_ha",
    "prev_legume",
    "irrigated",
    "elevation_m",
)


class AgriFilesParams(BaseModel):
    """Parameters of ``agri_files``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: AgriTask = Field(..., description="nutrient (Task A) or stress (Task B)")
    root: Path = Field(..., description="directory with blocks.csv, cdl.tif, soil.csv, weekly/")
    season_start: dt.date = Field(..., description="first day of week 0 (ISO date)")
    weeks: int = Field(26, ge=10, le=52, description="weeks of the season")
    cloud_max: float = Field(0.2, ge=0, le=1, description="cloud mask: largest usable fraction")
    soil_depth_cm: float = Field(30.0, gt=0, description="depth of the soil aggregation")


def _codes(values: np.ndarray) -> np.ndarray:
    """``[n]`` int64 index of each value among the sorted distinct values."""
    return np.unique(values, return_inverse=True)[1].astype(np.int64)


def _context(table_path: Path, ids: np.ndarray, region: np.ndarray, climate: np.ndarray) -> None:
    if len(set(ids.tolist())) != ids.size:
        raise DataError(f"{table_path}: column 'block_id' has duplicate blocks")
    bad = ~np.isin(region, (1.0, 2.0, 3.0))
    if bad.any():
        raise DataError(
            f"{table_path} line {int(np.flatnonzero(bad)[0]) + 2}: column 'region' must be 1, 2 "
            "or 3 (003 Table 12)"
        )
    unknown = [c for c in climate if c not in CLIMATES]
    if unknown:
        raise DataError(
            f"{table_path}: column 'climate' value {unknown[0]!r} is not one of {list(CLIMATES)}"
        )


def _pad_acquisitions(x: np.ndarray, a: int, fill: float | bool) -> np.ndarray:
    """``x`` ``[W, A', ...]`` padded with ``fill`` to ``[W, a, ...]``."""
    pad = [(0, 0), (0, a - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    return np.pad(x, pad, constant_values=fill)


def read_field_blocks(p: AgriFilesParams) -> FieldBlocks:
    """Join the four inputs of ``p.root`` into field blocks (003 §3.1.1 steps i–ii)."""
    root = Path(p.root)
    blocks_path = root / "blocks.csv"
    table = read_csv(blocks_path, _BLOCK_COLUMNS, "field-block table")
    ids = table.text("block_id")
    region, climate = table.numbers("region"), table.text("climate")
    _context(blocks_path, ids, region, climate)
    bbox = np.stack([table.numbers(c) for c in ("xmin", "ymin", "xmax", "ymax")], axis=1)
    crop = block_crops(read_cdl(root / "cdl.tif"), bbox, ids)
    soils = read_soil_table(root / "soil.csv", p.soil_depth_cm)
    mukey = table.text("mukey")
    missing = [m for m in mukey if m not in soils]
    if missing:
        raise DataError(f"{blocks_path}: mukey {missing[0]} is not in {root / 'soil.csv'}")
    soil = {c: np.array([soils[m][c] for m in mukey]) for c in SOIL_COLUMNS}
    series = [read_block_series(root / "weekly" / f"{b}.csv", p.season_start, p.weeks) for b in ids]
    for b, s in zip(ids, series, strict=True):
        empty = [c for c in SENSOR_COLUMNS if np.isnan(s.sensors[c]).any()]
        if empty:
            raise DataError(f"{root / 'weekly' / f'{b}.csv'}: column {empty[0]!r} has no value")
    a = max(s.valid.shape[1] for s in series)
    imagery = np.stack([_pad_acquisitions(s.imagery, a, 0.0) for s in series])
    cloud = np.stack([_pad_acquisitions(s.cloud, a, 1.0) for s in series])
    valid = np.stack([_pad_acquisitions(s.valid, a, False) for s in series])
    comp, clear = weekly_composite(imagery, cloud, valid, p.cloud_max)
    weekly = {c: comp[..., i] for i, c in enumerate(IMAGERY_COLUMNS)}
    weekly.update({c: np.stack([s.sensors[c] for s in series]) for c in SENSOR_COLUMNS})
    weekly["clear"] = clear
    static_cols = (
        "soil_p_ppm",
        "soil_k_ppm",
        "yield_goal_t_ha",
        "yield_t_ha",
        "prev_legume",
        "irrigated",
        "elevation_m",
    )
    return FieldBlocks(
        block_id=ids.astype(str),
        farm=_codes(table.text("farm")),
        tractor=_codes(table.text("tractor")),
        region=(region - 1).astype(np.int64),
        climate=np.array([CLIMATES.index(c) for c in climate], dtype=np.int64),
        crop=crop,
        soil=soil,
        static={c: table.numbers(c) for c in static_cols},
        weekly=weekly,
        link_profile=np.full(ids.size, -1, dtype=np.int64),
    )


@DATASETS.register("agri_files", params=AgriFilesParams)
def build_agri_files(params: AgriFilesParams, *, cache_dir: Path) -> ArrayDataset:
    """Paper 003's Task A / Task B rows from CDL, SSURGO and weekly VI files.

    Args:
        params: Dataset parameters.
        cache_dir: Unused (tables are small and parsed directly).
    """
    return blocks_to_dataset(read_field_blocks(params), params.task, f"agri_files_{params.task}")
