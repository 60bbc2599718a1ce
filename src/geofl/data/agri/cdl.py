"""CropScape / Cropland Data Layer GeoTIFF clips → per-block majority crop (003 §3.1.1 (i)).

A CDL clip (from CropScape's "download" of an area) is a single-band GeoTIFF of USDA NASS
crop codes, georeferenced by the GeoTIFF tags ModelPixelScale (33550) and ModelTiepoint
(33922) or by a ModelTransformation (34264) without rotation; GTRasterTypeGeoKey (1025)
= 2 (PixelIsPoint) shifts the grid by half a pixel. Field blocks are rectangles in the
raster's map coordinates; a pixel belongs to the block that contains its centroid
(003 §3.1.1's centroid-based assignment) and the block's crop is the majority crop class
over those pixels, non-crop land cover (:data:`~geofl.data.agri.catalog.CDL_NON_CROP_CODES`)
ignored, ties to the lower class index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile

from geofl.data.agri.catalog import CDL_CROP_CODES, CDL_NON_CROP_CODES, CROPS
from geofl.errors import DataError

__all__ = ["CropRaster", "block_crops", "read_cdl"]

_PIXEL_SCALE, _TIEPOINT, _TRANSFORM, _GEOKEYS = 33550, 33922, 34264, 34735
_RASTER_TYPE_KEY, _PIXEL_IS_POINT = 1025, 2


@dataclass(frozen=True)
class CropRaster:
    """A CDL raster on a north-up grid.

    Attributes:
        codes: ``[H, W]`` int64 CDL codes.
        x0: Map x of the left edge of column 0.
        y0: Map y of the top edge of row 0.
        dx: Pixel width (map units).
        dy: Pixel height (map units, positive; y decreases down the rows).
        path: The file read.
    """

    codes: np.ndarray
    x0: float
    y0: float
    dx: float
    dy: float
    path: Path


def _geotransform(tags: tifffile.TiffTags, path: Path) -> tuple[float, float, float, float]:
    """(x0, y0, dx, dy) of the pixel-corner grid from the GeoTIFF tags."""
    if _TRANSFORM in tags:
        m = [float(v) for v in tags[_TRANSFORM].value]
        if len(m) != 16 or m[1] != 0.0 or m[4] != 0.0:
            raise DataError(f"{path}: ModelTransformationTag with rotation is not supported")
        x0, y0, dx, dy = m[3], m[7], m[0], -m[5]
    elif _PIXEL_SCALE in tags and _TIEPOINT in tags:
        sx, sy = (float(v) for v in tags[_PIXEL_SCALE].value[:2])
        tie = [float(v) for v in tags[_TIEPOINT].value]
        if len(tie) < 6:
            raise DataError(f"{path}: ModelTiepointTag has {len(tie)} values, expected 6")
        i, j, x, y = tie[0], tie[1], tie[3], tie[4]
        x0, y0, dx, dy = x - i * sx, y + j * sy, sx, sy
    else:
        raise DataError(
            f"{path}: not georeferenced (no ModelPixelScale + ModelTiepoint or "
            "ModelTransformation tag); export the CDL clip as a GeoTIFF"
        )
    if not (dx > 0 and dy > 0):
        raise DataError(f"{path}: pixel size ({dx}, {dy}) must be positive")
    if _GEOKEYS in tags:
        keys = [int(v) for v in tags[_GEOKEYS].value]
        for k in range(4, len(keys) - 3, 4):  # header of 4, then (id, location, count, value)
            if keys[k] == _RASTER_TYPE_KEY and keys[k + 3] == _PIXEL_IS_POINT:
                x0, y0 = x0 - dx / 2, y0 + dy / 2
    return x0, y0, dx, dy


def read_cdl(path: Path) -> CropRaster:
    """Read a CDL GeoTIFF clip.

    Raises:
        DataError: naming the file when it is missing, not a TIFF, not a single-band
            integer raster, not georeferenced, or holds a code that is neither a known
            crop (:data:`~geofl.data.agri.catalog.CDL_CROP_CODES`) nor known non-crop land.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CDL raster {path} does not exist")
    try:
        with tifffile.TiffFile(path) as tif:
            page = tif.pages.first
            codes = np.asarray(page.asarray())
            x0, y0, dx, dy = _geotransform(page.tags, path)
    except (tifffile.TiffFileError, ValueError, OSError) as err:
        if isinstance(err, DataError):
            raise
        raise DataError(f"{path}: not a readable GeoTIFF ({err})") from err
    if codes.ndim != 2 or not np.issubdtype(codes.dtype, np.integer):
        raise DataError(
            f"{path}: expected a single-band integer crop-code raster, got "
            f"{codes.dtype} {codes.shape}"
        )
    codes = codes.astype(np.int64)
    known = set(CDL_CROP_CODES) | CDL_NON_CROP_CODES
    unknown = [int(c) for c in np.unique(codes) if int(c) not in known]
    if unknown:
        raise DataError(
            f"{path}: unknown CDL crop code {unknown[0]} ({int((codes == unknown[0]).sum())} "
            f"pixels); supported crop codes {sorted(CDL_CROP_CODES)} → {list(CROPS)}"
        )
    return CropRaster(codes, x0, y0, dx, dy, path)


def block_crops(raster: CropRaster, bbox: np.ndarray, block_id: np.ndarray) -> np.ndarray:
    """``[B]`` int64 majority crop class of every block (centroid assignment).

    Args:
        raster: The CDL raster.
        bbox: ``[B, 4]`` block rectangles (xmin, ymin, xmax, ymax) in map units; a pixel
            centroid on the min edge belongs to the block, on the max edge it does not.
        block_id: ``[B]`` block names for error messages.

    Raises:
        DataError: naming the block and the file when no crop pixel centre lies in it.
    """
    h, w = raster.codes.shape
    xc = raster.x0 + (np.arange(w) + 0.5) * raster.dx
    yc = raster.y0 - (np.arange(h) + 0.5) * raster.dy
    lookup = np.full(int(raster.codes.max()) + 1, -1, dtype=np.int64)
    for code, crop in CDL_CROP_CODES.items():
        if code < lookup.size:
            lookup[code] = crop
    classes = lookup[raster.codes]
    out = np.empty(len(block_id), dtype=np.int64)
    for k, (xmin, ymin, xmax, ymax) in enumerate(np.asarray(bbox, dtype=np.float64)):
        cols = np.flatnonzero((xc >= xmin) & (xc < xmax))
        rows = np.flatnonzero((yc >= ymin) & (yc < ymax))
        window = classes[np.ix_(rows, cols)]
        counts = np.bincount(window[window >= 0], minlength=len(CROPS))
        if counts.sum() == 0:
            raise DataError(
                f"{raster.path}: no crop pixel centre lies in field block {block_id[k]!s} "
                f"({xmin}, {ymin}, {xmax}, {ymax}); check its xmin/ymin/xmax/ymax"
            )
        out[k] = int(np.argmax(counts))
    return out
