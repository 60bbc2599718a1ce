"""UC Merced Land Use (Yang & Newsam, 2010): 21 classes of 1-foot USGS aerial RGB images.

The original release, ``UCMerced_LandUse.zip``, holds 100 images per class::

    UCMerced_LandUse/Images/<class>/<class>NN.tif     (NN = 00..99)

mostly 256 × 256 RGB TIFFs, a few slightly smaller (e.g. 247 × 256). Copies re-encoded as
JPEG (``<class>NN.jpg``) are read the same way. ``root`` may be the zip itself or a folder
holding one of::

    <root>/UCMerced_LandUse/Images/<class>/<file>
    <root>/Images/<class>/<file>
    <root>/<class>/<file>

Every image is resized to ``size × size`` (bilinear with antialiasing; JPEGs are first
decoded at a reduced scale when that keeps at least ``size`` pixels), giving
``[N, 3, size, size]`` float32 images in 0..1, bands ``("R", "G", "B")``. The 21 classes
are sorted alphabetically (label order). Ground sample distance is 1 foot (0.3048 m).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, ArrayDataset, CacheMode
from geofl.data.readers import imagefolder
from geofl.data.readers.imagefolder import FolderSpec, decode_rgb

__all__ = ["UCMERCED_CLASSES", "UCMERCED_SPEC", "UCMercedParams", "build_ucmerced"]

#: The 21 UC Merced class names, sorted; the label of a sample is its index here.
UCMERCED_CLASSES: tuple[str, ...] = (
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
#: One foot, the ground sample distance of the USGS National Map orthoimagery used.
UCMERCED_GSD_M = 0.3048

UCMERCED_SPEC = FolderSpec(
    name="ucmerced",
    title="UC Merced Land Use",
    classes=UCMERCED_CLASSES,
    prefixes=("UCMerced_LandUse/Images", "Images", ""),
    extensions=(".tif", ".tiff", ".jpg", ".jpeg", ".png"),
    layout=(
        "<root>/UCMerced_LandUse/Images/<class>/<class>NN.tif, <root>/Images/<class>/* or "
        "<root>/<class>/* (or root= the UCMerced_LandUse.zip itself)"
    ),
    download=(
        "download UCMerced_LandUse.zip from http://weegee.vision.ucmerced.edu/datasets/landuse.html"
    ),
    bands=("R", "G", "B"),
    dtype=np.uint8,
    scale=255.0,
    gsd_m=UCMERCED_GSD_M,
)


class UCMercedParams(BaseModel):
    """Parameters of ``ucmerced``: ``root`` (folder or ``UCMerced_LandUse.zip``), ``size``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path = Field(description="Folder holding the class folders (or above), or the .zip.")
    size: int = Field(default=64, ge=1, le=4096, description="Output height/width in pixels.")


@DATASETS.register("ucmerced", params=UCMercedParams)
def build_ucmerced(
    params: UCMercedParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """UC Merced Land Use: 21 classes of aerial RGB images resized to ``size × size``.

    Args:
        params: Validated parameters (``root``, ``size``).
        cache_dir: Directory of the decode-once cache.
        cache_mode: ``memory`` or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``images [N, 3, size, size]`` float32 in 0..1, ``labels [N]`` int64,
        ``metadata["gsd_m"] [N]`` float32 (0.3048) and ``metadata["path"] [N]``.

    Raises:
        DataError: missing root, unknown layout, or an undecodable image (named).
    """
    return imagefolder.load_folder_dataset(
        UCMERCED_SPEC,
        params.root,
        size=params.size,
        cache_dir=cache_dir,
        cache_mode=cache_mode,
        decode=decode_rgb,
    )
