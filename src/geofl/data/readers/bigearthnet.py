"""BigEarthNet-S2 v1.0 (Sumbul et al., 2019): multi-label Sentinel-2 patches, 10 countries.

Paper 001 (§6.1.1) uses BigEarthNet for multi-label scene recognition. The v1.0 release
(``BigEarthNet-S2-v1.0.tar.gz``) has one folder per patch, read here under ``root`` or
``root/BigEarthNet-v1.0``::

    <patch>/<patch>_B01.tif ... <patch>_B12.tif     (12 bands: no B10, L2A)
    <patch>/<patch>_labels_metadata.json

``<patch>`` is ``<S2 product>_<row>_<col>`` (e.g. ``S2A_MSIL1C_20170613T101031_0_45``).
Each band file is a single-band uint16 GeoTIFF at its native resolution: 120 x 120 for the
10 m bands (B02, B03, B04, B08), 60 x 60 for the 20 m bands (B05, B06, B07, B8A, B11,
B12) and 20 x 20 for the 60 m bands (B01, B09). **Resampling:** every band is brought to
the 10 m grid by nearest-neighbour block replication (each 20 m pixel fills 2 x 2, each
60 m pixel 6 x 6 pixels: digital numbers unchanged, as the synthetic generators' coarse
bands), then, when ``size`` is not 120, resized bilinearly with antialiasing. Images are
``uint16 / 10000`` (surface reflectance) in :data:`BIGEARTHNET_BANDS` order.

The JSON holds ``labels`` (CORINE Land Cover level-3 names, the 43-class nomenclature
:data:`BIGEARTHNET43_CLASSES`), ``coordinates`` (``ulx``, ``uly``, ``lrx``, ``lry`` in the
patch's UTM projection), ``projection`` (WKT), ``tile_source`` and ``acquisition_date``.

**Nomenclature** (``nomenclature``): ``bigearthnet19`` maps the 43 labels to the 19 classes
with the official mapping of Sumbul et al. (2021) (:data:`MAP_43_TO_19`: continuous and
discontinuous urban fabric → Urban fabric; non-irrigated, permanently irrigated arable
land and rice fields → Arable land; vineyards, fruit trees, olive groves and annual crops
with permanent crops → Permanent crops; natural grassland and sparsely vegetated areas;
moors/heathland and sclerophyllous vegetation; inland marshes and peat bogs → Inland
wetlands; salt marshes, salines, intertidal flats → Coastal wetlands; water courses and
bodies → Inland waters; coastal lagoons, estuaries, sea and ocean → Marine waters; the
other one-to-one). Road/rail networks, port areas, airports, mineral extraction, dump and
construction sites, green urban areas, sport and leisure facilities, bare rock and burnt
areas have no 19-class label and are dropped. ``paper001`` is the 19 classes plus "Burnt
areas" and "Glaciers and perpetual snow" (001 Fig. 2; see
:mod:`geofl.data.synthetic.bigearthnet`; the latter is not among BigEarthNet's 43 classes
and never occurs), ``bigearthnet43`` keeps the 43 labels. A patch whose labels all drop
out gets an all-zero target.

Metadata per patch: ``region`` (the Sentinel-2 MGRS tile, e.g. ``"34VER"``, parsed from
``tile_source``), ``country`` (approximate: the first of the ten countries whose bounding
box holds the patch centre, smallest countries first, else ``"unknown"``; v1.0 does not
record the country, so patches near a border may be assigned to the neighbour),
``season`` (int64 from the acquisition month: 0 winter Dec-Feb, 1 spring, 2 summer, 3
fall), ``lat``/``lon`` of the patch centre, ``gsd_m`` (10.0) and ``path``. The release's
lists ``patches_with_cloud_and_shadow.csv`` and ``patches_with_seasonal_snow.csv``, when
present in ``root``, are excluded unless ``exclude_listed`` is false. ``max_samples`` keeps
a seeded uniform subset.

**Not supported:** BigEarthNet v2.0 (reBEN), whose labels and countries are in
``metadata.parquet``: reading Parquet needs pyarrow (or pandas), which geofl does not
depend on; convert it to the v1.0 layout or use v1.0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, ArrayDataset, CacheMode
from geofl.data.cached import cached_dataset
from geofl.data.readers.formats import resize_bands
from geofl.data.readers.imagefolder import run_parallel
from geofl.data.readers.patchfiles import (
    cap_indices,
    fingerprint,
    read_geotiff,
    season_of_month,
    utm_to_latlon,
)
from geofl.data.synthetic.bigearthnet import (
    BIGEARTHNET19_CLASSES,
    BIGEARTHNET_BANDS,
    PAPER001_CLASSES,
)
from geofl.errors import DataError

__all__ = [
    "BIGEARTHNET43_CLASSES",
    "COUNTRY_BOXES",
    "MAP_43_TO_19",
    "BigEarthNetLoaderParams",
    "build_bigearthnet",
    "label_vector",
]

#: The 43 CORINE level-3 classes of BigEarthNet, in CLC code order.
BIGEARTHNET43_CLASSES: tuple[str, ...] = (
    "Continuous urban fabric",
    "Discontinuous urban fabric",
    "Industrial or commercial units",
    "Road and rail networks and associated land",
    "Port areas",
    "Airports",
    "Mineral extraction sites",
    "Dump sites",
    "Construction sites",
    "Green urban areas",
    "Sport and leisure facilities",
    "Non-irrigated arable land",
    "Permanently irrigated land",
    "Rice fields",
    "Vineyards",
    "Fruit trees and berry plantations",
    "Olive groves",
    "Pastures",
    "Annual crops associated with permanent crops",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation",
    "Agro-forestry areas",
    "Broad-leaved forest",
    "Coniferous forest",
    "Mixed forest",
    "Natural grassland",
    "Moors and heathland",
    "Sclerophyllous vegetation",
    "Transitional woodland/shrub",
    "Beaches, dunes, sands",
    "Bare rock",
    "Sparsely vegetated areas",
    "Burnt areas",
    "Inland marshes",
    "Peatbogs",
    "Salt marshes",
    "Salines",
    "Intertidal flats",
    "Water courses",
    "Water bodies",
    "Coastal lagoons",
    "Estuaries",
    "Sea and ocean",
)
#: 43-class index → 19-class index (None: no 19-class label), Sumbul et al. (2021).
MAP_43_TO_19: tuple[int | None, ...] = (
    0,
    0,
    1,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    2,
    2,
    2,
    3,
    3,
    3,
    4,
    3,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    12,
    12,
    13,
    14,
    None,
    11,
    None,
    15,
    15,
    16,
    16,
    16,
    17,
    17,
    18,
    18,
    18,
)
#: Approximate country bounding boxes (lat min, lat max, lon min, lon max), smallest first.
COUNTRY_BOXES: tuple[tuple[str, float, float, float, float], ...] = (
    ("Luxembourg", 49.44, 50.19, 5.73, 6.53),
    ("Kosovo", 41.85, 43.27, 20.01, 21.80),
    ("Belgium", 49.50, 51.51, 2.54, 6.41),
    ("Switzerland", 45.82, 47.81, 5.96, 10.49),
    ("Lithuania", 53.90, 56.45, 20.93, 26.84),
    ("Ireland", 51.42, 55.39, -10.48, -5.99),
    ("Austria", 46.37, 49.02, 9.53, 17.16),
    ("Serbia", 42.23, 46.19, 18.82, 23.01),
    ("Portugal", 36.96, 42.15, -9.53, -6.19),
    ("Finland", 59.81, 70.09, 20.55, 31.59),
)
_GROUPS = {
    1: ("B02", "B03", "B04", "B08"),
    2: ("B05", "B06", "B07", "B8A", "B11", "B12"),
    6: ("B01", "B09"),
}
_LISTS = ("patches_with_cloud_and_shadow.csv", "patches_with_seasonal_snow.csv")
_METADATA_KEYS = ("region", "country", "season", "lat", "lon", "gsd_m", "path")
_DOWNLOAD = "download BigEarthNet-S2-v1.0.tar.gz from https://bigearth.net and extract it"
LoaderNomenclature = Literal["bigearthnet19", "paper001", "bigearthnet43"]


class BigEarthNetLoaderParams(BaseModel):
    """Parameters of ``bigearthnet`` (v1.0 layout)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path = Field(description="Folder holding the patch folders (or BigEarthNet-v1.0/).")
    size: int = Field(120, ge=1, le=4096, description="Output height/width; 120 is native.")
    nomenclature: LoaderNomenclature = Field("bigearthnet19", description="Label set.")
    max_samples: int | None = Field(None, ge=1, description="Seeded subset size (None: all).")
    seed: int = Field(0, description="Seed of the max_samples subset.")
    exclude_listed: bool = Field(True, description="Drop the cloud/seasonal-snow lists.")


