"""SSURGO / gSSURGO soil attribute tables → soil properties per map unit (003 Table 2).

The input is a CSV export of the component table joined with its horizons (``chorizon``),
one row per (component, horizon), with the NRCS column names::

    mukey, cokey, comppct_r, hzdept_r, hzdepb_r, ph1to1h2o_r, om_r, cec7_r,
    sandtotal_r, silttotal_r, claytotal_r, awc_r, dbthirdbar_r

(depths in cm, OM %, CEC meq/100 g, AWC cm/cm, bulk density g/cm³; empty cells are NULLs).
A property of a map unit (``mukey``) is the usual gSSURGO aggregation for a surface layer:
within a component, the depth-weighted mean over the overlap of each horizon with
0–``depth_cm`` (default 30 cm, the depth of 003's nutrient probes); across components,
the mean weighted by ``comppct_r`` over components with a value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from geofl.data.agri.csvtable import read_csv
from geofl.errors import DataError

__all__ = ["SSURGO_COLUMNS", "read_soil_table"]

#: NRCS column of each soil property of :data:`~geofl.data.agri.tables.SOIL_COLUMNS`.
SSURGO_COLUMNS: dict[str, str] = {
    "soil_ph": "ph1to1h2o_r",
    "soil_om_pct": "om_r",
    "soil_cec": "cec7_r",
    "sand_pct": "sandtotal_r",
    "silt_pct": "silttotal_r",
    "clay_pct": "claytotal_r",
    "awc": "awc_r",
    "bulk_density": "dbthirdbar_r",
}
_KEYS = ("mukey", "cokey", "comppct_r", "hzdept_r", "hzdepb_r")


def read_soil_table(path: Path, depth_cm: float = 30.0) -> dict[str, dict[str, float]]:
    """Soil properties per map unit.

    Returns:
        ``{mukey: {property: value}}`` with every key of
        :data:`~geofl.data.agri.tables.SOIL_COLUMNS`.

    Raises:
        DataError: naming the file (and line / column) for a missing file or column, a
            non-number, a horizon whose bottom is not below its top, or a map unit without
            a value of some property in 0–``depth_cm``.
    """
    table = read_csv(path, (*_KEYS, *SSURGO_COLUMNS.values()), "SSURGO soil table")
    mukey, cokey = table.text("mukey"), table.text("cokey")
    pct = table.numbers("comppct_r")
    top, bottom = table.numbers("hzdept_r"), table.numbers("hzdepb_r")
    bad = np.flatnonzero(bottom <= top)
    if bad.size:
        raise DataError(
            f"{path} line {int(bad[0]) + 2}: hzdepb_r ({bottom[bad[0]]}) must exceed "
            f"hzdept_r ({top[bad[0]]})"
        )
    overlap = np.clip(np.minimum(bottom, depth_cm) - np.maximum(top, 0.0), 0.0, None)
    out: dict[str, dict[str, float]] = {str(m): {} for m in np.unique(mukey)}
    for prop, column in SSURGO_COLUMNS.items():
        values = table.numbers(column, allow_empty=True)
        for m in out:
            out[m][prop] = _aggregate(mukey == m, cokey, pct, overlap, values, path, m, column)
    return out


def _aggregate(
    rows: np.ndarray,
    cokey: np.ndarray,
    pct: np.ndarray,
    overlap: np.ndarray,
    values: np.ndarray,
    path: Path,
    mukey: str,
    column: str,
) -> float:
    """Component-weighted mean of the depth-weighted component means of one map unit."""
    total, weight = 0.0, 0.0
    for c in np.unique(cokey[rows]):
        hz = rows & (cokey == c) & (overlap > 0) & np.isfinite(values)
        if not hz.any():
            continue
        comp = float(np.sum(values[hz] * overlap[hz]) / np.sum(overlap[hz]))
        w = float(pct[rows & (cokey == c)][0])
        total, weight = total + w * comp, weight + w
    if weight <= 0:
        raise DataError(
            f"{path}: map unit {mukey} has no {column!r} value in its surface horizons "
            "(or only components with comppct_r 0)"
        )
    return total / weight
