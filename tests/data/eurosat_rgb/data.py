"""Seeded EuroSAT RGB fixture in the real on-disk format.

Writes what ``EuroSAT.zip`` holds, 10 classes x 3 images::

    <root>/2750/<Class>/<Class>_<n>.jpg      (n = 1..3, 64 x 64 RGB JPEG)

:func:`make_zip` writes the same members into ``<root>/EuroSAT.zip``. Images are smooth
colour gradients so JPEG round-trips stay within a few grey levels of :func:`expected`.

Usage (from the repository root): ``python -m tests.data.eurosat_rgb.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image
from tests.data.fixture_io import fixture_cli, write_tree, write_zip

from geofl.data.base import EUROSAT_CLASSES

CLASSES = EUROSAT_CLASSES  # the real archive's class folders
PER_CLASS = 3
SIZE = 64
PREFIX = "2750"


def expected(seed: int = 0) -> dict[str, np.ndarray]:
    """Root-relative path -> ``[64, 64, 3]`` uint8 image as encoded (before JPEG loss)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    out: dict[str, np.ndarray] = {}
    for cls in CLASSES:
        for n in range(1, PER_CLASS + 1):
            base = rng.uniform(50, 200, size=3)
            gx, gy = rng.uniform(-0.6, 0.6, size=(2, 3))
            img = base + xx[..., None] * gx + yy[..., None] * gy
            out[f"{PREFIX}/{cls}/{cls}_{n}.jpg"] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return out


def encode(img: np.ndarray) -> bytes:
    """JPEG bytes of a ``[H, W, 3]`` uint8 image (quality 95)."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def make_fixture(root: Path, seed: int = 0) -> Path:
    """Write the extracted layout under ``root``; returns ``root``."""
    return write_tree(root, {rel: encode(img) for rel, img in expected(seed).items()})


def make_zip(root: Path, seed: int = 0, name: str = "EuroSAT.zip") -> Path:
    """Write ``root/name`` holding ``2750/<Class>/<Class>_<n>.jpg``; returns the zip path."""
    return write_zip(Path(root) / name, {rel: encode(img) for rel, img in expected(seed).items()})


if __name__ == "__main__":
    fixture_cli(__doc__ or "", make_fixture, make_zip)
