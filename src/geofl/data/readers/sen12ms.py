"""SEN12MS (Schmitt et al., 2019) Sentinel-2 patches with simplified-IGBP single labels.

Paper 001 (§6.1.1) uses SEN12MS for single-label land-cover recognition. The release
(mediaTUM, ``ROIs<id>_<season>_{s2,lc}.tar.gz``) extracts to one folder per seasonal ROI
set, read here in either of two forms::

    <root>/ROIs1158_spring/s2_<scene>/ROIs1158_spring_s2_<scene>_p<patch>.tif
    <root>/ROIs1158_spring/lc_<scene>/ROIs1158_spring_lc_<scene>_p<patch>.tif
or  <root>/ROIs1158_spring_s2/s2_<scene>/...   and   <root>/ROIs1158_spring_lc/lc_<scene>/...

for the sets ``ROIs1158_spring``, ``ROIs1868_summer``, ``ROIs1970_fall`` and
``ROIs2017_winter`` (any subset). ``s2`` files are 13-band uint16 GeoTIFFs, 256 x 256 at
10 m (all bands resampled to 10 m by the release), bands B01..B12 with B8A and B10
(:data:`~geofl.data.base.SENTINEL2_BANDS`), digital numbers = L1C reflectance x 10000;
images are ``uint16 / 10000``, resized bilinearly (with antialiasing) to ``size`` when
``size`` is not 256.

**Single label.** Each patch is labelled from its ``lc`` file (the MODIS land-cover patch
of the release: 4 bands IGBP, LCCS-LC, LCCS-LU, LCCS-SH): band 1 (IGBP, 1..17) is mapped
to the simplified 10-class scheme of the SEN12MS classification baselines and DFC2020
(:data:`IGBP_TO_SIMPLIFIED`: forests 1-5 → Forest, shrublands 6-7 → Shrubland, savannas
8-9 → Savanna, 10 → Grassland, 11 → Wetlands, croplands 12 and cropland/natural mosaics
14 → Croplands, 13 → Urban/Built-up, 15 → Snow/Ice, 16 → Barren, 17 → Water) and the
patch's label is the majority class of its pixels (ties to the lower class index; 0 =
no data is ignored). This equals the arg-max of the release's
``IGBP_probability_labels.pkl`` class fractions, which are computed from the same maps,
and needs no pickle.

Metadata per patch: ``season`` (int64: 0 winter, 1 spring, 2 summer, 3 fall, as
:mod:`geofl.data.synthetic.sen12ms`), ``region`` (the ROI set and scene,
``"ROIs1158_spring_s2_7"``; one scene is one region of interest), ``lat``/``lon`` (patch
centre from the GeoTIFF's UTM georeference, NaN without one), ``gsd_m`` (10.0) and
``path``. ``max_samples`` keeps a seeded uniform subset (``seed``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset, CacheMode
from geofl.data.cached import cached_dataset
from geofl.data.readers.formats import resize_bands
from geofl.data.readers.imagefolder import run_parallel
from geofl.data.readers.patchfiles import cap_indices, fingerprint, read_geotiff, utm_to_latlon
from geofl.data.synthetic.sen12ms import SEN12MS_CLASSES, SEN12MS_SEASONS
from geofl.errors import DataError

__all__ = ["IGBP_TO_SIMPLIFIED", "SEN12MSLoaderParams", "build_sen12ms", "majority_label"]

#: IGBP class (index 0..17; 0 = no data) → simplified class (1..10; 0 = ignore), as the
#: SEN12MS baselines' ``DFC2020_CLASSES``.
IGBP_TO_SIMPLIFIED: tuple[int, ...] = (0, 1, 1, 1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 6, 8, 9, 10)
_S2_NAME = re.compile(r"^(ROIs\d{4}_(spring|summer|fall|winter))_s2_(\d+)_p(\d+)\.tif$")
_METADATA_KEYS = ("region", "season", "lat", "lon", "gsd_m", "path")
_DOWNLOAD = (
    "download ROIs<id>_<season>_s2.tar.gz and _lc.tar.gz from https://mediatum.ub.tum.de/1474000"
)


class SEN12MSLoaderParams(BaseModel):
    """Parameters of ``sen12ms``: ``root``, ``size``, ``max_samples``, ``seed``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path = Field(description="Folder holding the ROIs<id>_<season>[_s2|_lc] folders.")
    size: int = Field(256, ge=1, le=4096, description="Output height/width; 256 is native.")
    max_samples: int | None = Field(None, ge=1, description="Seeded subset size (None: all).")
    seed: int = Field(0, description="Seed of the max_samples subset.")


def majority_label(igbp: np.ndarray, where: str) -> int:
    """Simplified class index (0..9) of the majority of an IGBP map ``[H, W]``.

    Raises:
        DataError: naming ``where`` when a value is not an IGBP class or no pixel has one.
    """
    if int(igbp.min()) < 0 or int(igbp.max()) >= len(IGBP_TO_SIMPLIFIED):
        bad = int(igbp.max()) if int(igbp.max()) >= len(IGBP_TO_SIMPLIFIED) else int(igbp.min())
        raise DataError(
            f"{where} has IGBP value {bad}; band 1 of a SEN12MS lc patch holds "
            "IGBP classes 1..17: replace the file"
        )
    simple = np.asarray(IGBP_TO_SIMPLIFIED)[igbp.astype(np.int64)]
    counts = np.bincount(simple.ravel(), minlength=11)[1:]
    if counts.sum() == 0:
        raise DataError(f"{where} has no IGBP class in band 1 (all no-data); remove the patch")
    return int(counts.argmax())