def _classes(nomenclature: LoaderNomenclature) -> tuple[str, ...]:
    return {
        "bigearthnet19": BIGEARTHNET19_CLASSES,
        "paper001": PAPER001_CLASSES,
        "bigearthnet43": BIGEARTHNET43_CLASSES,
    }[nomenclature]


def label_vector(names: list[str], nomenclature: LoaderNomenclature, where: str) -> np.ndarray:
    """``[L]`` uint8 multi-hot of a patch's CORINE level-3 label names.

    Raises:
        DataError: naming ``where`` for a name that is not one of the 43 classes.
    """
    out = np.zeros(len(_classes(nomenclature)), np.uint8)
    for name in names:
        if name not in BIGEARTHNET43_CLASSES:
            raise DataError(
                f"{where} has label {name!r}, not one of BigEarthNet's 43 CORINE classes; "
                "fix or remove the patch"
            )
        i = BIGEARTHNET43_CLASSES.index(name)
        j = i if nomenclature == "bigearthnet43" else MAP_43_TO_19[i]
        if nomenclature == "paper001" and name == "Burnt areas":
            j = PAPER001_CLASSES.index("Burnt areas")
        if j is not None:
            out[j] = 1
    return out


def _scan(root: Path, exclude: bool) -> list[Path]:
    """Patch folders under ``root`` (or ``root/BigEarthNet-v1.0``), sorted by name."""
    if not root.is_dir():
        raise DataError(f"BigEarthNet root {root} is not a folder; {_DOWNLOAD} there")
    for base in (root, root / "BigEarthNet-v1.0"):
        found = sorted(p.parent for p in base.glob("*/*_labels_metadata.json"))
        if found:
            break
    else:
        hint = (
            "; BigEarthNet v2.0 (metadata.parquet) is not supported, as reading Parquet "
            "needs pyarrow: use v1.0"
            if any(root.glob("**/metadata.parquet"))
            else ""
        )
        raise DataError(
            f"no BigEarthNet-S2 v1.0 patches under {root}: expected "
            f"<root>/<patch>/<patch>_labels_metadata.json and <patch>_B01.tif..B12.tif; "
            f"{_DOWNLOAD}{hint}"
        )
    skip: set[str] = set()
    for name in _LISTS if exclude else ():
        listed = root / name
        if listed.is_file():
            skip |= {line.split(",")[0].strip() for line in listed.read_text().splitlines()}
    return [p for p in found if p.name not in skip]


