"""COCO box mAP over a split, computed by pycocotools' reference ``COCOeval``.

Why pycocotools (pinned ``==2.0.11``): it *is* the COCO reference implementation whose
numbers detection papers quote (paper 004's mAP@0.5 for YOLOv5s on NWPU VHR-10 comes from
the same 101-point interpolated AP), it ships manylinux wheels for numpy 2, and it has no
dependencies beyond numpy. faster-coco-eval reproduces it faster, which matters for 5 000
image splits and not for the few hundred images of a CPU run; torchmetrics' mAP wraps one
of the two and would add its dependency tree.

Conventions: boxes are ``xyxy`` pixels (converted to COCO ``xywh`` here), every class id in
``[0, C)`` becomes COCO category ``id + 1``, area is ``w·h`` (used only for the
small/medium/large breakdown, which is not reported), at most ``max_detections`` per image
(COCO's 100). Ground-truth crowd regions (:attr:`ImageBoxes.iscrowd`) go to ``COCOeval`` as
``iscrowd: 1``, with its semantics (Lin et al. 2014, the COCO detection evaluation): a
detection whose overlap with one (intersection over the *detection's* area) reaches the IoU
threshold, and that matches no ordinary object, is ignored rather than a false positive,
and crowd regions are no positives. A class, or a split, whose ground truth is crowd
regions only has no AP (NaN), as one without ground truth.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CocoResult", "ImageBoxes", "coco_map"]


@dataclass(frozen=True)
class ImageBoxes:
    """Boxes of one image (ground truth: ``scores`` None).

    Attributes:
        boxes: ``[n, 4]`` float xyxy pixels.
        labels: ``[n]`` int64 class ids in ``[0, C)``.
        scores: ``[n]`` float confidences of detections, None for ground truth.
        iscrowd: ``[n]`` bool, ground truth only: True for a crowd region (COCO
            ``iscrowd: 1``); None: no crowd region.
    """

    boxes: np.ndarray
    labels: np.ndarray
    scores: np.ndarray | None = None
    iscrowd: np.ndarray | None = None

    def crowd_flags(self) -> np.ndarray:
        """``[n]`` bool crowd flags (all False when :attr:`iscrowd` is None)."""
        n = len(self.labels)
        return np.zeros(n, bool) if self.iscrowd is None else np.asarray(self.iscrowd, bool)


@dataclass(frozen=True)
class CocoResult:
    """Box AP of a split.

    Attributes:
        map: mAP@[.5:.95] (COCO's primary AP), NaN without ground truth.
        map_50: mAP at IoU 0.5 (PASCAL-style; paper 004's CDA).
        map_75: mAP at IoU 0.75.
        ap: ``[C]`` AP@[.5:.95] per class, NaN for classes without ground truth.
        ap_50: ``[C]`` AP@0.5 per class, NaN for classes without ground truth.
    """

    map: float
    map_50: float
    map_75: float
    ap: tuple[float, ...]
    ap_50: tuple[float, ...]


def coco_map(
    truth: Sequence[ImageBoxes],
    detections: Sequence[ImageBoxes],
    num_classes: int,
    max_detections: int = 100,
) -> CocoResult:
    """COCO box AP of ``detections`` against ``truth`` (index-aligned per image).

    Args:
        truth: Ground truth of each image.
        detections: Detections of each image (with scores).
        num_classes: C.
        max_detections: Highest-scoring detections kept per image.

    Returns:
        The split's AP (means over classes with ground truth other than crowd regions, as
        COCO).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO()
    gt.dataset = {
        "images": [{"id": i + 1} for i in range(len(truth))],
        "categories": [{"id": c + 1} for c in range(num_classes)],
        "annotations": _annotations(truth),
    }
    rows = _detection_rows(detections)
    nan = (float("nan"),) * num_classes
    present = _present(truth, num_classes)
    if not present.any():  # no positives (crowd regions are none): COCOeval's −1s
        return CocoResult(float("nan"), float("nan"), float("nan"), nan, nan)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
        gt.createIndex()
        if rows.shape[0] == 0:  # loadRes refuses an empty result list
            zeros = tuple(0.0 if p else float("nan") for p in present)
            return CocoResult(0.0, 0.0, 0.0, zeros, zeros)
        dt = gt.loadRes(rows)
        ev = COCOeval(gt, dt, iouType="bbox")
        ev.params.maxDets = [1, 10, max_detections]
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    precision = ev.eval["precision"]  # [T, R, K, A, M]; -1 where a class has no truth
    per_t = _per_class(precision[:, :, :, 0, -1])  # [T, K]
    ap = tuple(float(v) for v in _nanmean(per_t, axis=0))
    ap_50 = tuple(float(v) for v in per_t[0])
    return CocoResult(float(ev.stats[0]), float(ev.stats[1]), float(ev.stats[2]), ap, ap_50)


def _annotations(truth: Sequence[ImageBoxes]) -> list[dict[str, object]]:
    anns: list[dict[str, object]] = []
    for i, img in enumerate(truth):
        rows = zip(np.asarray(img.boxes, np.float64), img.labels, img.crowd_flags(), strict=True)
        for box, label, crowd in rows:
            w, h = float(box[2] - box[0]), float(box[3] - box[1])
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": i + 1,
                    "category_id": int(label) + 1,
                    "bbox": [float(box[0]), float(box[1]), w, h],
                    "area": w * h,
                    "iscrowd": int(crowd),
                }
            )
    return anns


def _detection_rows(detections: Sequence[ImageBoxes]) -> np.ndarray:
    """``[D, 7]`` (image id, x, y, w, h, score, category) as ``COCO.loadRes`` takes."""
    parts = []
    for i, d in enumerate(detections):
        b = np.asarray(d.boxes, np.float64).reshape(-1, 4)
        if b.shape[0] == 0:
            continue
        s = np.asarray(d.scores if d.scores is not None else np.ones(len(b)), np.float64)
        parts.append(
            np.column_stack(
                [
                    np.full(len(b), i + 1.0),
                    b[:, 0],
                    b[:, 1],
                    b[:, 2] - b[:, 0],
                    b[:, 3] - b[:, 1],
                    s,
                    np.asarray(d.labels, np.float64) + 1.0,
                ]
            )
        )
    return np.concatenate(parts) if parts else np.zeros((0, 7))


def _per_class(precision: np.ndarray) -> np.ndarray:
    """``[T, K]`` AP per IoU threshold and class from ``[T, R, K]`` precisions (NaN where
    the class has no ground truth)."""
    valid = precision > -1
    total = np.where(valid, precision, 0.0).sum(axis=1)
    count = valid.sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _nanmean(a: np.ndarray, axis: int) -> np.ndarray:
    valid = ~np.isnan(a)
    count = valid.sum(axis=axis)
    total = np.where(valid, a, 0.0).sum(axis=axis)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _present(truth: Sequence[ImageBoxes], num_classes: int) -> np.ndarray:
    """``[C]`` bool: classes with a positive (an object that is no crowd region)."""
    seen = np.zeros(num_classes, bool)
    for img in truth:
        seen[np.asarray(img.labels, np.int64)[~img.crowd_flags()]] = True
    return seen
