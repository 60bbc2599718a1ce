"""Object-detection datasets from their real on-disk layouts (paper 004 §3, Table 8).

Every loader reads the annotations with :mod:`geofl.data.readers.boxfiles`, cuts each image into
``tile × tile`` crops (``tile: null`` keeps the whole image), resizes each crop to
``size × size`` (bilinear) with its boxes, and caches the result once
(:func:`~geofl.data.storage.cache.cached_arrays`). Boxes are kept in a crop when at least
``min_visible`` of their area lies in it (then clipped); boxes narrower than one pixel after
resizing are dropped (counted in one log line). Targets are ``boxes``
(:mod:`geofl.data.targets`).

Crowd regions (COCO ``iscrowd: 1``) become rows with the crowd label ``-2 - c``
(:func:`~geofl.data.targets.crowd_label`) and are kept in every crop that holds any of
their area (clipped), whatever ``min_visible``: a crop of a crowd is still a crowd, and a
detection on its visible part must stay ignored. They are no training targets: the
detection task passes only ordinary objects to the detector, as torchvision's and
Detectron2's COCO pipelines drop crowd annotations from training targets (their extent
covers many objects at once, no box a detector should regress to), and hands crowd regions
to the evaluator only.

==================  ========================================================================
dataset             layout under ``root``
==================  ========================================================================
``nwpu_vhr10``      ``positive image set/NNN.jpg`` + ``ground truth/NNN.txt`` (Cheng et al.
                    2014; 650 images, 10 classes, the classes of paper 004's main table)
``dior``            ``JPEGImages-trainval/``, ``JPEGImages-test/`` and ``Annotations/`` (or
                    ``Annotations/Horizontal Bounding Boxes/``) VOC XML (Li et al. 2020;
                    20 classes; Table 8's larger benchmark)
``coco_json``       one COCO JSON file and its image folder; ``categories`` picks the
                    general-object subset
``neon_tree_crowns``  NEON RGB tiles with VOC XML per image (DeepForest's bundled data,
                    ``/work/shared/data/neon_tree_crowns``); every crown is class ``tree``
                    (``Tree``, ``Alive`` and ``Dead`` alike); ``annotations: csv`` reads
                    DeepForest's CSV files instead
==================  ========================================================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import DATASETS, ArrayDataset
from geofl.data.readers.boxfiles import (
    BoxRecord,
    read_coco_json,
    read_csv_boxes,
    read_nwpu_txt,
    read_voc_xml,
)
from geofl.data.storage.cache import (
    array_digest,
    cache_key,
    cached_arrays,
    file_manifest,
    manifest_digest,
)
from geofl.data.synthetic.aerial import AERIAL_CLASSES
from geofl.data.targets import crowd_label
from geofl.errors import DataError

__all__ = ["DIOR_CLASSES", "records_to_dataset"]

log = logging.getLogger("geofl")

#: DIOR's 20 classes, in the order of its paper (label ids 0–19).
DIOR_CLASSES: tuple[str, ...] = (
    "airplane",
    "airport",
    "baseballfield",
    "basketballcourt",
    "bridge",
    "chimney",
    "dam",
    "Expressway-Service-area",
    "Expressway-toll-station",
    "golffield",
    "groundtrackfield",
    "harbor",
    "overpass",
    "ship",
    "stadium",
    "storagetank",
    "tenniscourt",
    "trainstation",
    "vehicle",
    "windmill",
)
_IMAGE_EXT = (".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp")


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    root: Path = Field(description="Dataset folder (see the module docstring for layouts).")
    size: int = Field(256, ge=32, le=2048, description="Output side length in pixels.")
    tile: int | None = Field(
        None, ge=32, description="Crop side in source pixels; null: whole image."
    )
    min_visible: float = Field(0.5, gt=0, le=1, description="Box area share a crop must hold.")


def _decode(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: cannot decode image ({err})") from None


def _image_size(path: Path) -> tuple[int, int]:
    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: cannot read image ({err})") from None


def _crops(w: int, h: int, tile: int | None) -> list[tuple[int, int, int, int]]:
    if tile is None or tile >= min(w, h):
        return [(0, 0, w, h)]
    return [
        (x, y, x + tile, y + tile)
        for y in range(0, h - tile + 1, tile)
        for x in range(0, w - tile + 1, tile)
    ]


def _crop_boxes(
    rec: BoxRecord, crop: tuple[int, int, int, int], size: int, min_visible: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """Boxes of ``rec`` in ``crop``, in output pixels, with their row labels (crowd
    regions: :func:`crowd_label`); and how many were too small."""
    x0, y0, x1, y1 = crop
    b = rec.boxes.astype(np.float64)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    c = np.stack(
        [b[:, 0].clip(x0, x1), b[:, 1].clip(y0, y1), b[:, 2].clip(x0, x1), b[:, 3].clip(y0, y1)], 1
    )
    vis = (c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])
    keep = np.where(rec.iscrowd, vis > 0, vis >= min_visible * area)
    sx, sy = size / (x1 - x0), size / (y1 - y0)
    out = (c[keep] - [x0, y0, x0, y0]) * [sx, sy, sx, sy]
    big = ((out[:, 2] - out[:, 0]) >= 1.0) & ((out[:, 3] - out[:, 1]) >= 1.0)
    labels = np.where(rec.iscrowd, crowd_label(rec.labels), rec.labels)
    return out[big].astype(np.float32), labels[keep][big], int((~big).sum())


def records_to_dataset(
    records: Sequence[BoxRecord],
    classes: tuple[str, ...],
    params: _Common,
    name: str,
    cache_dir: Path,
) -> ArrayDataset:
    """Crop, resize and cache ``records`` (module docstring) as a ``boxes`` dataset.

    Metadata: ``source`` (index of the source image in ``records``).

    Raises:
        DataError: no records, or an image that cannot be decoded (named).
    """
    if not records:
        raise DataError(f"{name}: no annotated images under {params.root}")
    spec = {  # what build reads: the images (stat'd) and every parsed box and label
        "params": params.model_dump(mode="json"),
        "images": manifest_digest(file_manifest(r.image for r in records)),
        "boxes": array_digest(a for r in records for a in (r.boxes, r.labels, r.iscrowd)),
    }

    def build() -> dict[str, np.ndarray]:
        images, rows, source, small = [], [], [], 0
        for i, rec in enumerate(records):
            pix = _decode(rec.image)
            for crop in _crops(pix.shape[1], pix.shape[0], params.tile):
                part = Image.fromarray(pix[crop[1] : crop[3], crop[0] : crop[2]])
                part = part.resize((params.size, params.size), Image.Resampling.BILINEAR)
                images.append(np.asarray(part).transpose(2, 0, 1))
                boxes, labels, dropped = _crop_boxes(rec, crop, params.size, params.min_visible)
                rows.append((boxes, labels))
                source.append(i)
                small += dropped
        if small:
            log.warning("%s: %d boxes narrower than 1 px after resizing were dropped", name, small)
        m = max([len(b) for b, _ in rows] + [1])
        t = np.zeros((len(rows), m, 5), np.float32)
        t[..., 4] = -1
        for k, (b, lab) in enumerate(rows):
            t[k, : len(b), :4], t[k, : len(b), 4] = b, lab
        return {"images": np.stack(images), "boxes": t, "source": np.asarray(source, np.int64)}

    # v2: crowd regions are rows with a crowd label (v1 dropped them).
    arrays = cached_arrays(cache_dir, cache_key(f"{name}-v2", spec), build)
    return ArrayDataset(
        inputs=torch.from_numpy(arrays["images"].astype(np.float32) / 255.0),
        targets=torch.from_numpy(np.array(arrays["boxes"], np.float32)),
        classes=classes,
        bands=("R", "G", "B"),
        metadata={"source": np.array(arrays["source"])},
        name=name,
        target_kind="boxes",
    )


def _folder(root: Path, *names: str) -> Path:
    for n in names:
        if (root / n).is_dir():
            return root / n
    raise DataError(f"{root}: none of the folders {list(names)} exists; check data.params.root")


def _finder(folders: Sequence[Path]) -> Callable[[str], Path]:
    """``file name or stem`` → the image with that stem in ``folders`` (any extension)."""
    index = {
        p.stem: p for f in folders for p in sorted(f.iterdir()) if p.suffix.lower() in _IMAGE_EXT
    }

    def find(name: str) -> Path:
        stem = Path(name).stem
        if stem not in index:
            raise DataError(
                f"image {name!r} named by an annotation is not in {[str(f) for f in folders]}"
            )
        return index[stem]

    return find


class NwpuParams(_Common):
    """Parameters of ``nwpu_vhr10``."""


@DATASETS.register("nwpu_vhr10", params=NwpuParams)
def build_nwpu_vhr10(params: NwpuParams, *, cache_dir: Path) -> ArrayDataset:
    """NWPU VHR-10's positive image set with its ground-truth text files (10 classes)."""
    images = _folder(params.root, "positive image set", "positive_image_set")
    truth = _folder(params.root, "ground truth", "ground_truth")
    find = _finder([images])
    records = []
    for txt in sorted(truth.glob("*.txt")):
        img = find(txt.stem)
        rec = read_nwpu_txt(txt, img, _image_size(img))
        if rec is not None:
            records.append(rec)
    return records_to_dataset(records, AERIAL_CLASSES, params, "nwpu_vhr10", cache_dir)