def _read_bands(folder: Path, size: int) -> np.ndarray:
    """``[12, size, size]`` uint16 of a patch's band files, on the 10 m grid."""
    side = 0
    out: dict[str, np.ndarray] = {}
    for factor, bands in _GROUPS.items():
        for band in bands:
            path = folder / f"{folder.name}_{band}.tif"
            arr = read_geotiff(path)[0]
            if arr.shape[0] != 1:
                raise DataError(f"{path} has {arr.shape[0]} bands, expected 1; replace it")
            side = side or arr.shape[1]
            want = side // factor
            if arr.shape[1:] != (want, want) or want * factor != side:
                raise DataError(
                    f"{path} is {arr.shape[1]} x {arr.shape[2]}, expected {want} x {want} "
                    f"for a {10 * factor} m band of a {side} x {side} patch; replace it"
                )
            out[band] = np.repeat(np.repeat(arr[0], factor, axis=0), factor, axis=1)
    return resize_bands(np.stack([out[b] for b in BIGEARTHNET_BANDS]), size)


def _read_json(folder: Path) -> dict[str, Any]:
    path = folder / f"{folder.name}_labels_metadata.json"
    try:
        meta: dict[str, Any] = json.loads(path.read_text())
        keys = ("labels", "coordinates", "projection", "tile_source", "acquisition_date")
        missing = [k for k in keys if k not in meta]
    except (OSError, ValueError, TypeError) as err:
        raise DataError(f"cannot read {path} ({type(err).__name__}); replace it") from err
    if missing:
        raise DataError(f"{path} lacks {missing}; replace it with the release's file")
    meta["where"] = str(path)
    return meta


