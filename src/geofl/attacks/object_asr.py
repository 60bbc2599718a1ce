"""Attack success rate per object of the object-disappearance attack (004 Eq. 14–15).

004 §3.1: "CDA denotes mAP@0.5" — Eq. 14, CDA = mAP(model, D_clean-test), the detection
task's ``map_50`` on the clean test split — and "the attack success rate is computed per
object and is defined as the proportion of attacked ground-truth objects for which no
correct target-class detection remains above confidence 0.25 and IoU 0.50" — Eq. 15,

    ASR = #{triggered and missed objects} / #{triggered objects}.

Here the triggered objects are every target-class object of the test images that hold one,
each stamped with the attack's trigger (:func:`geofl.attacks.oda.stamp_target_objects`);
objects of other classes and images without target objects are not counted. A triggered
object is *detected* iff some detection of the model on the triggered image has

* the object's (target) class,
* score ≥ ``score_threshold`` (004: 0.25; "above" read as ≥, so a detector whose scores
  sit exactly at the threshold keeps its objects), and
* IoU ≥ ``iou_threshold`` with the object's box (004: 0.50; ≥ as in COCO/VOC matching);

else it is *missed*. The rule is per object ("no correct detection remains"), not a
one-to-one matching: one detection may cover two overlapping objects. The clean model's own
misses count too (004 Table 3 reports ASR 0.03 for FedAvg without attack). To tell the
trigger's effect from those misses, the probe also records the same count on the probe
images without the trigger (``miss_untriggered``); a from-scratch detector early in training
misses many objects by itself, and its ASR is then mostly that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from geofl.attacks.probe import ASR_METRIC
from geofl.data.base import Inputs
from geofl.tasks.base import SplitMetrics

__all__ = [
    "ASR_IOU",
    "ASR_SCORE",
    "UNTRIGGERED_MISS_METRIC",
    "ObjectDisappearanceProbe",
    "box_iou",
    "missed_objects",
    "object_attack_success_rate",
]

#: 004 §3.1: confidence 0.25 and IoU 0.50, fixed for all matched-seed runs.
ASR_SCORE, ASR_IOU = 0.25, 0.5
#: Key of Eq. 15's count on the *untriggered* probe images (``rounds.jsonl``
#: ``test.miss_untriggered``): the model's own misses, so ASR − it is the trigger's effect.
UNTRIGGERED_MISS_METRIC = "miss_untriggered"


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[n, d]`` intersection over union of ``a`` (``[n, 4]``) and ``b`` (``[d, 4]``) xyxy.

    Example:
        >>> box_iou(torch.tensor([[0.0, 0, 4, 4]]), torch.tensor([[2.0, 0, 6, 4]]))
        tensor([[0.3333]])
    """
    a, b = a.to(torch.float64), b.to(torch.float64)
    area_a = (a[:, 2] - a[:, 0]).clamp_min(0) * (a[:, 3] - a[:, 1]).clamp_min(0)
    area_b = (b[:, 2] - b[:, 0]).clamp_min(0) * (b[:, 3] - b[:, 1]).clamp_min(0)
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp_min(0)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a[:, None] + area_b[None, :] - inter
    return torch.where(union > 0, inter / union.clamp_min(1e-12), torch.zeros_like(inter))


def missed_objects(
    truth: torch.Tensor,
    detection: dict[str, torch.Tensor],
    target: int,
    score_threshold: float = ASR_SCORE,
    iou_threshold: float = ASR_IOU,
) -> torch.Tensor:
    """Which triggered objects of one image no correct detection finds (004 Eq. 15).

    Args:
        truth: ``[n, 4]`` xyxy boxes of the image's triggered (target-class) objects.
        detection: The model's detections on the triggered image: ``boxes`` ``[d, 4]``
            xyxy, ``scores`` ``[d]``, ``labels`` ``[d]`` class ids.
        target: The attacked class (a correct detection has this label).
        score_threshold: Minimum score of a correct detection (004: 0.25).
        iou_threshold: Minimum IoU of a correct detection with the object (004: 0.5).

    Returns:
        ``[n]`` bool, True where the object is missed.
    """
    keep = (detection["labels"] == target) & (detection["scores"] >= score_threshold)
    boxes = detection["boxes"][keep]
    if len(truth) == 0 or len(boxes) == 0:
        return torch.ones(len(truth), dtype=torch.bool)
    return ~(box_iou(truth, boxes) >= iou_threshold).any(dim=1)


