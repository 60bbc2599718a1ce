"""Readers of object-detection annotation files: one :class:`BoxRecord` per image.

Formats (each as its dataset ships it):

* **NWPU VHR-10** ground-truth text (``ground truth/NNN.txt``): one object per line,
  ``(x1,y1),(x2,y2),c`` with ``c`` the class number 1–10; blank lines are ignored.
* **Pascal VOC XML** (DIOR's ``Annotations/*.xml``, NEON's per-image files): ``<object>``
  elements with ``<name>`` and ``<bndbox>`` ``xmin``/``ymin``/``xmax``/``ymax``.
* **COCO JSON**: ``images`` (``id``, ``file_name``, ``width``, ``height``), ``annotations``
  (``image_id``, ``category_id``, ``bbox`` = x, y, w, h, ``iscrowd``) and ``categories``.
  Crowd regions (``iscrowd: 1``) are kept, flagged in :attr:`BoxRecord.iscrowd`: COCO's
  evaluator ignores the detections that fall on them, so dropping them would score those
  detections as false positives.
* **CSV** (DeepForest's ``image_path,xmin,ymin,xmax,ymax,label``).

Bad input. A box with an unknown class, or a line or element that cannot be parsed, is a
:class:`~geofl.errors.DataError` naming the file and line (object number in XML, annotation
id in JSON): the data or the class list is wrong and silently dropping it would bias the
benchmark. Boxes reaching outside the image are clipped to it; boxes entirely outside, or
degenerate ones (``x2 <= x1`` or ``y2 <= y1``, also after clipping), are skipped with a
warning naming file and line. An empty annotation file skips its image with a warning.

COCO files are checked value by value, since they are often written by ad-hoc converters:
anything of the wrong type or out of range (a bbox that is not four numbers, a missing
``file_name``, a non-numeric ``width``, a list where an object belongs, an unknown
``image_id``) is a :class:`~geofl.errors.DataError` naming the file and the annotation
(image, category) id. So is a NaN or infinite coordinate: unlike an empty box it is no
measurement at all, only a broken writer produces it (standard JSON has no NaN), and a
silently dropped object would bias the benchmark. Degenerate boxes and boxes outside their
image are skipped as in the other formats, with one warning per file naming how many and
which annotations (the first ten ids): COCO files run to hundreds of thousands of boxes.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import reprlib
import struct
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import numpy as np

from geofl.errors import DataError

__all__ = [
    "Box",
    "BoxRecord",
    "Item",
    "clean_box",
    "clip_box",
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
        iscrowd: ``[n]`` bool, True for a crowd region (COCO ``iscrowd: 1``): no object to
            train on or to find, but detections on it are not false positives.
    """

    image: Path
    boxes: np.ndarray
    labels: np.ndarray
    iscrowd: np.ndarray


Box = tuple[float, float, float, float]
#: A box and its class id.
Item = tuple[Box, int]


def clip_box(box: Box, size: tuple[int, int] | None) -> tuple[Box | None, str]:
    """``box`` clipped to the image ``size`` (width, height) and ``""``, or None and why it
    was skipped (``"degenerate"``, ``"outside the image"``, ``"not finite"``).

    The test is made on the float32 values a :class:`BoxRecord` stores: a box of width
    1e-300 is degenerate there, and one reaching 1e300 (no image size to clip it) is not
    finite.
    """
    x1, y1, x2, y2 = box
    if size is not None:
        w, h = size
        x1, x2 = min(max(x1, 0.0), float(w)), min(max(x2, 0.0), float(w))
        y1, y2 = min(max(y1, 0.0), float(h)), min(max(y2, 0.0), float(h))
    kept = _float32((x1, y1, x2, y2))
    if kept is None or not all(math.isfinite(v) for v in kept):
        return None, "not finite"
    if kept[2] > kept[0] and kept[3] > kept[1]:
        return kept, ""
    raw = _float32(box)
    inside = raw is not None and not (raw[2] > raw[0] and raw[3] > raw[1])
    return None, "degenerate" if inside else "outside the image"


