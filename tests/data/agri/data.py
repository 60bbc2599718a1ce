"""Seeded fixture of paper 003's real input formats (``agri_files``).

Writes under ``root``:

* ``cdl.tif`` — a 10 × 12 CropScape/CDL GeoTIFF clip (uint8 crop codes, 30 m pixels,
  ModelPixelScale + ModelTiepoint with the upper-left corner at (500000, 2000000), a
  GeoKeyDirectory with EPSG:5070 and PixelIsArea). Four 6 × 5 quadrants are the four field
  blocks: B1 (rows 0–4, cols 0–5) corn with 8 soybean and 6 open-water pixels, B2 (rows
  0–4, cols 6–11) soybeans, B3 (rows 5–9, cols 0–5) winter wheat with 10 background
  pixels, B4 (rows 5–9, cols 6–11) 16 sorghum and 14 cotton pixels.
* ``soil.csv`` — SSURGO component × horizon rows for map units 100 and 200. Map unit 100:
  component 1 (60 %) has horizons 0–20 cm (OM 3.0) and 20–50 cm (OM 1.0), component 2
  (40 %) one horizon 0–40 cm (OM 2.0), so its 0–30 cm OM is
  0.6 · (3·20 + 1·10)/30 + 0.4 · 2.0 = 2.2.
* ``blocks.csv`` — the four blocks (two farms, three tractors, regions 1/1/2/3).
* ``weekly/B<k>.csv`` — 12 weeks from 2024-04-01, two acquisitions a week (days 1 and 4)
  with sensors; in B1 week 3 both acquisitions are cloudy (cloud 0.9 and 0.5) and week 2 has
  NDVI 0.5 (cloud 0.1) and 0.7 (cloud 0.05): its composite is 0.6.

Usage (from the repository root): ``python -m tests.data.agri.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import tifffile

SEASON_START = dt.date(2024, 4, 1)
WEEKS = 12
ORIGIN = (500000.0, 2000000.0)
PIXEL = 30.0
SOIL_HEADER = (
    "mukey,cokey,comppct_r,hzdept_r,hzdepb_r,ph1to1h2o_r,om_r,cec7_r,sandtotal_r,"
    "silttotal_r,claytotal_r,awc_r,dbthirdbar_r"
)
SOIL_ROWS = (
    "100,100-1,60,0,20,6.5,3.0,18,30,45,25,0.18,1.30",
    "100,100-1,60,20,50,6.8,1.0,15,28,44,28,0.16,1.45",
    "100,100-2,40,0,40,6.0,2.0,12,60,30,10,0.10,1.50",
    "200,200-1,100,0,30,7.9,1.2,9,70,20,10,0.08,1.55",
    "200,200-1,100,30,80,8.1,0.5,8,72,18,10,0.07,1.60",
)
BLOCK_HEADER = (
    "block_id,farm,tractor,region,climate,xmin,ymin,xmax,ymax,mukey,soil_p_ppm,soil_k_ppm,"
    "yield_goal_t_ha,yield_t_ha,prev_legume,irrigated,elevation_m"
)
VI_HEADER = (
    "date,cloud_frac,ndvi,evi,blue,green,red,red_edge,nir,swir1,air_temp_max_c,"
    "air_temp_mean_c,rain_mm,soil_moisture,soil_temp_c,vpd_kpa,leaf_wetness_h,no3_n_ppm,"
    "n_applied_kg_ha"
)


def cdl_codes() -> np.ndarray:
    """The ``[10, 12]`` uint8 crop-code raster (see the module docstring)."""
    codes = np.zeros((10, 12), dtype=np.uint8)
    codes[:5, :6] = 1  # corn
    codes[0, :6], codes[1, :2] = 5, 5  # 8 soybean pixels in B1
    codes[4, :6] = 111  # 6 open-water pixels in B1
    codes[:5, 6:] = 5  # soybeans
    codes[5:, :6] = 24  # winter wheat
    codes[5:7, :5] = 0  # 10 background pixels in B3
    codes[5:, 6:] = 2  # cotton ...
    codes[5:, 6:9], codes[5, 9] = 4, 4  # ... 16 sorghum pixels
    return codes


def write_cdl(path: Path, codes: np.ndarray) -> Path:
    """A CDL-style GeoTIFF with ModelPixelScale, ModelTiepoint and GeoKeyDirectory tags."""
    geokeys = (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 5070)
    tags = [
        (33550, "d", 3, (PIXEL, PIXEL, 0.0), False),
        (33922, "d", 6, (0.0, 0.0, 0.0, ORIGIN[0], ORIGIN[1], 0.0), False),
        (34735, "H", len(geokeys), geokeys, False),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tifffile.imwrite(path, codes, extratags=tags)
    return path


def _bbox(row0: int, col0: int) -> tuple[float, float, float, float]:
    """Map rectangle (xmin, ymin, xmax, ymax) of the 6 × 5 quadrant at (row0, col0)."""
    x0, y0 = ORIGIN
    return (x0 + col0 * PIXEL, y0 - (row0 + 5) * PIXEL, x0 + (col0 + 6) * PIXEL, y0 - row0 * PIXEL)


def block_rows() -> list[str]:
    """Rows of ``blocks.csv``."""
    spec = (
        ("B1", "farmA", "tA1", 1, "humid", 0, 0, "100", 4.2, 10.5, 1),
        ("B2", "farmA", "tA2", 1, "humid", 0, 6, "100", 3.5, 3.4, 0),
        ("B3", "farmB", "tB1", 2, "subhumid", 5, 0, "200", 4.8, 4.1, 1),
        ("B4", "farmB", "tB1", 3, "semiarid", 5, 6, "200", 6.0, 5.2, 0),
    )
    rows = []
    for bid, farm, tractor, region, climate, r0, c0, mukey, goal, y, legume in spec:
        box = ",".join(f"{v:.1f}" for v in _bbox(r0, c0))
        rows.append(
            f"{bid},{farm},{tractor},{region},{climate},{box},{mukey},20,150,{goal},{y},"
            f"{legume},0,300"
        )
    return rows


def vi_rows(block: int, rng: np.random.Generator) -> list[str]:
    """Rows of ``weekly/B<block+1>.csv``: 12 weeks × 2 acquisitions with sensors."""
    rows = []
    for week in range(WEEKS):
        for k, day in enumerate((1, 4)):
            date = SEASON_START + dt.timedelta(days=7 * week + day)
            ndvi = 0.3 + 0.04 * week + rng.normal(0, 0.01)
            cloud = float(rng.uniform(0, 0.15))
            if block == 0 and week == 2:
                ndvi, cloud = (0.5, 0.1) if k == 0 else (0.7, 0.05)
            if block == 0 and week == 3:
                cloud = 0.9 if k == 0 else 0.5
            evi = 0.62 * ndvi - 0.03
            bands = (0.04, 0.08, 0.1 - 0.05 * ndvi, 0.2, 0.2 + 0.3 * ndvi, 0.22)
            sensors = (28.0 + week * 0.3, 20.0 + 0.2 * week, 10.0 + k, 0.25, 18.0, 1.1, 6.0)
            no3 = 12.0 - 0.5 * week
            applied = 50.0 if (week == 1 and k == 0) else 0.0
            cells = (cloud, ndvi, evi, *bands, *sensors, no3, applied)
            rows.append(date.isoformat() + "," + ",".join(f"{v:.6g}" for v in cells))
    return rows


def make_fixture(root: Path, seed: int = 0) -> Path:
    """Write the fixture under ``root``; returns ``root``."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    write_cdl(root / "cdl.tif", cdl_codes())
    (root / "soil.csv").write_text("\n".join((SOIL_HEADER, *SOIL_ROWS)) + "\n")
    (root / "blocks.csv").write_text("\n".join((BLOCK_HEADER, *block_rows())) + "\n")
    (root / "weekly").mkdir(parents=True, exist_ok=True)
    for b in range(4):
        text = "\n".join((VI_HEADER, *vi_rows(b, rng))) + "\n"
        (root / "weekly" / f"B{b + 1}.csv").write_text(text)
    return root


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(make_fixture(args.out, args.seed))