class DiorParams(_Common):
    """Parameters of ``dior``."""

    split: Literal["trainval", "test", "all"] = Field("all", description="DIOR image folders read.")


@DATASETS.register("dior", params=DiorParams)
def build_dior(params: DiorParams, *, cache_dir: Path) -> ArrayDataset:
    """DIOR (VOC XML, 20 classes); images of the chosen ``split`` folders."""
    splits = ("trainval", "test") if params.split == "all" else (params.split,)
    folders = [_folder(params.root, f"JPEGImages-{s}") for s in splits]
    ann = params.root / "Annotations"
    hbb = ann / "Horizontal Bounding Boxes"
    ann = hbb if hbb.is_dir() else _folder(params.root, "Annotations")
    find = _finder(folders)
    stems = {p.stem for f in folders for p in f.iterdir()}
    classes = {c.lower(): i for i, c in enumerate(DIOR_CLASSES)}
    records = [
        r
        for x in sorted(ann.glob("*.xml"))
        if x.stem in stems and (r := read_voc_xml(x, classes, find)) is not None
    ]
    return records_to_dataset(records, DIOR_CLASSES, params, "dior", cache_dir)


class CocoParams(_Common):
    """Parameters of ``coco_json``: ``root`` is the image folder."""

    annotations: Path = Field(description="The COCO JSON file.")
    categories: tuple[str, ...] | None = Field(
        None, description="Category names kept, in label order."
    )