def object_attack_success_rate(
    truths: Sequence[torch.Tensor],
    detections: Sequence[dict[str, torch.Tensor]],
    target: int,
    score_threshold: float = ASR_SCORE,
    iou_threshold: float = ASR_IOU,
) -> tuple[int, int]:
    """``(missed, triggered)`` object counts over images (004 Eq. 15: ASR = missed/triggered).

    Args:
        truths: Per image ``[n_i, 4]`` boxes of its triggered objects (``n_i`` may be 0).
        detections: Per image, the detections on the triggered image (index-aligned).
        target: The attacked class.
        score_threshold: See :func:`missed_objects`.
        iou_threshold: See :func:`missed_objects`.
    """
    missed = triggered = 0
    for t, d in zip(truths, detections, strict=True):
        missed += int(missed_objects(t, d, target, score_threshold, iou_threshold).sum())
        triggered += len(t)
    return missed, triggered


#: ``(images [B, C, H, W], boxes targets [B, M, 5]) -> triggered images``.
Stamp = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ObjectDisappearanceProbe:
    """The ODA's ASR on the test split: triggered target objects that disappear.

    Attributes:
        index: ``[M]`` int64 test images holding at least one target-class object.
        targets: ``[M, K, 5]`` their boxes targets (rows ``x1, y1, x2, y2, label``).
        target: The attacked class.
        stamp: Puts the trigger on every target-class object of a batch.
        score_threshold: Confidence floor of a correct detection (004: 0.25).
        iou_threshold: IoU floor of a correct detection (004: 0.5).
    """

    index: torch.Tensor
    targets: torch.Tensor
    target: int
    stamp: Stamp
    score_threshold: float = ASR_SCORE
    iou_threshold: float = ASR_IOU

    def measure(
        self, model: nn.Module, inputs: Inputs, batch_size: int, *, triggered: bool = True
    ) -> float:
        """Eq. 15 of ``model`` on the triggered probe images; NaN without target objects.

        With ``triggered=False`` the same count on the probe images as they are (no
        trigger): the share of the same target objects the model misses by itself.

        Deterministic: fixed images and trigger, the model in eval mode (restored after).
        """
        was_training = model.training
        model.eval()
        missed = counted = 0
        with torch.inference_mode():
            for start in range(0, len(self.index), batch_size):
                rows = self.targets[start : start + batch_size]
                x = inputs[self.index[start : start + batch_size]]
                x = self.stamp(x, rows) if triggered else x
                dets: Any = model(x)
                truths = [r[r[:, 4] == self.target, :4] for r in rows]
                m, n = object_attack_success_rate(
                    truths, dets, self.target, self.score_threshold, self.iou_threshold
                )
                missed, counted = missed + m, counted + n
        model.train(was_training)
        return missed / counted if counted else math.nan

    def extend(
        self, metrics: SplitMetrics, model: nn.Module, inputs: Inputs, batch_size: int
    ) -> SplitMetrics:
        """``metrics`` (CDA = ``map_50``, Eq. 14) with the ASR added under ``asr`` and the
        untriggered miss rate under ``miss_untriggered`` (:data:`UNTRIGGERED_MISS_METRIC`)."""
        asr = self.measure(model, inputs, batch_size)
        miss = self.measure(model, inputs, batch_size, triggered=False)
        values = {**metrics.values, ASR_METRIC: asr, UNTRIGGERED_MISS_METRIC: miss}
        return replace(metrics, values=values)
