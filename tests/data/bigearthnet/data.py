"""Seeded BigEarthNet-S2 v1.0 fixture in the real on-disk format (per-band GeoTIFFs + JSON).

Writes four patch folders as ``BigEarthNet-S2-v1.0.tar.gz`` extracts them::

    <root>/BigEarthNet-v1.0/<patch>/<patch>_B01.tif ... <patch>_B12.tif
    <root>/BigEarthNet-v1.0/<patch>/<patch>_labels_metadata.json
    <root>/patches_with_cloud_and_shadow.csv          (lists the last patch)

Band files are single-band uint16 GeoTIFFs at native size: 120 x 120 (B02, B03, B04,
B08), 60 x 60 (B05, B06, B07, B8A, B11, B12), 20 x 20 (B01, B09); no B10. The JSON has
the release's keys with 43-class CORINE names (:data:`PATCHES`).

Usage (from the repository root): ``python -m tests.data.bigearthnet.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
from tests.data.fixture_io import fixture_cli, write_tree, write_zip

BANDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")
SIDE = {"B01": 20, "B09": 20, "B05": 60, "B06": 60, "B07": 60, "B8A": 60, "B11": 60, "B12": 60}
PREFIX = "BigEarthNet-v1.0"
#: (patch, labels, EPSG, centre easting, centre northing, acquisition date, MGRS tile).
PATCHES: tuple[tuple[str, tuple[str, ...], int, float, float, str, str], ...] = (
    (
        "S2A_MSIL1C_20170613T101031_0_45",
        (
            "Continuous urban fabric",
            "Discontinuous urban fabric",
            "Airports",
            "Non-irrigated arable land",
            "Sea and ocean",
            "Coastal lagoons",
        ),
        32629,
        560000.0,
        4400000.0,
        "2017-06-13 10:10:31",
        "29SND",
    ),  # Portugal, summer
    (
        "S2B_MSIL1C_20180204T094029_12_3",
        ("Coniferous forest", "Mixed forest", "Peatbogs", "Water bodies"),
        32635,
        400000.0,
        6900000.0,
        "2018-02-04 09:40:29",
        "35VMJ",
    ),  # Finland, winter
    (
        "S2A_MSIL1C_20171002T104021_7_7",
        ("Burnt areas", "Bare rock"),
        32629,
        560000.0,
        4400000.0,
        "2017-10-02 10:40:21",
        "29SND",
    ),  # Portugal, fall
    (
        "S2A_MSIL1C_20170717T100031_1_1",
        ("Pastures",),
        32633,
        500000.0,
        5300000.0,
        "2017-07-17 10:00:31",
        "33TWN",
    ),  # Austria, cloudy: listed
)
#: Expected 19-class multi-hot rows of the first three patches (the fourth is excluded).
LABELS_19: tuple[tuple[int, ...], ...] = (
    (0, 2, 18),  # urban fabric (x2), arable, marine (sea + lagoon); airports dropped
    (9, 10, 15, 17),  # coniferous, mixed, inland wetlands (peat bogs), inland waters
    (),  # burnt areas and bare rock have no 19-class label
)
_GEO_KEYS = (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1)


def _tif(img: np.ndarray, epsg: int, ulx: float, uly: float, pixel: float) -> bytes:
    buf = io.BytesIO()
    tags = [
        (33550, "d", 3, (pixel, pixel, 0.0), True),
        (33922, "d", 6, (0.0, 0.0, 0.0, ulx, uly, 0.0), True),
        (34735, "H", 16, (*_GEO_KEYS, epsg), True),
    ]
    tifffile.imwrite(buf, img, photometric="minisblack", extratags=tags, metadata=None)
    return buf.getvalue()


def band_arrays(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Patch name → band name → ``[side, side]`` uint16 as written."""
    rng = np.random.default_rng(seed)
    return {
        p[0]: {
            b: rng.integers(0, 8000, size=(SIDE.get(b, 120),) * 2, dtype=np.uint16) for b in BANDS
        }
        for p in PATCHES
    }


def _json(patch: tuple[Any, ...]) -> bytes:
    name, labels, epsg, east, north, date, tile = patch
    meta = {
        "labels": list(labels),
        "coordinates": {
            "ulx": east - 600,
            "uly": north + 600,
            "lrx": east + 600,
            "lry": north - 600,
        },
        "projection": f'PROJCS["WGS 84 / UTM",AUTHORITY["EPSG","{epsg}"]]',
        "tile_source": f"{name[:26]}_N0205_R022_T{tile}_{name[11:26]}",
        "acquisition_date": date,
    }
    return json.dumps(meta).encode()


def files(seed: int = 0) -> dict[str, bytes]:
    """Root-relative path → file bytes of the whole fixture."""
    arrays = band_arrays(seed)
    out: dict[str, bytes] = {}
    for patch in PATCHES:
        name, _, epsg, east, north = patch[:5]
        for band, img in arrays[name].items():
            pixel = 1200.0 / img.shape[0]
            out[f"{PREFIX}/{name}/{name}_{band}.tif"] = _tif(
                img, epsg, east - 600, north + 600, pixel
            )
        out[f"{PREFIX}/{name}/{name}_labels_metadata.json"] = _json(patch)
    out["patches_with_cloud_and_shadow.csv"] = f"{PATCHES[-1][0]}\n".encode()
    return out


def make_fixture(root: Path, seed: int = 0) -> Path:
    """Write the extracted layout under ``root``; returns ``root``."""
    return write_tree(root, files(seed))


def make_zip(root: Path, seed: int = 0) -> Path:
    """The same members in ``root/bigearthnet.zip`` (the loader reads folders)."""
    return write_zip(Path(root) / "bigearthnet.zip", files(seed))


if __name__ == "__main__":
    fixture_cli(__doc__ or "", make_fixture, make_zip)
