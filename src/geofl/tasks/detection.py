"""Object detection: a detector's own loss, COCO box mAP over a split (paper 004 §3).

Targets (``boxes`` kind, :mod:`geofl.data.targets`): ``[N, M, 5]`` float32 rows ``(x1, y1,
x2, y2, label)`` padded with label ``-1``; :meth:`DetectionTask.collate` turns a batch into
torchvision's list of per-image ``{"boxes": [n, 4] float32 xyxy, "labels": [n] int64}``.
Crowd regions (rows labelled ``-2 - c``, COCO ``iscrowd: 1``) are no training targets
(torchvision's and Detectron2's COCO recipes drop them too: one box over many objects is no
box to regress to): they ride along as ``"crowd_boxes"`` and ``"crowd_labels"``, which the
detectors do not read, to reach the evaluator, where COCO ignores detections on them.

Model output: torchvision detectors return their loss dict in training (the trainer calls
``model(x, targets)``, :attr:`DetectionTask.model_takes_targets`) and per-image detections
in evaluation; called with targets in eval mode, geofl's detectors return both as a
:class:`DetectionOutput`, so evaluation reports a loss as every task does.

Metrics (pycocotools' ``COCOeval``, :mod:`geofl.tasks.coco`): ``map_50`` (mAP@0.5, paper
004's CDA and the primary metric), ``map`` (mAP@[.5:.95]), ``map_75``, per-class ``ap`` and
``ap_50``, and ``loss`` (mean summed detector loss per image).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.targets import box_class_counts, crowd_label
from geofl.errors import ConfigError
from geofl.tasks.base import (
    TASKS,
    Direction,
    SplitMetrics,
    Task,
    declare_metrics,
    declare_whole_sample_labels,
)
from geofl.tasks.coco import ImageBoxes, coco_map
from geofl.tasks.common import TARGETS_FIELD, batch_loss, require_tensor

__all__ = [
    "DetectionAccumulator",
    "DetectionOutput",
    "DetectionParams",
    "DetectionTask",
    "boxes_to_targets",
    "targets_to_dicts",
]

#: torchvision's per-image detection / target record: ``boxes``, ``labels`` (``scores``).
ImageDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class DetectionOutput:
    """What a detector returns in eval mode when given targets.

    Attributes:
        detections: Per image ``{"boxes": [n, 4] xyxy, "scores": [n], "labels": [n]}``.
        losses: The detector's loss terms on the same batch (mean over its images).
    """

    detections: list[ImageDict]
    losses: Mapping[str, torch.Tensor]


def targets_to_dicts(rows: torch.Tensor) -> list[ImageDict]:
    """``[B, M, 5]`` padded boxes targets → per-image ``{"boxes", "labels", "crowd_boxes",
    "crowd_labels"}``: the objects, and the crowd regions (class ids, not row labels)."""
    out = []
    for r in rows:
        keep, crowd = r[:, 4] >= 0, r[:, 4] < -1
        out.append(
            {
                "boxes": r[keep, :4].contiguous(),
                "labels": r[keep, 4].long(),
                "crowd_boxes": r[crowd, :4].contiguous(),
                "crowd_labels": crowd_label(r[crowd, 4].long()),
            }
        )
    return out


def boxes_to_targets(images: Sequence[tuple[np.ndarray, np.ndarray]]) -> torch.Tensor:
    """Per-image ``(boxes [n, 4], labels [n])`` → ``[N, M, 5]`` padded targets (M ≥ 1)."""
    m = max([len(b) for b, _ in images] + [1])
    out = torch.zeros(len(images), m, 5)
    out[..., 4] = -1.0
    for i, (b, lab) in enumerate(images):
        if len(b):
            out[i, : len(b), :4] = torch.as_tensor(np.asarray(b, np.float32))
            out[i, : len(b), 4] = torch.as_tensor(np.asarray(lab, np.float32))
    return out


class DetectionAccumulator:
    """Keeps every detection and ground-truth box of a split; COCO mAP at the end.

    Args:
        num_classes: C.
        max_detections: Detections per image kept by COCO's evaluation.
    """

    def __init__(self, num_classes: int, max_detections: int) -> None:
        self.num_classes = num_classes
        self.max_detections = max_detections
        self.truth: list[ImageBoxes] = []
        self.found: list[ImageBoxes] = []
        self.loss_sum = 0.0

    owns_loss = False

    def update(self, output: Any, target: Any, loss_sum: float | None) -> None:
        """Add a batch: ``output`` (:class:`DetectionOutput` or a list of detection
        dicts), ``target`` the batch's per-image target dicts."""
        dets = output.detections if isinstance(output, DetectionOutput) else output
        for d, t in zip(dets, target, strict=True):
            self.found.append(
                ImageBoxes(
                    d["boxes"].detach().numpy(),
                    d["labels"].numpy(),
                    d["scores"].detach().numpy(),
                )
            )
            self.truth.append(_truth(t))
        self.loss_sum += batch_loss(loss_sum)

    def compute(self) -> SplitMetrics:
        """``map_50``, ``map``, ``map_75``, ``loss``; per-class ``ap_50`` and ``ap``."""
        r = coco_map(self.truth, self.found, self.num_classes, self.max_detections)
        n = len(self.truth)
        notes = []
        missing = sum(1 for v in r.ap_50 if np.isnan(v))
        if missing:
            notes.append(f"{missing} classes without objects in this split: excluded from mAP")
        return SplitMetrics(
            values={
                "map_50": r.map_50,
                "map": r.map,
                "map_75": r.map_75,
                "loss": self.loss_sum / n if n else float("nan"),
            },
            per_class={"ap_50": list(r.ap_50), "ap": list(r.ap)},
            n=n,
            notes=tuple(notes),
        )


