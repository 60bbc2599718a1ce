"""Weekly vegetation-index CSVs, one per field block (003 Table 2: MODIS/Sentinel-2 indices).

``<dir>/<block_id>.csv`` holds the block's time series, one row per date::

    date, cloud_frac, ndvi, evi, blue, green, red, red_edge, nir, swir1,
    air_temp_max_c, air_temp_mean_c, rain_mm, soil_moisture, soil_temp_c, vpd_kpa,
    leaf_wetness_h, no3_n_ppm, n_applied_kg_ha

``date`` is ISO (YYYY-MM-DD); week ``(date − season_start).days // 7``; rows outside the
season's weeks are ignored. A row with imagery values is an acquisition (indices and
reflectance of the block, ``cloud_frac`` its cloud fraction) and goes through
:func:`~geofl.data.agri.pipeline.weekly_composite` (003 §3.1.1 step ii); imagery cells may be
empty on sensor-only rows. Sensor cells are averaged per week, except ``rain_mm`` and
``n_applied_kg_ha`` which are summed (amounts since the previous row); a week without any
sensor value is interpolated linearly (amounts: 0). A file exported with one row per week
passes through unchanged.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from geofl.data.agri.csvtable import read_csv
from geofl.data.agri.tables import IMAGERY_COLUMNS, SENSOR_COLUMNS
from geofl.errors import DataError

__all__ = ["BlockSeries", "read_block_series"]

_SUMMED = ("rain_mm", "n_applied_kg_ha")


class BlockSeries:
    """One block's acquisitions and weekly sensors.

    Attributes:
        imagery: ``[W, A, 8]`` per-acquisition values (:data:`IMAGERY_COLUMNS` order).
        cloud: ``[W, A]`` cloud fractions.
        valid: ``[W, A]`` bool, False for padding.
        sensors: :data:`SENSOR_COLUMNS` → ``[W]`` weekly values.
    """

    def __init__(
        self,
        imagery: np.ndarray,
        cloud: np.ndarray,
        valid: np.ndarray,
        sensors: dict[str, np.ndarray],
    ) -> None:
        self.imagery, self.cloud, self.valid, self.sensors = imagery, cloud, valid, sensors


def _weeks(dates: np.ndarray, start: dt.date, path: Path) -> np.ndarray:
    out = np.empty(dates.size, dtype=np.int64)
    for k, d in enumerate(dates):
        try:
            out[k] = (dt.date.fromisoformat(str(d)) - start).days // 7
        except ValueError:
            raise DataError(
                f"{path} line {k + 2}: column 'date' value {d!r} is not an ISO date (YYYY-MM-DD)"
            ) from None
    return out


def read_block_series(path: Path, season_start: dt.date, weeks: int) -> BlockSeries:
    """Read one block's CSV (see the module docstring).

    Raises:
        DataError: naming the file, line and column for a missing file or column, a bad
            date or number, or a cloud fraction outside [0, 1].
    """
    cols = ("date", "cloud_frac", *IMAGERY_COLUMNS, *SENSOR_COLUMNS)
    table = read_csv(path, cols, "weekly vegetation-index CSV")
    week = _weeks(table.text("date"), season_start, Path(path))
    keep = (week >= 0) & (week < weeks)
    img = np.stack([table.numbers(c, allow_empty=True) for c in IMAGERY_COLUMNS], axis=1)
    cloud = table.numbers("cloud_frac", allow_empty=True)
    acq = keep & np.isfinite(img).all(axis=1)
    if np.any(acq & ~((cloud >= 0) & (cloud <= 1))):
        line = int(np.flatnonzero(acq & ~((cloud >= 0) & (cloud <= 1)))[0]) + 2
        raise DataError(f"{path} line {line}: column 'cloud_frac' must be in [0, 1]")
    per_week = np.bincount(week[acq], minlength=weeks)
    a = max(int(per_week.max(initial=0)), 1)
    imagery, clouds = np.zeros((weeks, a, len(IMAGERY_COLUMNS))), np.ones((weeks, a))
    valid = np.zeros((weeks, a), dtype=bool)
    slot = np.zeros(weeks, dtype=np.int64)
    for k in np.flatnonzero(acq):
        t = week[k]
        imagery[t, slot[t]], clouds[t, slot[t]], valid[t, slot[t]] = img[k], cloud[k], True
        slot[t] += 1
    sensors = {
        c: _weekly(table.numbers(c, allow_empty=True), week, keep, weeks, c) for c in SENSOR_COLUMNS
    }
    return BlockSeries(imagery, clouds, valid, sensors)


def _weekly(v: np.ndarray, week: np.ndarray, keep: np.ndarray, weeks: int, name: str) -> np.ndarray:
    """``[W]`` weekly mean (sum for amounts) of a sensor column, gaps interpolated."""
    ok = keep & np.isfinite(v)
    total = np.bincount(week[ok], weights=v[ok], minlength=weeks)
    if name in _SUMMED:
        return np.asarray(total)
    count = np.bincount(week[ok], minlength=weeks)
    have = count > 0
    if not have.any():
        return np.full(weeks, np.nan)
    t = np.arange(weeks, dtype=np.float64)
    mean = np.where(have, total / np.maximum(count, 1), 0.0)
    return np.asarray(np.interp(t, t[have], mean[have]))
