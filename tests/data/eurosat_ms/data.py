"""Seeded EuroSAT MS fixture in the real on-disk format (13-band GeoTIFFs).

Writes the layout inside ``EuroSATallBands.zip``, 10 classes x 3 images::

    <root>/ds/images/remote_sensing/otherDatasets/sentinel_2/tif/<Class>/<Class>_<n>.tif

Each file is a 64 x 64 x 13 uint16 TIFF, pixel-interleaved (``planarconfig=contig``,
13 samples per pixel) with basic GeoTIFF tags (UTM 32N, 10 m pixels), bands in Sentinel-2
order B01..B12. :func:`make_zip` writes the same members into
``<root>/EuroSATallBands.zip``.

Usage (from the repository root): ``python -m tests.data.eurosat_ms.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import tifffile
from tests.data.fixture_io import fixture_cli, write_tree, write_zip

from geofl.data.base import EUROSAT_CLASSES

CLASSES = EUROSAT_CLASSES  # the real archive's class folders
PER_CLASS = 3
SIZE = 64
BANDS = 13
PREFIX = "ds/images/remote_sensing/otherDatasets/sentinel_2/tif"

# GeoTIFF: ModelPixelScale, ModelTiepoint, GeoKeyDirectory (projected, pixel-is-area, EPSG).
_GEO_KEYS = (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32632)


def expected(seed: int = 0) -> dict[str, np.ndarray]:
    """Root-relative path -> ``[64, 64, 13]`` uint16 image exactly as written."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for cls in CLASSES:
        for n in range(1, PER_CLASS + 1):
            img = rng.integers(0, 5000, size=(SIZE, SIZE, BANDS), dtype=np.uint16)
            img[0, 0, :] = 65535  # full uint16 range survives
            out[f"{PREFIX}/{cls}/{cls}_{n}.tif"] = img
    return out


def encode(img: np.ndarray, planarconfig: str = "contig") -> bytes:
    """GeoTIFF bytes of an image: ``[H, W, C]`` for contig, ``[C, H, W]`` for separate."""
    buf = io.BytesIO()
    extratags = [
        (33550, "d", 3, (10.0, 10.0, 0.0), True),
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 5000000.0, 0.0), True),
        (34735, "H", len(_GEO_KEYS), _GEO_KEYS, True),
    ]
    tifffile.imwrite(
        buf,
        img,
        photometric="minisblack",
        planarconfig=planarconfig,
        extratags=extratags,
        metadata=None,
    )
    return buf.getvalue()


def make_fixture(root: Path, seed: int = 0) -> Path:
    """Write the extracted layout under ``root``; returns ``root``."""
    return write_tree(root, {rel: encode(img) for rel, img in expected(seed).items()})


def make_zip(root: Path, seed: int = 0, name: str = "EuroSATallBands.zip") -> Path:
    """Write ``root/name`` with the same members as :func:`make_fixture`; returns its path."""
    return write_zip(Path(root) / name, {rel: encode(img) for rel, img in expected(seed).items()})


if __name__ == "__main__":
    fixture_cli(__doc__ or "", make_fixture, make_zip)
