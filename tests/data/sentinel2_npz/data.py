"""Seeded Sentinel-2 patch ``.npz`` fixture in the format of ``slums_s2_32px.npz``.

Writes ``<root>/patches.npz`` with the keys of the real file::

    images  [N, 4, side, side] uint16   reflectance x 10000
    labels  [N] int64                   0 / 1
    ids     [N] int64                   0..N-1
    bands   [4] <U3                     ("B02", "B03", "B04", "B8A")

Patches come from two surface types so the region rule has structure to find: bright
built-up patches (flat spectrum, low NDVI) and vegetated ones (NIR well above red).
Patch 0 is constant: B04 = 1000 and B8A = 3000 everywhere, so its NDVI is exactly
(0.3 − 0.1) / (0.3 + 0.1) = 0.5.

Usage (from the repository root): ``python -m tests.data.sentinel2_npz.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

BANDS: tuple[str, ...] = ("B02", "B03", "B04", "B8A")
N, SIDE = 24, 8
#: Band spectra (reflectance x 10000) of the two surface types.
BUILT = np.array([1400.0, 1300.0, 1300.0, 1600.0])
VEGETATION = np.array([500.0, 800.0, 500.0, 3500.0])
#: The constant patch 0 (B04 = 0.1, B8A = 0.3 reflectance: NDVI 0.5).
PATCH0 = np.array([700, 900, 1000, 3000], np.uint16)


def expected(seed: int = 0, n: int = N, side: int = SIDE) -> dict[str, np.ndarray]:
    """The arrays of the fixture file."""
    rng = np.random.default_rng(seed)
    vegetated = np.arange(n) % 2 == 1
    base = np.where(vegetated[:, None], VEGETATION, BUILT)  # [N, 4]
    noise = rng.normal(0.0, 60.0, size=(n, len(BANDS), side, side))
    images = np.clip(np.rint(base[:, :, None, None] + noise), 0, 65535).astype(np.uint16)
    images[0] = PATCH0[:, None, None]
    labels = (rng.uniform(size=n) < np.where(vegetated, 0.3, 0.8)).astype(np.int64)
    labels[:2] = (0, 1)  # both classes present
    return {
        "images": images,
        "labels": labels,
        "ids": np.arange(n, dtype=np.int64),
        "bands": np.array(BANDS),
    }


def make_fixture(root: Path, seed: int = 0, name: str = "patches.npz") -> Path:
    """Write ``root/name``; returns its path."""
    path = Path(root) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **expected(seed))
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(make_fixture(args.out, args.seed))
