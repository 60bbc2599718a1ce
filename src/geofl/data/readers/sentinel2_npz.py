"""Sentinel-2 patches stored as one ``.npz`` of arrays (e.g. informal settlements, Argentina).

The file holds::

    images  [N, C, H, W] uint16   reflectance x 10000 (digital numbers)
    labels  [N]          integer  class index 0..len(classes)-1
    bands   [C]          str      band names, e.g. ("B02", "B03", "B04", "B8A")
    ids     [N]          optional per-patch identifiers (kept as metadata ``id``)

as in the Sentinel-2 informal-settlement patches of the public "slums-argentina" dataset
(2,000 x 4 x 32 x 32, label 1 = informal settlement). Images become float32 reflectance
``uint16 / 10000``; band names are kept, so NDVI of the ``spatial_alpha`` release step
(001 Eq. 10, :mod:`geofl.client.spatial`) uses red B04 and NIR B8A. **B8A** is Sentinel-2's
narrow NIR band (865 nm centre, 20 m native resolution, resampled to the patch grid here);
NDVI is defined on any NIR band, and geofl takes B08 (broad NIR, 842 nm) when present and
B8A otherwise.

With two ``classes`` the targets are ``binary`` (0/1, negative first), otherwise ``class``.

**No data.** Zeros are kept as they are (Sentinel-2's no-data value; nothing is filled in).
The loader logs, per band, how many patches are 0 in every pixel. In ``slums_s2_32px.npz``
B8A is 0 throughout 1,124 of the 2,000 patches (their NDVI is −1) and 13 patches are 0 in
every band (all labelled 1).

**Regions.** The slums file has no coordinates and its ``ids`` are 0..N−1, so they encode no
place. Every patch gets ``metadata["region"]`` from
:func:`geofl.data.splitting.regions.kmeans_regions`:
seeded k-means (``num_regions``, ``region_seed``) on per-patch band means and mean NDVI,
computed from the images only, never from labels — a proxy for geography, not geography.
``partition: {name: region}`` (or ``{name: group, key: region}``) then gives every client one
or more regions.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, ArrayDataset, CacheMode
from geofl.data.cached import cached_dataset
from geofl.data.readers.formats import register_file_format
from geofl.data.readers.patchfiles import fingerprint
from geofl.data.reflectance import reflectance
from geofl.data.splitting.regions import kmeans_regions
from geofl.data.targets import TargetKind
from geofl.errors import DataError

__all__ = ["SLUMS_CLASSES", "Sentinel2NpzParams", "build_sentinel2_npz", "read_patch_npz"]

#: Default class names: label 0 = not an informal settlement, 1 = informal settlement.
SLUMS_CLASSES: tuple[str, ...] = ("other", "informal_settlement")
_REQUIRED = ("images", "labels", "bands")
_METADATA_KEYS = ("id", "region")
log = logging.getLogger("geofl")
_LAYOUT = "images [N, C, H, W] uint16, labels [N], bands [C] (optional ids [N])"


class Sentinel2NpzParams(BaseModel):
    """Parameters of ``sentinel2_npz``: ``path``, ``classes``, ``num_regions``, ``region_seed``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description=f"The .npz file holding {_LAYOUT}.")
    classes: tuple[str, ...] = Field(
        SLUMS_CLASSES, min_length=2, description="Class names, label order (2 → binary)."
    )
    num_regions: int = Field(
        8, ge=1, description="Proxy regions: k of the label-free k-means on image statistics."
    )
    region_seed: int = Field(0, description="Seed of the region k-means++ start.")


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of ``path`` (no pickles), or a one-line DataError."""
    if not path.is_file():
        raise DataError(f"sentinel2_npz file {path} does not exist; point data.params.path at it")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in _REQUIRED if k not in npz.files]
            if missing:
                raise DataError(
                    f"{path} lacks {missing} (has {sorted(npz.files)}); expected {_LAYOUT}"
                )
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise DataError(
            f"{path} is not a readable .npz of plain arrays ({type(err).__name__}: {err})"
        ) from None


def read_patch_npz(path: Path, num_classes: int) -> dict[str, np.ndarray]:
    """Read and check a patch ``.npz``: ``images``, ``labels`` (int64), ``bands``, ``ids``.

    Args:
        path: The file.
        num_classes: Labels must lie in ``0..num_classes − 1``.

    Returns:
        ``images [N, C, H, W]`` uint16, ``labels [N]`` int64, ``bands [C]`` str and ``ids
        [N]`` (``0..N−1`` when the file has none).

    Raises:
        DataError: a missing or unreadable file, a missing key, images not uint16
            ``[N, C, H, W]``, or labels / bands / ids of the wrong length or values.
    """
    raw = _load_npz(path)
    images, labels, bands = raw["images"], raw["labels"], raw["bands"]
    if images.dtype != np.uint16 or images.ndim != 4:
        raise DataError(
            f"{path}: images are {images.dtype} {list(images.shape)}, expected uint16 "
            "[N, C, H, W] (reflectance x 10000); convert them to that"
        )
    n, c = images.shape[:2]
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        raise DataError(
            f"{path}: labels are {labels.dtype} {list(labels.shape)}, expected [{n}] int"
        )
    if n and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(
            f"{path}: labels span {int(labels.min())}..{int(labels.max())}, expected "
            f"0..{num_classes - 1} (one per data.params.classes)"
        )
    if bands.shape != (c,) or bands.dtype.kind not in "US":
        raise DataError(f"{path}: bands are {bands.dtype} {list(bands.shape)}, expected [{c}] str")
    ids = raw.get("ids", np.arange(n))
    if ids.shape != (n,):
        raise DataError(f"{path}: ids have shape {list(ids.shape)}, expected [{n}]")
    return {
        "images": images,
        "labels": labels.astype(np.int64),
        "bands": bands.astype(str),
        "ids": ids,
    }


def _warn_empty_bands(images: np.ndarray, bands: tuple[str, ...], path: Path) -> None:
    """Log the bands that are 0 (Sentinel-2 no-data) in every pixel of some patches."""
    empty = (images == 0).all(axis=(2, 3)).sum(axis=0)  # [C] patches with the band all 0
    gone = [f"{b} in {int(k)}" for b, k in zip(bands, empty, strict=True) if k]
    if gone:
        log.warning(
            "%s: bands are 0 (no data) in every pixel of some of its %d patches (%s); "
            "NDVI there is -1 (no NIR) or 0 (all dark)",
            path.name,
            images.shape[0],
            ", ".join(gone),
        )


@DATASETS.register("sentinel2_npz", params=Sentinel2NpzParams)
def build_sentinel2_npz(
    params: Sentinel2NpzParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """Sentinel-2 patches from one ``.npz``, reflectance ``uint16 / 10000``, proxy regions.

    Args:
        params: Validated parameters (``path``, ``classes``, ``num_regions``,
            ``region_seed``).
        cache_dir: Directory of the on-disk store (``mmap`` only; ``memory`` reads the file,
            which is as fast as a cache).
        cache_mode: ``memory`` or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``inputs [N, C, H, W]`` float32 reflectance, targets ``[N]`` int64
        (``binary`` for two classes, else ``class``), the file's band names, and metadata
        ``id [N]`` and ``region [N]`` int64 (proxy regions, module docstring).

    Raises:
        DataError: see :func:`read_patch_npz`.
    """
    path = params.path.expanduser().resolve()
    arrays = read_patch_npz(path, len(params.classes))
    bands = tuple(str(b) for b in arrays["bands"])
    images = arrays["images"]
    _warn_empty_bands(images, bands, path)
    out = {
        "images": images,
        "labels": arrays["labels"],
        "id": arrays["ids"],
        "region": kmeans_regions(images, bands, params.num_regions, params.region_seed),
    }
    kind: TargetKind = "binary" if len(params.classes) == 2 else "class"
    if cache_mode == "mmap":
        spec = {**params.model_dump(mode="json"), "path": str(path), "src": fingerprint([path])}
        return cached_dataset(
            "sentinel2_npz",
            "sentinel2-npz-v1",
            spec,
            lambda: out,
            classes=params.classes,
            bands=bands,
            metadata_keys=_METADATA_KEYS,
            target_kind=kind,
            cache_dir=cache_dir,
            cache_mode=cache_mode,
        )
    return ArrayDataset(
        inputs=reflectance(images),
        targets=torch.from_numpy(out["labels"]),
        classes=params.classes,
        bands=bands,
        metadata={k: out[k] for k in _METADATA_KEYS},
        name="sentinel2_npz",
        target_kind=kind,
    )


# A 4-band uint16 GeoTIFF (reflectance x 10000) decodes to the training input bit for bit.
register_file_format("sentinel2_npz", "uint16_bands")
