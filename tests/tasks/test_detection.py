"""Detection task: COCO mAP on hand-built boxes, target collation, label summaries."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geofl.data.targets import check_targets, label_codes, label_counts
from geofl.errors import ConfigError, DataError
from geofl.tasks import TASKS
from geofl.tasks.base import WHOLE_SAMPLE_TASKS, WholeSampleLabels
from geofl.tasks.coco import ImageBoxes, coco_map
from geofl.tasks.detection import (
    DetectionOutput,
    DetectionTask,
    boxes_to_targets,
    targets_to_dicts,
)


def _hand_example() -> tuple[list[ImageBoxes], list[ImageBoxes]]:
    """Class 0: two objects A, B; detections d1 (0.9) = A, d2 (0.8) a miss, d3 (0.7) on B
    with IoU 0.62 (a hit at IoU thresholds 0.50, 0.55, 0.60, a miss from 0.65 on)."""
    a, b = [0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]
    # d3 = [20, 20, 30, 26.2]: intersection 62, union 100 → IoU 0.62
    truth = [ImageBoxes(np.array([a, b]), np.array([0, 0]))]
    dets = [
        ImageBoxes(
            np.array([a, [50.0, 50.0, 60.0, 60.0], [20.0, 20.0, 30.0, 26.2]]),
            np.array([0, 0, 0]),
            np.array([0.9, 0.8, 0.7]),
        )
    ]
    return truth, dets


def test_coco_map_equals_hand_computed_101_point_ap() -> None:
    truth, dets = _hand_example()
    r = coco_map(truth, dets, num_classes=1)
    # IoU ≥ 0.5..0.6: (P, R) = (1, .5), (.5, .5), (2/3, 1); interpolated precision is 1 at the
    # 51 recall points r ≤ 0.5 and 2/3 at the 50 points above: AP = (51 + 50·2/3) / 101.
    hit = (51 + 50 * 2 / 3) / 101
    # IoU ≥ 0.65..0.95: only d1 is a hit: precision 1 up to r = 0.5, then 0: AP = 51 / 101.
    miss = 51 / 101
    assert r.map_50 == pytest.approx(hit, abs=1e-9)
    assert r.map == pytest.approx((3 * hit + 7 * miss) / 10, abs=1e-9)
    assert r.ap_50 == pytest.approx((hit,))
    assert r.map_75 == pytest.approx(miss, abs=1e-9)


def test_coco_map_classes_without_truth_and_empty_detections() -> None:
    truth, dets = _hand_example()
    r = coco_map(truth, dets, num_classes=3)  # classes 1, 2: no truth → NaN, excluded
    assert math.isnan(r.ap_50[1]) and math.isnan(r.ap_50[2])
    assert r.map_50 == pytest.approx((51 + 50 * 2 / 3) / 101)
    none = [ImageBoxes(np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0))]
    empty = coco_map(truth, none, num_classes=2)
    assert empty.map_50 == 0.0 and empty.ap_50[0] == 0.0 and math.isnan(empty.ap_50[1])


def test_padded_targets_round_trip_and_label_summaries() -> None:
    images = [
        (np.array([[1, 2, 5, 6], [3, 3, 9, 9], [0, 0, 2, 2]], np.float32), np.array([2, 2, 0])),
        (np.zeros((0, 4), np.float32), np.zeros(0, np.int64)),
        (np.array([[4, 4, 8, 8], [1, 1, 2, 2]], np.float32), np.array([1, 0])),
    ]
    t = boxes_to_targets(images)
    assert t.shape == (3, 3, 5)
    check_targets(t, "boxes", 3, 3)
    dicts = targets_to_dicts(t)
    assert dicts[0]["labels"].tolist() == [2, 2, 0] and dicts[1]["boxes"].shape == (0, 4)
    assert dicts[2]["boxes"].tolist() == [[4, 4, 8, 8], [1, 1, 2, 2]]
    # Dominant class: most objects (image 0: class 2), none → C (3), ties → lower id (0).
    assert label_codes(t.numpy(), "boxes", num_classes=3).tolist() == [2, 3, 0]
    assert label_counts(t.numpy(), "boxes", 3).tolist() == [2, 1, 2]
    task = DetectionTask(3)
    assert task.label_summary(t).tolist() == [2, 1, 2]
    assert [d["labels"].tolist() for d in task.collate(t, torch.tensor([2, 0]))] == [
        [1, 0],
        [2, 2, 0],
    ]


@pytest.mark.parametrize(
    ("row", "msg"),
    [
        ([5, 5, 5, 9, 0], "degenerate"),
        ([1, 1, 4, 4, 7], r"integers in \[0, 3\)"),
        ([1, 1, 4, 4, 0.5], "integers"),
    ],
)
def test_check_targets_refuses_bad_boxes(row: list[float], msg: str) -> None:
    t = torch.tensor([[row]], dtype=torch.float32)
    with pytest.raises(DataError, match=msg):
        check_targets(t, "boxes", 3, 1)


def test_accumulator_and_task_registration() -> None:
    task = TASKS.build("detection", {}, num_classes=1, train_targets=torch.zeros(2, 1, 5))
    assert task.primary_metric == "map_50" and task.model_takes_targets
    truth, dets = _hand_example()
    target = [
        {"boxes": torch.tensor(truth[0].boxes, dtype=torch.float32), "labels": torch.tensor([0, 0])}
    ]
    det = {
        "boxes": torch.tensor(dets[0].boxes, dtype=torch.float32),
        "labels": torch.tensor([0, 0, 0]),
        "scores": torch.tensor([0.9, 0.8, 0.7]),
    }
    out = DetectionOutput([det], {"a": torch.tensor(1.5), "b": torch.tensor(0.5)})
    acc = task.accumulator()
    acc.update(out, target, task.loss_sum(out, target))
    m = acc.compute()
    assert m.values["map_50"] == pytest.approx((51 + 50 * 2 / 3) / 101, abs=1e-6)
    assert m.values["loss"] == pytest.approx(2.0) and m.n == 1
    assert task.loss({"a": torch.tensor(1.0), "b": torch.tensor(2.0)}, target).item() == 3.0
    with pytest.raises(ConfigError, match=r"\[N, M, 5\] boxes targets"):
        TASKS.build("detection", {}, num_classes=1, train_targets=torch.zeros(4, dtype=torch.long))


def test_whole_sample_targets_and_labels_by_hand() -> None:
    """What BackdoorIndicator's OOD indicator reads: one centre box per image carrying the
    assigned class, and the class of each image's most confident detection (C: none)."""
    task = TASKS.build("detection", {}, num_classes=3, train_targets=torch.zeros(1, 1, 5))
    assert isinstance(task, WholeSampleLabels)
    rows = task.whole_sample_targets(torch.tensor([2, 0]), (3, 8, 12))
    assert rows.tolist() == [[[3.0, 2.0, 9.0, 6.0, 2.0]], [[3.0, 2.0, 9.0, 6.0, 0.0]]]

    def det(scores: list[float], labels: list[int]) -> dict[str, torch.Tensor]:
        n = len(scores)
        return {
            "boxes": torch.zeros(n, 4),
            "scores": torch.tensor(scores).reshape(n),
            "labels": torch.tensor(labels, dtype=torch.int64).reshape(n),
        }

    dets = [det([0.3, 0.9], [2, 1]), det([], []), det([0.5, 0.5], [0, 2])]
    assert task.whole_sample_labels(dets).tolist() == [1, 3, 0]
    cls = TASKS.build("classification", {}, num_classes=3, train_targets=torch.tensor([0, 1, 2]))
    assert isinstance(cls, WholeSampleLabels)
    assert cls.whole_sample_targets(torch.tensor([2, 0]), (3, 8, 8)).tolist() == [2, 0]
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    assert cls.whole_sample_labels(logits).tolist() == [1, 0]
    assert {"classification", "detection"} <= WHOLE_SAMPLE_TASKS
    assert "multilabel" not in WHOLE_SAMPLE_TASKS and "regression" not in WHOLE_SAMPLE_TASKS