_F32 = struct.Struct("<4f")


def _float32(box: Box) -> Box | None:
    """``box`` rounded to float32, None when a value is beyond float32 range."""
    try:
        x1, y1, x2, y2 = _F32.unpack(_F32.pack(*box))
    except OverflowError:
        return None
    return x1, y1, x2, y2


def clean_box(box: Box, size: tuple[int, int] | None, where: str) -> Box | None:
    """``box`` clipped to the image ``size`` (width, height), or None (logged) when it is
    degenerate or lies outside the image."""
    kept, why = clip_box(box, size)
    if kept is None:
        log.warning("%s: box %s is %s; skipped", where, list(box), why)
    return kept


def _record(image: Path, items: list[Item], crowd: list[Item] | None = None) -> BoxRecord:
    """The record of ``items`` followed by the crowd regions ``crowd``."""
    rows = items + (crowd or [])
    boxes = np.asarray([b for b, _ in rows], np.float32).reshape(-1, 4)
    flags = np.arange(len(rows)) >= len(items)
    return BoxRecord(image, boxes, np.asarray([c for _, c in rows], np.int64), flags)


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
    by_image: dict[str, list[Item]] = {}
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


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 40, 40, 30
_SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 6, 4, 2
#: Skipped annotation ids named in the warning, per reason.
_SHOWN_IDS = 10


def _show(value: Any) -> str:
    """``value``'s repr for a one-line message, at most 60 characters."""
    text = _SHORT.repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


#: How a message names the JSON type of a top-level value that is no object.
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number"}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_REASONS = {
    "degenerate": "degenerate (width or height <= 0)",
    "outside the image": "outside the image",
    "not finite": "not finite",
}


class _CocoImage(NamedTuple):
    """A checked ``images`` entry: its file name and (width, height) when given."""

    file_name: str
    size: tuple[int, int] | None


class _CocoBox(NamedTuple):
    """A checked ``annotations`` entry.

    Attributes:
        tag: How a warning names it: its id, or ``[k]`` (its position) without one.
        image_id: An id of ``images``.
        category_id: An id of ``categories``.
        box: xyxy pixels, finite (possibly degenerate or outside the image).
        crowd: ``iscrowd: 1``.
    """

    tag: str
    image_id: int
    category_id: int
    box: Box
    crowd: bool


def read_coco_json(
    path: Path, images: Path, categories: tuple[str, ...] | None
) -> tuple[list[BoxRecord], tuple[str, ...]]:
    """A COCO detection file; crowd regions are kept, flagged (:attr:`BoxRecord.iscrowd`).

    Args:
        path: The JSON file.
        images: Folder of the ``file_name``s.
        categories: Category names to keep, in label order (the "general-object subset");
            None keeps every category, ordered by id. Boxes of other categories are dropped.

    Returns:
        The records (every listed image, with or without boxes, by image id) and the class
        names.

    Raises:
        DataError: one line naming ``path`` and the annotation, image or category at fault
            (module docstring), or a ``categories`` name absent from the file or given twice.
    """
    data = _load_coco(path)
    cats = _coco_categories(path, data)
    names = _coco_names(path, cats, categories)
    label = {cid: names.index(n) for cid, n in cats.items() if n in names}
    imgs = _coco_images(path, data)
    items: dict[int, tuple[list[Item], list[Item]]] = {i: ([], []) for i in imgs}
    skipped: dict[str, list[str]] = {}
    for k, raw in enumerate(_coco_list(path, data, "annotations")):
        ann = _coco_annotation(path, k, raw, imgs, cats)
        if ann.category_id not in label:
            continue
        kept, why = clip_box(ann.box, imgs[ann.image_id].size)
        if kept is None:
            skipped.setdefault(why, []).append(ann.tag)
        else:
            items[ann.image_id][1 if ann.crowd else 0].append((kept, label[ann.category_id]))
    _warn_skipped(path, skipped)
    return [_record(images / imgs[i].file_name, *items[i]) for i in sorted(imgs)], names