def _country(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """``[N]`` country names from :data:`COUNTRY_BOXES` (``"unknown"`` outside all)."""
    out = np.full(lat.shape, "unknown", dtype="<U11")
    for name, la0, la1, lo0, lo1 in reversed(COUNTRY_BOXES):  # smallest boxes win
        inside = (lat >= la0) & (lat <= la1) & (lon >= lo0) & (lon <= lo1)
        out[inside] = name
    return out


def _metadata(metas: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Region, country, season, lat and lon of the patches' JSON metadata."""
    c = [m["coordinates"] for m in metas]
    east = np.array([(x["ulx"] + x["lrx"]) / 2 for x in c], np.float64)
    north = np.array([(x["uly"] + x["lry"]) / 2 for x in c], np.float64)
    epsg = np.array(
        [int((re.findall(r'"EPSG","?(\d+)', m["projection"]) or [0])[-1]) for m in metas]
    )
    lat, lon = utm_to_latlon(east, north, epsg)
    tiles = [re.search(r"_T(\d{2}[A-Z]{3})_", m["tile_source"]) for m in metas]
    month = np.array([int(str(m["acquisition_date"])[5:7]) for m in metas])
    return {
        "region": np.array(
            [t.group(1) if t else m["tile_source"] for t, m in zip(tiles, metas, strict=True)]
        ),
        "country": _country(lat, lon),
        "season": season_of_month(month),
        "lat": lat.astype(np.float32),
        "lon": lon.astype(np.float32),
    }


@DATASETS.register("bigearthnet", params=BigEarthNetLoaderParams)
def build_bigearthnet(
    params: BigEarthNetLoaderParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """BigEarthNet-S2 v1.0 patches with multi-hot CORINE labels (001 §6.1.1).

    Args:
        params: Validated parameters (``root``, ``size``, ``nomenclature``,
            ``max_samples``, ``seed``, ``exclude_listed``).
        cache_dir: Directory of the decode-once cache.
        cache_mode: ``memory`` or ``mmap`` (an on-disk store read per batch).

    Returns:
        Dataset with ``inputs`` ``[N, 12, size, size]`` float32 reflectance,
        ``multi_hot`` targets ``[N, L]`` (19, 21 or 43 labels) and the metadata of the
        module docstring.

    Raises:
        DataError: a missing root or band file, an unknown layout or label, or a file of the
            wrong shape or pixel type (named).
    """
    root = params.root.expanduser().resolve()
    found = _scan(root, params.exclude_listed)
    folders = [found[i] for i in cap_indices(len(found), params.max_samples, params.seed, "ben")]
    spec = {
        **params.model_dump(mode="json"),
        "root": str(root),
        "source": fingerprint(
            [f / f"{f.name}_{b}.tif" for f in folders for b in BIGEARTHNET_BANDS],
            root=root,
            labels=[f / f"{f.name}_labels_metadata.json" for f in folders],
        ),
    }

    def build() -> dict[str, np.ndarray]:
        n = len(folders)
        images = np.empty((n, len(BIGEARTHNET_BANDS), params.size, params.size), np.uint16)
        metas = [_read_json(f) for f in folders]

        def work(i: int) -> None:
            images[i] = _read_bands(folders[i], params.size)

        run_parallel(n, work)
        labels = [label_vector(m["labels"], params.nomenclature, m["where"]) for m in metas]
        return {
            "images": images,
            "labels": np.stack(labels),
            **_metadata(metas),
            "gsd_m": np.full(n, 10.0, np.float32),
            "path": np.array([str(f.relative_to(root)) for f in folders]),
        }

    return cached_dataset(
        "bigearthnet",
        "bigearthnet-v1",
        spec,
        build,
        classes=_classes(params.nomenclature),
        bands=BIGEARTHNET_BANDS,
        metadata_keys=_METADATA_KEYS,
        target_kind="multi_hot",
        cache_dir=cache_dir,
        cache_mode=cache_mode,
    )
