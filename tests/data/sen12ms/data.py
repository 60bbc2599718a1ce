"""Seeded SEN12MS fixture in the real on-disk format (13-band s2 and 4-band lc GeoTIFFs).

Writes two seasonal ROI sets as the release's tarballs extract them::

    <root>/ROIs1158_spring/s2_<scene>/ROIs1158_spring_s2_<scene>_p<patch>.tif
    <root>/ROIs1158_spring/lc_<scene>/ROIs1158_spring_lc_<scene>_p<patch>.tif

(``suffixed=True``: ``<root>/ROIs1158_spring_s2/s2_<scene>/...`` and
``<root>/ROIs1158_spring_lc/lc_<scene>/...``). ``s2`` files are ``SIZE x SIZE x 13``
uint16, ``lc`` files ``SIZE x SIZE x 4`` uint16 (IGBP, LCCS-LC, LCCS-LU, LCCS-SH), both
pixel-interleaved with GeoTIFF tags (UTM 32N, 10 m pixels). Band 1 of ``lc`` mixes two
IGBP classes so that the majority simplified class (:data:`LABELS`) is known.
The release's patches are 256 x 256; the fixture's are ``SIZE`` to stay small.

Usage (from the repository root): ``python -m tests.data.sen12ms.data OUT_DIR [--seed N]``
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tests.data.eurosat_ms.data import encode
from tests.data.fixture_io import fixture_cli, write_tree, write_zip

SIZE = 32
#: (ROI set, scene, patch, majority IGBP, minority IGBP) per patch, in loader order.
PATCHES: tuple[tuple[str, int, int, int, int], ...] = (
    ("ROIs1158_spring", 1, 30, 12, 10),  # croplands over grassland
    ("ROIs1158_spring", 1, 31, 17, 11),  # water with wetlands
    ("ROIs1158_spring", 2, 5, 2, 14),  # evergreen broadleaf forest, mosaic
    ("ROIs2017_winter", 7, 2, 15, 16),  # snow and ice over barren
    ("ROIs2017_winter", 7, 10, 13, 9),  # urban with savanna
)
#: Simplified class index (0..9) of each patch's majority.
LABELS: tuple[int, ...] = (5, 9, 0, 7, 6)
#: Season code (0 winter, 1 spring) and region of each patch.
SEASONS: tuple[int, ...] = (1, 1, 1, 0, 0)
REGIONS: tuple[str, ...] = (
    "ROIs1158_spring_s2_1",
    "ROIs1158_spring_s2_1",
    "ROIs1158_spring_s2_2",
    "ROIs2017_winter_s2_7",
    "ROIs2017_winter_s2_7",
)


def _paths(roi: str, scene: int, patch: int, suffixed: bool) -> tuple[str, str]:
    s2_dir, lc_dir = (f"{roi}_s2", f"{roi}_lc") if suffixed else (roi, roi)
    return (
        f"{s2_dir}/s2_{scene}/{roi}_s2_{scene}_p{patch}.tif",
        f"{lc_dir}/lc_{scene}/{roi}_lc_{scene}_p{patch}.tif",
    )


def expected(seed: int = 0, suffixed: bool = False) -> dict[str, np.ndarray]:
    """Root-relative path → ``[H, W, C]`` uint16 array exactly as written (s2 and lc)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for roi, scene, patch, major, minor in PATCHES:
        s2, lc = _paths(roi, scene, patch, suffixed)
        out[s2] = rng.integers(0, 6000, size=(SIZE, SIZE, 13), dtype=np.uint16)
        igbp = np.full((SIZE, SIZE), major, np.uint16)
        igbp[: SIZE * 2 // 5] = minor  # 40 % minority class
        others = rng.integers(1, 10, size=(SIZE, SIZE, 3), dtype=np.uint16)
        out[lc] = np.concatenate([igbp[..., None], others], axis=2)
    return out


def make_fixture(root: Path, seed: int = 0, suffixed: bool = False) -> Path:
    """Write the extracted layout under ``root``; returns ``root``."""
    files = {rel: encode(img) for rel, img in expected(seed, suffixed).items()}
    return write_tree(root, files)


def make_zip(root: Path, seed: int = 0) -> Path:
    """The same members in ``root/sen12ms.zip`` (for inspection; the loader reads folders)."""
    files = {rel: encode(img) for rel, img in expected(seed).items()}
    return write_zip(Path(root) / "sen12ms.zip", files)


if __name__ == "__main__":
    fixture_cli(__doc__ or "", make_fixture, make_zip)