def _load_coco(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise DataError(
            f"{path}: cannot read the COCO file ({err.strerror or err}); "
            "check data.params.annotations"
        ) from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid JSON (not UTF-8: {err.reason})") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise DataError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        got = _JSON_TYPES.get(type(data), "true, false or null")
        raise DataError(
            f"{path}: must hold an object with 'images', 'annotations' and 'categories', "
            f"got {got}; is it a COCO detection file?"
        )
    return data


def _coco_list(path: Path, data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if not isinstance(value, list):
        got = "it is missing" if key not in data else f"got {_show(value)}"
        raise DataError(
            f"{path}: '{key}' must be a list of objects ({got}); is it a COCO detection file?"
        )
    return value


def _element(path: Path, key: str, k: int, raw: Any, fields: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise DataError(f"{path}: {key}[{k}] must be an object with {fields}, got {_show(raw)}")
    return raw


def _bad(where: str, obj: dict[str, Any], key: str, should: str) -> DataError:
    """``where: key VALUE should``, or ``where: key is missing``."""
    if key not in obj:
        return DataError(f"{where}: {key} is missing")
    return DataError(f"{where}: {key} {_show(obj[key])} {should}")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _coco_id(where: str, obj: dict[str, Any]) -> int:
    value = obj.get("id")
    if not _is_int(value):
        raise _bad(where, obj, "id", "must be an integer")
    return value


def _coco_categories(path: Path, data: dict[str, Any]) -> dict[int, str]:
    cats: dict[int, str] = {}
    by_name: dict[str, int] = {}
    for k, raw in enumerate(_coco_list(path, data, "categories")):
        cat = _element(path, "categories", k, raw, "id and name")
        cid = _coco_id(f"{path}: categories[{k}]", cat)
        where = f"{path}: category {_show(cid)}"
        name = cat.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(where, cat, "name", "must be a non-empty string")
        if cid in cats:
            raise DataError(f"{where}: id is used by two categories; category ids must be unique")
        twin = by_name.setdefault(name, cid)
        if twin != cid:
            raise DataError(
                f"{where}: name {_show(name)} is also category {_show(twin)}'s; "
                "category names must be unique"
            )
        cats[cid] = name
    return cats


def _coco_names(
    path: Path, cats: dict[int, str], categories: tuple[str, ...] | None
) -> tuple[str, ...]:
    names = tuple(categories) if categories else tuple(cats[k] for k in sorted(cats))
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"{path}: data.params.categories lists {twice[0]!r} twice; name it once")
    missing = [n for n in names if n not in cats.values()]
    if missing:
        raise DataError(
            f"{path}: categories {missing} are not in the file; it has {sorted(cats.values())}"
        )
    return names


def _coco_images(path: Path, data: dict[str, Any]) -> dict[int, _CocoImage]:
    imgs: dict[int, _CocoImage] = {}
    for k, raw in enumerate(_coco_list(path, data, "images")):
        img = _element(path, "images", k, raw, "id, file_name, width and height")
        iid = _coco_id(f"{path}: images[{k}]", img)
        where = f"{path}: image {_show(iid)}"
        if iid in imgs:
            raise DataError(f"{where}: id is used by two images; image ids must be unique")
        name = img.get("file_name")
        if not isinstance(name, str) or not name.strip() or "\0" in name:
            raise _bad(where, img, "file_name", "must be the image's file name in data.params.root")
        imgs[iid] = _CocoImage(name, _coco_size(where, img))
    return imgs


def _coco_size(where: str, img: dict[str, Any]) -> tuple[int, int] | None:
    """(width, height) of an image entry; None when neither is given (no clipping)."""
    w, h = img.get("width"), img.get("height")
    if w is None and h is None:
        return None
    if w is None or h is None:
        raise DataError(
            f"{where}: width and height must both be given or both left out, "
            f"got width {_show(w)} and height {_show(h)}"
        )
    return _pixels(where, img, "width"), _pixels(where, img, "height")


def _pixels(where: str, img: dict[str, Any], key: str) -> int:
    f = _number(img[key])
    if f is None or not math.isfinite(f) or f < 1 or f != int(f) or f >= 2**31:
        raise _bad(where, img, key, "must be a positive integer (pixels)")
    return int(f)


def _coco_annotation(
    path: Path, k: int, raw: Any, imgs: Mapping[int, _CocoImage], cats: Mapping[int, str]
) -> _CocoBox:
    """The ``k``-th annotation, checked (module docstring)."""
    ann = _element(path, "annotations", k, raw, "id, image_id, category_id and bbox")
    aid = ann.get("id")
    tag = str(aid) if _is_int(aid) else _show(aid) if isinstance(aid, str) and aid else f"[{k}]"
    iid, cid, bbox = ann.get("image_id"), ann.get("category_id"), ann.get("bbox")
    if not _is_int(iid) or iid not in imgs:
        raise _bad(_where(path, k, aid), ann, "image_id", "is not the id of an image in 'images'")
    if not _is_int(cid) or cid not in cats:
        raise _bad(_where(path, k, aid), ann, "category_id", "is not the id of a category")
    values = [_number(v) for v in bbox] if isinstance(bbox, list) and len(bbox) == 4 else []
    numbers = [v for v in values if v is not None]
    if len(numbers) != 4:
        raise _bad(_where(path, k, aid), ann, "bbox", "must be 4 numbers [x, y, width, height]")
    box = _finite_box(*numbers)
    if box is None:
        raise DataError(
            f"{_where(path, k, aid)}: bbox {_show(bbox)} holds NaN, infinity or a number beyond "
            "float32 range; fix or remove the annotation"
        )
    crowd = ann.get("iscrowd", 0)
    if _number(crowd) is not None and crowd in (0, 1):
        return _CocoBox(tag, iid, cid, box, bool(crowd))
    raise _bad(_where(path, k, aid), ann, "iscrowd", "must be 0 or 1")


def _where(path: Path, k: int, aid: Any) -> str:
    """How a message names the ``k``-th annotation, whose id is ``aid``."""
    if _is_int(aid) or (isinstance(aid, str) and aid):
        return f"{path}: annotation {_show(aid)}"
    return f"{path}: annotations[{k}] (no id)"


def _number(value: Any) -> float | None:
    """``value`` as a float (NaN, ±inf, and inf for integers beyond float range), or None
    when it is no JSON number (bools are none)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _finite_box(x: float, y: float, w: float, h: float) -> Box | None:
    """xyxy of a COCO ``x, y, w, h`` box, or None when a value is not finite or a corner
    lies beyond float32 range (no pixel position; the record would hold inf)."""
    box = (x, y, x + w, y + h)
    return box if all(abs(v) <= _FLOAT32_MAX for v in (x, y, w, h, *box)) else None


def _warn_skipped(path: Path, skipped: Mapping[str, list[str]]) -> None:
    """One warning naming how many boxes were skipped, why, and (the first) which."""
    if not skipped:
        return
    n = sum(len(v) for v in skipped.values())
    parts = []
    for why, tags in sorted(skipped.items(), key=lambda kv: list(_REASONS).index(kv[0])):
        shown = ", ".join(tags[:_SHOWN_IDS])
        more = f", … ({len(tags) - _SHOWN_IDS} more)" if len(tags) > _SHOWN_IDS else ""
        noun = "annotation" if len(tags) == 1 else "annotations"
        parts.append(f"{_REASONS[why]}: {noun} {shown}{more}")
    log.warning("%s: %d %s skipped: %s", path, n, "box" if n == 1 else "boxes", "; ".join(parts))