def _truth(target: ImageDict) -> ImageBoxes:
    """An image's objects and crowd regions (when its dict has them), crowd flagged."""
    boxes, labels = target["boxes"].numpy(), target["labels"].numpy()
    if "crowd_boxes" not in target:
        return ImageBoxes(boxes, labels)
    crowd_boxes, crowd_labels = target["crowd_boxes"].numpy(), target["crowd_labels"].numpy()
    return ImageBoxes(
        np.concatenate([boxes.reshape(-1, 4), crowd_boxes.reshape(-1, 4)]),
        np.concatenate([labels, crowd_labels]),
        iscrowd=np.arange(len(labels) + len(crowd_labels)) >= len(labels),
    )


class DetectionParams(BaseModel):
    """Parameters of the detection task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_detections: int = Field(
        100, ge=1, le=10_000, description="detections per image scored by COCO mAP"
    )


class DetectionTask:
    """The detector's summed loss terms; COCO mAP@0.5 as primary metric.

    Args:
        num_classes: C object classes (no background class; detectors that need one add it).
        max_detections: Detections per image scored by COCO mAP.
    """

    name = "detection"
    primary_metric = "map_50"
    direction: Direction = "max"
    model_takes_targets = True

    def __init__(self, num_classes: int, max_detections: int = 100) -> None:
        self.num_outputs = num_classes
        self.max_detections = max_detections

    def loss(self, output: Any, target: Any) -> torch.Tensor:
        """Sum of the detector's loss dict (each term a batch mean)."""
        losses = output.losses if isinstance(output, DetectionOutput) else output
        return torch.stack(list(losses.values())).sum()

    def loss_sum(self, output: Any, target: Any) -> float:
        """Batch loss × images (evaluation; the output must carry its losses)."""
        if not isinstance(output, DetectionOutput):
            return float("nan")
        return float(self.loss(output, target)) * len(target)

    def predict(self, output: Any) -> Any:
        """Per-image detections (``boxes``, ``scores``, ``labels``)."""
        return output.detections if isinstance(output, DetectionOutput) else output

    def whole_sample_targets(self, labels: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """``[n, 1, 5]``: one box over the centre half of each image (x from W/4 to 3W/4, y
        from H/4 to 3H/4) with class ``labels[i]``."""
        h, w = float(shape[-2]), float(shape[-1])
        box = torch.tensor([w / 4, h / 4, 3 * w / 4, 3 * h / 4], dtype=torch.float32)
        rows = torch.cat([box.expand(len(labels), 4), labels.to(torch.float32)[:, None]], dim=1)
        return rows[:, None, :]

    def whole_sample_labels(self, output: Any) -> torch.Tensor:
        """``[n]``: the class of each image's most confident detection (what the detector
        returns, i.e. above its own ``score_thresh``; the first of equal scores), or C
        (:attr:`num_outputs`) for an image with no detection."""
        dets = self.predict(output)
        out = torch.full((len(dets),), self.num_outputs, dtype=torch.int64)
        for i, d in enumerate(dets):
            if d["scores"].numel():
                out[i] = d["labels"][int(torch.argmax(d["scores"]))]
        return out

    def accumulator(self) -> DetectionAccumulator:
        """A fresh COCO accumulator."""
        return DetectionAccumulator(self.num_outputs, self.max_detections)

    def label_summary(self, targets: Any) -> np.ndarray:
        """``[C]`` int64 objects per class (consistency weighting, label histograms)."""
        t = targets.numpy() if isinstance(targets, torch.Tensor) else np.asarray(targets)
        counts: np.ndarray = box_class_counts(t, self.num_outputs).sum(axis=0)
        return counts

    def collate(self, targets: Any, index: torch.Tensor) -> list[ImageDict]:
        """The per-image target dicts of the samples ``index``."""
        return targets_to_dicts(targets[index])

    def fitted_state(self) -> dict[str, Any]:
        """Nothing is fitted on the train split."""
        return {}


declare_metrics("detection", {"map_50": "max", "map": "max", "map_75": "max", "loss": "min"})
declare_whole_sample_labels("detection")


@TASKS.register("detection", params=DetectionParams, requires=("detection",))
def build_detection(params: DetectionParams, *, num_classes: int, train_targets: Any) -> Task:
    """Object detection on ``boxes`` targets: detector loss, COCO mAP (004 §3)."""
    t = require_tensor("detection", train_targets)
    if t.ndim != 3 or t.shape[-1] != 5:
        raise ConfigError(
            TARGETS_FIELD,
            f"detection needs [N, M, 5] boxes targets, got {list(t.shape)} "
            f"{str(t.dtype).removeprefix('torch.')}; use a detection dataset "
            "(synthetic_aerial, nwpu_vhr10, dior, coco_json, neon_tree_crowns)",
        )
    return DetectionTask(num_classes, params.max_detections)