def _lc_path(s2: Path) -> Path:
    """The ``lc`` file of an ``s2`` file (same ROI set, scene and patch)."""
    roi_dir, scene_dir = s2.parent.parent, s2.parent
    lc_root = roi_dir.with_name(roi_dir.name.removesuffix("_s2") + "_lc")
    if roi_dir.name.endswith("_s2") and lc_root.is_dir():
        roi_dir = lc_root
    lc_scene = "lc_" + scene_dir.name.removeprefix("s2_")
    return roi_dir / lc_scene / s2.name.replace("_s2_", "_lc_")


def _scan(root: Path) -> list[tuple[Path, re.Match[str]]]:
    """``s2`` files under ``root`` sorted by (ROI set, scene, patch), with name matches."""
    if not root.is_dir():
        raise DataError(f"SEN12MS root {root} is not a folder; {_DOWNLOAD} and extract it there")
    found = []
    for path in root.glob("ROIs*/s2_*/ROIs*_s2_*_p*.tif"):
        match = _S2_NAME.match(path.name)
        if match:
            found.append((path, match))
    if not found:
        raise DataError(
            f"no SEN12MS s2 patches under {root}: expected "
            f"<root>/ROIs1158_spring[_s2]/s2_<scene>/ROIs1158_spring_s2_<scene>_p<n>.tif; "
            f"{_DOWNLOAD}"
        )
    found.sort(key=lambda e: (e[1].group(1), int(e[1].group(3)), int(e[1].group(4))))
    return found


def _decode(files: list[tuple[Path, Path]], size: int) -> dict[str, np.ndarray]:
    """Images, labels and georeference of the ``(s2, lc)`` file pairs."""
    n = len(files)
    images = np.empty((n, len(SENTINEL2_BANDS), size, size), np.uint16)
    labels = np.empty(n, np.int64)
    east, north = np.full(n, np.nan), np.full(n, np.nan)
    epsg = np.zeros(n, np.int64)

    def work(i: int) -> None:
        s2, lc = files[i]
        arr, geo = read_geotiff(s2)
        if arr.shape[0] != len(SENTINEL2_BANDS):
            raise DataError(
                f"{s2} has {arr.shape[0]} bands, expected the 13 Sentinel-2 bands of SEN12MS "
                "(B01..B12 with B8A and B10); replace the file"
            )
        images[i] = resize_bands(arr, size)
        if not lc.is_file():
            raise DataError(f"missing label file {lc} for {s2.name}; {_DOWNLOAD}")
        labels[i] = majority_label(read_geotiff(lc, uint16=False)[0][0], str(lc))
        if geo is not None:
            epsg[i] = geo.epsg
            east[i], north[i] = geo.centre(arr.shape[1], arr.shape[2])

    run_parallel(n, work)
    lat, lon = utm_to_latlon(east, north, epsg)
    return {"images": images, "labels": labels, "lat": lat, "lon": lon}


@DATASETS.register("sen12ms", params=SEN12MSLoaderParams)
def build_sen12ms(
    params: SEN12MSLoaderParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """SEN12MS Sentinel-2 patches with majority simplified-IGBP labels (001 §6.1.1).

    Args:
        params: Validated parameters (``root``, ``size``, ``max_samples``, ``seed``).
        cache_dir: Directory of the decode-once cache.
        cache_mode: ``memory`` or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``inputs`` ``[N, 13, size, size]`` float32 reflectance, ``class``
        targets ``[N]`` over :data:`~geofl.data.synthetic.sen12ms.SEN12MS_CLASSES` and the
        metadata of the module docstring.

    Raises:
        DataError: a missing root or label file, an unknown layout, or a file of the wrong
            band count or pixel type (named).
    """
    root = params.root.expanduser().resolve()
    found = _scan(root)
    keep = cap_indices(len(found), params.max_samples, params.seed, "sen12ms")
    chosen = [found[i] for i in keep]
    files = [(path, _lc_path(path)) for path, _ in chosen]
    spec = {
        "root": str(root),
        "size": params.size,
        "max_samples": params.max_samples,
        "seed": params.seed,
        "source": fingerprint([p for pair in files for p in pair], root=root),  # s2 and lc
    }

    def build() -> dict[str, np.ndarray]:
        out = _decode(files, params.size)
        out["lat"], out["lon"] = out["lat"].astype(np.float32), out["lon"].astype(np.float32)
        out["season"] = np.array([SEN12MS_SEASONS.index(m.group(2)) for _, m in chosen])
        out["region"] = np.array([f"{m.group(1)}_s2_{m.group(3)}" for _, m in chosen])
        out["gsd_m"] = np.full(len(files), 10.0, np.float32)
        out["path"] = np.array([str(p.relative_to(root)) for p, _ in files])
        return out

    return cached_dataset(
        "sen12ms",
        "sen12ms-v1",
        spec,
        build,
        classes=SEN12MS_CLASSES,
        bands=SENTINEL2_BANDS,
        metadata_keys=_METADATA_KEYS,
        target_kind="class",
        cache_dir=cache_dir,
        cache_mode=cache_mode,
    )
