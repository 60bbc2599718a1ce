"""Readers of object-detection annotation files: one :class:`BoxRecord` per image.

Formats (each as its dataset ships it):

* **NWPU VHR-10** ground-truth text (``ground truth/NNN.txt``): one object per line,
  ``(x1,y1),(x2,y2),c`` with ``c`` the class number 1–10; blank lines are ignored.
* **Pascal VOC XML** (DIOR's ``Annotations/*.xml``, NEON's per-image files): ``<object>``
  elements with ``<name>`` and ``<bndbox>`` ``xmin``/``ymin``/``xmax``/``ymax``.
* **COCO JSON**: ``images`` (``id``, ``file_name``, ``width``, ``height``), ``annotations``
  (``image_id``, ``category_id``, ``bbox`` = x, y, w, h, ``iscrowd``) and ``categories``.
* **CSV** (DeepForest's ``image_path,xmin,ymin,xmax,ymax,label``).

Bad input. A box with an unknown class, or a line or element that cannot be parsed, is a
:class:`~geofl.errors.DataError` naming the file and line (object number in XML, annotation
id in JSON): the data or the class list is wrong and silently dropping it would bias the
benchmark. Boxes reaching outside the image are clipped to it; boxes entirely outside, or
degenerate ones (``x2 <= x1`` or ``y2 <= y1``, also after clipping), are skipped with a
warning naming file and line. An empty annotation file skips its image with a warning.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geofl.errors import DataError

__all__ = [
    "BoxRecord",
    "clean_box",
    "read_coco_json",
    "read_csv_boxes",
    "read_nwpu_txt",
    "read_voc_xml",
]

log = logging.getLogger("geofl")

_NWPU_LINE = re.compile(
    r"^\(\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*\)\s*,\s*\(\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*\)\s*,\s*(\d+)\s*$"
)


@dataclass(frozen=True)
class BoxRecord:
    """The objects of one image.

    Attributes:
        image: Path of the image file.
        boxes: ``[n, 4]`` float32 xyxy pixels of the full image.
        labels: ``[n]`` int64 class ids.
    """

    image: Path
    boxes: np.ndarray
    labels: np.ndarray


def clean_box(
    box: tuple[float, float, float, float], size: tuple[int, int] | None, where: str
) -> tuple[float, float, float, float] | None:
    """``box`` clipped to the image ``size`` (width, height), or None (logged) when it is
    degenerate or lies outside the image."""
    x1, y1, x2, y2 = box
    if size is not None:
        w, h = size
        x1, x2 = min(max(x1, 0.0), float(w)), min(max(x2, 0.0), float(w))
        y1, y2 = min(max(y1, 0.0), float(h)), min(max(y2, 0.0), float(h))
    if x2 <= x1 or y2 <= y1:
        why = "degenerate" if box[2] <= box[0] or box[3] <= box[1] else "outside the image"
        log.warning("%s: box %s is %s; skipped", where, list(box), why)
        return None
    return x1, y1, x2, y2


def _record(image: Path, items: list[tuple[tuple[float, float, float, float], int]]) -> BoxRecord:
    boxes = np.asarray([b for b, _ in items], np.float32).reshape(-1, 4)
    return BoxRecord(image, boxes, np.asarray([c for _, c in items], np.int64))


def read_nwpu_txt(path: Path, image: Path, size: tuple[int, int] | None) -> BoxRecord | None:
    """One NWPU VHR-10 ground-truth file (class numbers 1–10 → ids 0–9).

    Returns:
        The image's record, or None (logged) for an empty file.

    Raises:
        DataError: ``path:line`` of a line that is not ``(x1,y1),(x2,y2),c`` or whose class
            is outside 1–10.
    """
    text = path.read_text(encoding="utf-8", errors="replace")
    items = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _NWPU_LINE.match(line.strip())
        if m is None:
            raise DataError(f"{path}:{no}: {line.strip()!r} is not '(x1,y1),(x2,y2),class'")
        cls = int(m.group(5))
        if not 1 <= cls <= 10:
            raise DataError(f"{path}:{no}: class {cls} is not an NWPU VHR-10 class (1-10)")
        box = clean_box(tuple(float(m.group(i)) for i in range(1, 5)), size, f"{path}:{no}")  # type: ignore[arg-type]
        if box is not None:
            items.append((box, cls - 1))
    if not items and not text.strip():
        log.warning("%s: empty annotation file; image %s skipped", path, image.name)
        return None
    return _record(image, items)


def read_voc_xml(
    path: Path, classes: Mapping[str, int], find_image: Callable[[str], Path]
) -> BoxRecord | None:
    """One Pascal VOC annotation file.

    Args:
        path: The ``.xml`` file.
        classes: Object name (case-insensitive) → class id.
        find_image: ``<filename>`` (or the xml's stem) → image path.

    Returns:
        The image's record, or None (logged) for an empty file.

    Raises:
        DataError: ``path`` unreadable XML, or ``path: object k`` with an unknown class name
            or a box that is not four numbers.
    """
    if path.stat().st_size == 0:
        log.warning("%s: empty annotation file; skipped", path)
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise DataError(f"{path}: not valid XML ({err})") from None
    size = _voc_size(root)
    image = find_image(root.findtext("filename") or path.stem)
    items = []
    for k, obj in enumerate(root.iter("object"), start=1):
        where = f"{path}: object {k}"
        name = (obj.findtext("name") or "").strip()
        cls = classes.get(name.lower())
        if cls is None:
            raise DataError(
                f"{where}: class {name!r} is not one of {sorted(classes)}; "
                "fix the file or the dataset's class list"
            )
        bb = obj.find("bndbox")
        try:
            box = tuple(float(bb.findtext(t) or "") for t in ("xmin", "ymin", "xmax", "ymax"))  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            raise DataError(f"{where}: <bndbox> needs numeric xmin, ymin, xmax, ymax") from None
        kept = clean_box(box, size, where)  # type: ignore[arg-type]
        if kept is not None:
            items.append((kept, cls))
    return _record(image, items)


def _voc_size(root: ET.Element) -> tuple[int, int] | None:
    try:
        w = int(float(root.findtext("size/width") or ""))
        h = int(float(root.findtext("size/height") or ""))
    except ValueError:
        return None
    return (w, h) if w > 0 and h > 0 else None


def read_csv_boxes(
    path: Path, classes: Mapping[str, int], images: Path, sizes: Callable[[Path], tuple[int, int]]
) -> list[BoxRecord]:
    """A DeepForest CSV (``image_path,xmin,ymin,xmax,ymax,label``), records in file order.

    Raises:
        DataError: ``path:line`` with a missing column, a non-numeric coordinate or an
            unknown label.
    """
    by_image: dict[str, list[tuple[tuple[float, float, float, float], int]]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        need = {"image_path", "xmin", "ymin", "xmax", "ymax", "label"}
        if reader.fieldnames is None or not need <= set(reader.fieldnames):
            raise DataError(f"{path}:1: header must hold {sorted(need)}")
        for no, row in enumerate(reader, start=2):
            cls = classes.get(row["label"].strip().lower())
            if cls is None:
                raise DataError(
                    f"{path}:{no}: label {row['label']!r} is not one of {sorted(classes)}"
                )
            try:
                box = tuple(float(row[t]) for t in ("xmin", "ymin", "xmax", "ymax"))
            except (TypeError, ValueError):
                raise DataError(f"{path}:{no}: coordinates must be numbers") from None
            name = row["image_path"]
            size = sizes(images / name)
            kept = clean_box(box, size, f"{path}:{no}")  # type: ignore[arg-type]
            items = by_image.setdefault(name, [])
            if kept is not None:
                items.append((kept, cls))
    return [_record(images / name, items) for name, items in by_image.items()]


def read_coco_json(
    path: Path, images: Path, categories: tuple[str, ...] | None
) -> tuple[list[BoxRecord], tuple[str, ...]]:
    """A COCO detection file; crowd boxes are ignored (COCO does not score them).

    Args:
        path: The JSON file.
        images: Folder of the ``file_name``s.
        categories: Category names to keep, in label order (the "general-object subset");
            None keeps every category, ordered by id. Boxes of other categories are dropped.

    Returns:
        The records (every listed image, with or without boxes) and the class names.

    Raises:
        DataError: unreadable JSON, a missing key, an annotation naming an unknown image or
            category, or a ``categories`` name absent from the file.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        cats = {int(c["id"]): str(c["name"]) for c in data["categories"]}
        imgs = {int(i["id"]): i for i in data["images"]}
        anns = data["annotations"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(
            f"{path}: not a COCO detection file ({type(err).__name__}: {err})"
        ) from None
    names = tuple(categories) if categories else tuple(cats[k] for k in sorted(cats))
    missing = [n for n in names if n not in cats.values()]
    if missing:
        raise DataError(
            f"{path}: categories {missing} are not in the file; it has {sorted(cats.values())}"
        )
    label = {cid: names.index(n) for cid, n in cats.items() if n in names}
    items: dict[int, list[tuple[tuple[float, float, float, float], int]]] = {i: [] for i in imgs}
    for a in anns:
        where = f"{path}: annotation {a.get('id', '?')}"
        if a.get("image_id") not in imgs or a.get("category_id") not in cats:
            raise DataError(
                f"{where}: unknown image_id {a.get('image_id')} or "
                f"category_id {a.get('category_id')}"
            )
        if a.get("iscrowd", 0) or a["category_id"] not in label:
            continue
        x, y, w, h = (float(v) for v in a["bbox"])
        img = imgs[a["image_id"]]
        size = (int(img["width"]), int(img["height"])) if "width" in img else None
        kept = clean_box((x, y, x + w, y + h), size, where)
        if kept is not None:
            items[a["image_id"]].append((kept, label[a["category_id"]]))
    return [_record(images / imgs[i]["file_name"], items[i]) for i in sorted(imgs)], names