@DATASETS.register("coco_json", params=CocoParams)
def build_coco_json(params: CocoParams, *, cache_dir: Path) -> ArrayDataset:
    """A COCO-format detection set (optionally a category subset)."""
    records, names = read_coco_json(params.annotations, params.root, params.categories)
    return records_to_dataset(records, names, params, "coco_json", cache_dir)


class NeonParams(_Common):
    """Parameters of ``neon_tree_crowns``."""

    root: Path = Field(Path("/work/shared/data/neon_tree_crowns"), description="Data folder.")
    annotations: Literal["xml", "csv"] = Field(
        "xml", description="per-image VOC XML files, or the DeepForest CSV files"
    )
    tile: int | None = Field(200, ge=32, description="Crop side in source pixels.")
    size: int = Field(128, ge=32, le=2048, description="Output side length in pixels.")


@DATASETS.register("neon_tree_crowns", params=NeonParams)
def build_neon_tree_crowns(params: NeonParams, *, cache_dir: Path) -> ArrayDataset:
    """NEON tree crowns: every ``*.xml`` (or ``*.csv``) and its images, one class ``tree``.

    CSV rows naming an image that another CSV already listed are refused (an image's boxes
    must come from one file).
    """
    if not params.root.is_dir():
        raise DataError(f"{params.root} does not exist; set data.params.root to the NEON folder")
    classes = {"tree": 0, "alive": 0, "dead": 0}
    find = _finder([params.root])
    if params.annotations == "csv":
        records: list[BoxRecord] = []
        for c in sorted(params.root.glob("*.csv")):
            for rec in read_csv_boxes(c, classes, params.root, _image_size):
                if any(rec.image == o.image for o in records):
                    raise DataError(
                        f"{c}: boxes of {rec.image.name} were already read from another CSV"
                    )
                records.append(rec)
    else:
        records = [
            r
            for x in sorted(params.root.glob("*.xml"))
            if (r := read_voc_xml(x, classes, find)) is not None
        ]
    return records_to_dataset(records, ("tree",), params, "neon_tree_crowns", cache_dir)
