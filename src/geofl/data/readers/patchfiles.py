"""Reading per-patch GeoTIFF datasets (SEN12MS, BigEarthNet): files, georeference, caps.

Shared by :mod:`geofl.data.readers.sen12ms` and :mod:`geofl.data.readers.bigearthnet`, which read
their files with tifffile only (no GDAL/rasterio): a GeoTIFF's pixels, its UTM georeference
(``ModelTiepoint``, ``ModelPixelScale`` and the ``ProjectedCSTypeGeoKey`` EPSG code), the
inverse UTM projection to latitude/longitude, a seeded sample cap and the cache key's
source part (:func:`fingerprint`), with errors that are one-line
:class:`~geofl.errors.DataError` naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tifffile

from geofl.data.readers.formats import as_uint16, read_band_tiff
from geofl.data.readers.imagefolder import ImageFormatError
from geofl.data.storage.cache import file_manifest, manifest_digest
from geofl.errors import DataError
from geofl.rng import numpy_generator

__all__ = [
    "GeoRef",
    "cap_indices",
    "fingerprint",
    "read_geotiff",
    "season_of_month",
    "utm_to_latlon",
]

_DN_ADVICE = "expected uint16 digital numbers (reflectance x 10000) as in the release"


class GeoRef(NamedTuple):
    """A north-up UTM GeoTIFF's georeference: EPSG code, upper-left corner, pixel size (m)."""

    epsg: int
    x0: float
    y0: float
    dx: float
    dy: float

    def centre(self, height: int, width: int) -> tuple[float, float]:
        """Easting and northing of the centre of a ``height x width`` image."""
        return self.x0 + self.dx * width / 2, self.y0 - self.dy * height / 2


def read_geotiff(path: Path, *, uint16: bool = True) -> tuple[np.ndarray, GeoRef | None]:
    """Pixels ``[C, H, W]`` of a GeoTIFF and its UTM georeference (None without one).

    Args:
        path: The file.
        uint16: Require unsigned digital numbers in 0..65535 (returned as uint16).

    Raises:
        DataError: naming the file, when it is missing, unreadable or of another pixel type.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"missing file {path}; the patch is incomplete: re-extract it") from None
    try:
        arr, _ = read_band_tiff(data)
        if uint16:
            arr = as_uint16(arr, _DN_ADVICE)
        with tifffile.TiffFile(path) as tif:
            geo = _georef(tif.pages.first.tags)
    except ImageFormatError as err:
        raise DataError(f"{path} {err}; replace the file") from err
    except Exception as err:  # tifffile raises many types on corrupt files
        detail = " ".join(str(err).split())
        raise DataError(
            f"cannot read {path} ({type(err).__name__}: {detail}); replace the file"
        ) from err
    return arr, geo


def _georef(tags: tifffile.TiffTags) -> GeoRef | None:
    """The UTM georeference of a page's GeoTIFF tags, if it has one."""
    tie, scale, keys = (tags.get(t) for t in (33922, 33550, 34735))
    if tie is None or scale is None or keys is None:
        return None
    k = list(keys.value)
    entries = {k[i]: k[i + 3] for i in range(4, 4 + 4 * k[3], 4) if i + 3 < len(k)}
    epsg = int(entries.get(3072, 0))
    t, s = tie.value, scale.value
    return GeoRef(epsg, float(t[3]), float(t[4]), float(s[0]), float(s[1]))


def utm_to_latlon(
    easting: np.ndarray, northing: np.ndarray, epsg: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Latitude and longitude (degrees, WGS 84) of UTM coordinates (Snyder, 1987, §8).

    Args:
        easting: ``[N]`` metres.
        northing: ``[N]`` metres.
        epsg: ``[N]`` int EPSG codes, 326zz (north) or 327zz (south); others give NaN.

    Returns:
        ``lat [N]`` and ``lon [N]`` float64 (accurate to well under a metre).
    """
    a, f, k0 = 6378137.0, 1 / 298.257223563, 0.9996
    e2 = f * (2 - f)
    ep2 = e2 / (1 - e2)
    epsg = np.asarray(epsg)
    north, south = (epsg // 100 == 326), (epsg // 100 == 327)
    zone = np.where(north | south, epsg % 100, 0)
    x = np.asarray(easting, np.float64) - 500000.0
    y = np.asarray(northing, np.float64) - np.where(south, 1e7, 0.0)
    mu = y / k0 / (a * (1 - e2 / 4 - 3 * e2**2 / 64 - 5 * e2**3 / 256))
    e1 = (1 - math.sqrt(1 - e2)) / (1 + math.sqrt(1 - e2))
    phi = (
        mu
        + (3 * e1 / 2 - 27 * e1**3 / 32) * np.sin(2 * mu)
        + (21 * e1**2 / 16 - 55 * e1**4 / 32) * np.sin(4 * mu)
        + (151 * e1**3 / 96) * np.sin(6 * mu)
        + (1097 * e1**4 / 512) * np.sin(8 * mu)
    )
    sin, cos, tan = np.sin(phi), np.cos(phi), np.tan(phi)
    n1 = a / np.sqrt(1 - e2 * sin**2)
    t1, c1 = tan**2, ep2 * cos**2
    r1 = a * (1 - e2) / (1 - e2 * sin**2) ** 1.5
    d = x / (n1 * k0)
    lat = phi - (n1 * tan / r1) * (
        d**2 / 2
        - (5 + 3 * t1 + 10 * c1 - 4 * c1**2 - 9 * ep2) * d**4 / 24
        + (61 + 90 * t1 + 298 * c1 + 45 * t1**2 - 252 * ep2 - 3 * c1**2) * d**6 / 720
    )
    dlon = (
        d
        - (1 + 2 * t1 + c1) * d**3 / 6
        + (5 - 2 * c1 + 28 * t1 - 3 * c1**2 + 8 * ep2 + 24 * t1**2) * d**5 / 120
    ) / cos
    valid = north | south
    lon = np.degrees(dlon) + (zone - 1) * 6 - 177
    return np.where(valid, np.degrees(lat), np.nan), np.where(valid, lon, np.nan)


def season_of_month(month: np.ndarray) -> np.ndarray:
    """Meteorological season code (0 winter: Dec-Feb, 1 spring, 2 summer, 3 fall) ``[N]``."""
    return (np.asarray(month, np.int64) % 12) // 3


def cap_indices(n: int, max_samples: int | None, seed: int, name: str) -> np.ndarray:
    """Sorted indices of a seeded uniform subset of ``max_samples`` of ``n`` (all if None)."""
    if max_samples is None or max_samples >= n:
        return np.arange(n)
    rng = numpy_generator(seed, name, "cap")
    return np.sort(rng.choice(n, size=max_samples, replace=False))


def fingerprint(
    paths: Sequence[Path], *, root: Path | None = None, labels: Sequence[Path] = ()
) -> dict[str, int | str]:
    """The cache key's source part: what decoding reads (:mod:`geofl.data.storage.cache`).

    Args:
        paths: Image files, stat'd: path (relative to ``root``), size and mtime of each.
        root: Paths are written relative to it (the loaders' key specs hold ``root``).
        labels: Label files, hashed by content (sha256).

    Returns:
        ``manifest`` (sha256 hex of those rows, in order) and, for people reading a store
        header, the ``files`` count and their total ``bytes``. A missing file is a row of
        its own (decoding then names it).
    """
    rows = file_manifest(paths, root=root) + file_manifest(labels, root=root, content=True)
    return {
        "manifest": manifest_digest(rows),
        "files": len(rows),
        "bytes": sum(max(int(r[1]), 0) for r in rows),
    }
