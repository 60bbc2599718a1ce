"""EuroSAT (Helber et al., 2019): 10-class Sentinel-2 land-cover patches, RGB and 13-band.

Two registered datasets, both 64 × 64 patches at 10 m ground sample distance, 10 classes
(sorted, in label order): AnnualCrop, Forest, HerbaceousVegetation, Highway, Industrial,
Pasture, PermanentCrop, Residential, River, SeaLake.

``eurosat_rgb`` reads the JPEG release (``EuroSAT.zip`` / ``EuroSAT_RGB.zip``), with
``root`` being the zip itself or a folder holding one of::

    <root>/2750/<Class>/<Class>_<n>.jpg          (EuroSAT.zip)
    <root>/EuroSAT_RGB/<Class>/<Class>_<n>.jpg   (EuroSAT_RGB.zip)
    <root>/EuroSAT/<Class>/<Class>_<n>.jpg
    <root>/<Class>/<Class>_<n>.jpg

Bands ``("R", "G", "B")``; images are ``uint8 / 255``.

``eurosat_ms`` reads the 13-band GeoTIFF release (``EuroSATallBands.zip`` /
``EuroSAT_MS.zip``), with ``root`` being the zip itself or a folder holding one of::

    <root>/ds/images/remote_sensing/otherDatasets/sentinel_2/tif/<Class>/<Class>_<n>.tif
    <root>/EuroSAT_MS/<Class>/<Class>_<n>.tif
    <root>/EuroSATallBands/<Class>/<Class>_<n>.tif
    <root>/<Class>/<Class>_<n>.tif

Each file is a 64 × 64 × 13 uint16 GeoTIFF (pixel-interleaved ``HWC`` or band-separate
``CHW``), bands in :data:`geofl.data.base.SENTINEL2_BANDS` order; images are
``uint16 / 10000`` (top-of-atmosphere reflectance).

Patches whose size differs from ``size`` are resized bilinearly (with antialiasing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import (
    DATASETS,
    EUROSAT_CLASSES,
    SENTINEL2_BANDS,
    ArrayDataset,
    CacheMode,
)
from geofl.data.readers import imagefolder
from geofl.data.readers.formats import as_uint16, read_band_tiff, resize_bands
from geofl.data.readers.imagefolder import FolderSpec, ImageFormatError, decode_rgb

__all__ = [
    "EUROSAT_CLASSES",
    "EUROSAT_MS_SPEC",
    "EUROSAT_RGB_SPEC",
    "EuroSATMSParams",
    "EuroSATRGBParams",
    "build_eurosat_ms",
    "build_eurosat_rgb",
    "decode_ms",
]

#: Ground sample distance of Sentinel-2 10 m bands (all EuroSAT bands are resampled to it).
EUROSAT_GSD_M = 10.0
_MS_SCALE = 10000.0
_URL = "https://github.com/phelber/EuroSAT"

EUROSAT_RGB_SPEC = FolderSpec(
    name="eurosat_rgb",
    title="EuroSAT RGB",
    classes=EUROSAT_CLASSES,
    prefixes=("2750", "EuroSAT_RGB", "EuroSAT", ""),
    extensions=(".jpg", ".jpeg"),
    layout=(
        "<root>/2750/<Class>/<Class>_<n>.jpg, <root>/EuroSAT_RGB/<Class>/*.jpg or "
        "<root>/<Class>/*.jpg (or root= the EuroSAT.zip itself)"
    ),
    download=f"download EuroSAT.zip (RGB) from {_URL}",
    bands=("R", "G", "B"),
    dtype=np.uint8,
    scale=255.0,
    gsd_m=EUROSAT_GSD_M,
)

EUROSAT_MS_SPEC = FolderSpec(
    name="eurosat_ms",
    title="EuroSAT MS",
    classes=EUROSAT_CLASSES,
    prefixes=(
        "ds/images/remote_sensing/otherDatasets/sentinel_2/tif",
        "EuroSAT_MS",
        "EuroSATallBands",
        "",
    ),
    extensions=(".tif", ".tiff"),
    layout=(
        "<root>/ds/images/remote_sensing/otherDatasets/sentinel_2/tif/<Class>/<Class>_<n>.tif, "
        "<root>/EuroSAT_MS/<Class>/*.tif or <root>/<Class>/*.tif "
        "(or root= the EuroSATallBands.zip itself)"
    ),
    download=f"download EuroSATallBands.zip (13-band GeoTIFF) from {_URL}",
    bands=SENTINEL2_BANDS,
    dtype=np.uint16,
    scale=_MS_SCALE,
    gsd_m=EUROSAT_GSD_M,
)


class _EuroSATParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path = Field(description="Extracted dataset folder or the distributed .zip file.")
    size: int = Field(
        default=64, ge=1, le=4096, description="Output height/width; 64 keeps native patches."
    )


class EuroSATRGBParams(_EuroSATParams):
    """Parameters of ``eurosat_rgb``: ``root`` (folder or ``EuroSAT.zip``) and ``size``."""


class EuroSATMSParams(_EuroSATParams):
    """Parameters of ``eurosat_ms``: ``root`` (folder or ``EuroSATallBands.zip``), ``size``."""


def decode_ms(data: bytes, size: int) -> np.ndarray:
    """Decode a 13-band EuroSAT GeoTIFF and resize it to ``size × size`` if needed.

    Both pixel-interleaved (``[H, W, 13]``, ``planarconfig=contig``) and band-separate
    (``[13, H, W]``, separate planes or one page per band) files are accepted.

    Args:
        data: The encoded TIFF file.
        size: Output height and width in pixels.

    Returns:
        ``[13, size, size]`` uint16, bands in :data:`SENTINEL2_BANDS` order.

    Raises:
        ImageFormatError: wrong band count, rank or pixel type.
    """
    arr, _ = read_band_tiff(data)
    nbands = len(SENTINEL2_BANDS)
    if arr.shape[0] != nbands:
        raise ImageFormatError(
            f"has {arr.shape[0]} bands, expected {nbands} Sentinel-2 bands "
            f"({', '.join(SENTINEL2_BANDS)}); eurosat_ms needs the all-bands GeoTIFFs"
        )
    arr = as_uint16(
        arr,
        "expected uint16 digital numbers (reflectance x 10000, as in the EuroSAT release): "
        "convert it to that",
    )
    return resize_bands(arr, size)


@DATASETS.register("eurosat_rgb", params=EuroSATRGBParams)
def build_eurosat_rgb(
    params: EuroSATRGBParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """EuroSAT RGB JPEGs: 10 classes, bands R, G, B, images ``[N, 3, size, size]`` /255.

    Args:
        params: Validated parameters (``root``, ``size``).
        cache_dir: Directory of the decode-once cache.
        cache_mode: ``memory`` or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``images [N, 3, size, size]`` float32 in 0..1, ``labels [N]`` int64,
        ``metadata["gsd_m"] [N]`` float32 (10.0) and ``metadata["path"] [N]``.

    Raises:
        DataError: missing root, unknown layout, or an undecodable image (named).
    """
    return imagefolder.load_folder_dataset(
        EUROSAT_RGB_SPEC,
        params.root,
        size=params.size,
        cache_dir=cache_dir,
        cache_mode=cache_mode,
        decode=decode_rgb,
    )


@DATASETS.register("eurosat_ms", params=EuroSATMSParams)
def build_eurosat_ms(
    params: EuroSATMSParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """EuroSAT 13-band GeoTIFFs: 10 classes, Sentinel-2 bands, images uint16/10000.

    Args:
        params: Validated parameters (``root``, ``size``).
        cache_dir: Directory of the decode-once cache.
        cache_mode: ``memory`` or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``images [N, 13, size, size]`` float32 (reflectance),
        ``labels [N]`` int64, bands :data:`SENTINEL2_BANDS`, ``metadata["gsd_m"] [N]``
        float32 (10.0) and ``metadata["path"] [N]``.

    Raises:
        DataError: missing root, unknown layout, an undecodable file or a file whose band
            count is not 13 (named).
    """
    return imagefolder.load_folder_dataset(
        EUROSAT_MS_SPEC,
        params.root,
        size=params.size,
        cache_dir=cache_dir,
        cache_mode=cache_mode,
        decode=decode_ms,
    )
