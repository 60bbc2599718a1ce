"""Seeded UC Merced Land Use fixture in the real on-disk format.

Writes the layout of ``UCMerced_LandUse.zip``, 21 classes x 2 images::

    <root>/UCMerced_LandUse/Images/<class>/<class>NN.tif    (NN = 00, 01)

as uncompressed RGB TIFFs like the original. Image ``00`` of each class is
``side x side``; image ``01`` is slightly smaller in one dimension, like the few
non-256 x 256 originals. :func:`make_zip` writes ``<root>/UCMerced_LandUse.zip``.

Usage (from the repository root): ``python -m tests.data.ucmerced.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from tests.data.fixture_io import fixture_cli, write_tree, write_zip

CLASSES: tuple[str, ...] = (
    "agricultural",
    "airplane",
    "baseballdiamond",
    "beach",
    "buildings",
    "chaparral",
    "denseresidential",
    "forest",
    "freeway",
    "golfcourse",
    "harbor",
    "intersection",
    "mediumresidential",
    "mobilehomepark",
    "overpass",
    "parkinglot",
    "river",
    "runway",
    "sparseresidential",
    "storagetanks",
    "tenniscourt",
)
PER_CLASS = 2
PREFIX = "UCMerced_LandUse/Images"


def expected(seed: int = 0, side: int = 32, ext: str = ".tif") -> dict[str, np.ndarray]:
    """Root-relative path -> ``[H, W, 3]`` uint8 image as encoded (smooth gradients)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for cls in CLASSES:
        for n in range(PER_CLASS):
            h, w = (side, side) if n == 0 else (side, side - 3)
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float64) * (32.0 / side)
            base = rng.uniform(50, 200, size=3)
            gx, gy = rng.uniform(-1.5, 1.5, size=(2, 3))
            img = base + xx[..., None] * gx + yy[..., None] * gy
            out[f"{PREFIX}/{cls}/{cls}{n:02d}{ext}"] = np.clip(np.rint(img), 0, 255).astype(
                np.uint8
            )
    return out


def encode(img: np.ndarray, ext: str = ".tif") -> bytes:
    """File bytes of a ``[H, W, 3]`` uint8 image: uncompressed TIFF, or JPEG quality 95."""
    buf = io.BytesIO()
    if ext == ".tif":
        Image.fromarray(img).save(buf, format="TIFF")
    else:
        Image.fromarray(img).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def make_fixture(root: Path, seed: int = 0, *, side: int = 32, ext: str = ".tif") -> Path:
    """Write the extracted layout under ``root``; returns ``root``."""
    return write_tree(
        root, {rel: encode(img, ext) for rel, img in expected(seed, side, ext).items()}
    )


def make_zip(root: Path, seed: int = 0, name: str = "UCMerced_LandUse.zip") -> Path:
    """Write ``root/name`` with the same members as :func:`make_fixture`; returns its path."""
    return write_zip(Path(root) / name, {rel: encode(img) for rel, img in expected(seed).items()})


if __name__ == "__main__":
    fixture_cli(__doc__ or "", make_fixture, make_zip)
