"""Crowd regions (COCO ``iscrowd: 1``) travel from the COCO JSON to the evaluator and are
scored as pycocotools' ``COCOeval`` scores them when run directly on the same file: a
detection matched to a crowd region is ignored, a crowd region is not a positive (geofl
issue 31, item 3).

Every case goes the whole way (file → ``build_coco_json`` → ``[N, M, 5]`` targets →
``DetectionTask.collate`` → accumulator) and is compared with ``COCOeval`` on the original
JSON. Images are 64 × 64 and ``size`` is 64, so pixels are not rescaled.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from geofl.data.readers.detection import CocoParams, build_coco_json
from geofl.data.targets import box_class_counts, check_targets, crowd_label
from geofl.errors import DataError
from geofl.tasks.base import SplitMetrics
from geofl.tasks.coco import ImageBoxes, coco_map
from geofl.tasks.detection import DetectionTask, targets_to_dicts

#: A detection: (image id, category id, COCO xywh box, score).
Det = tuple[int, int, list[float], float]

A = [2.0, 2.0, 20.0, 20.0]  # the crowd region of the reproduction
B = [36.0, 36.0, 20.0, 20.0]  # the ordinary object


def _ann(i: int, image: int, cat: int, bbox: list[float], crowd: int) -> dict[str, Any]:
    area = bbox[2] * bbox[3]
    return {
        "id": i,
        "image_id": image,
        "category_id": cat,
        "bbox": bbox,
        "area": area,
        "iscrowd": crowd,
    }


def _doc(anns: list[dict[str, Any]], images: int = 1, cats: int = 1) -> dict[str, Any]:
    return {
        "images": [
            {"id": i + 1, "file_name": f"{i + 1}.png", "width": 64, "height": 64}
            for i in range(images)
        ],
        "categories": [{"id": c + 1, "name": f"c{c}"} for c in range(cats)],
        "annotations": anns,
    }


def _pycocotools(doc: dict[str, Any], dets: list[Det]) -> tuple[float, float]:
    """(mAP@[.5:.95], mAP@0.5) of ``COCOeval`` run on the file itself."""
    gt = COCO()
    gt.dataset = json.loads(json.dumps(doc))
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        rows = [{"image_id": i, "category_id": c, "bbox": b, "score": s} for i, c, b, s in dets]
        ev = COCOeval(gt, gt.loadRes(rows), iouType="bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


def _geofl(tmp_path: Path, doc: dict[str, Any], dets: list[Det]) -> SplitMetrics:
    """geofl's metrics for ``dets`` on the dataset read from ``doc``."""
    for img in doc["images"]:
        Image.new("RGB", (64, 64)).save(tmp_path / img["file_name"])
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps(doc))
    ds = build_coco_json(CocoParams(root=tmp_path, annotations=ann, size=64), cache_dir=tmp_path)
    check_targets(ds.targets, "boxes", len(ds.classes), len(ds))
    task = DetectionTask(len(ds.classes))
    truth = task.collate(ds.targets, torch.arange(len(ds)))
    found = []
    for img in doc["images"]:  # records follow the image ids' order
        mine = [d for d in dets if d[0] == img["id"]]
        xywh = torch.tensor([b for _, _, b, _ in mine], dtype=torch.float32).reshape(-1, 4)
        found.append(
            {
                "boxes": torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], dim=1),
                "labels": torch.tensor([c - 1 for _, c, _, _ in mine], dtype=torch.int64),
                "scores": torch.tensor([s for *_, s in mine]),
            }
        )
    acc = task.accumulator()
    acc.update(found, truth, 0.0)
    return acc.compute()


CASES: dict[str, tuple[list[dict[str, Any]], list[Det], int]] = {
    # The reproduction: crowd A, ordinary B, a detection on each (A's first).
    "crowd-and-normal": (
        [_ann(1, 1, 1, A, 1), _ann(2, 1, 1, B, 0)],
        [(1, 1, A, 0.9), (1, 1, B, 0.8)],
        1,
    ),
    # Only the crowd region is found: it is no positive, so B is missed (AP 0, not NaN).
    "only-crowd-found": (
        [_ann(1, 1, 1, A, 1), _ann(2, 1, 1, B, 0)],
        [(1, 1, A, 0.9)],
        1,
    ),
    # Small detections inside a large crowd region: IoU with it is < 0.5, but a crowd IoU
    # is intersection over the detection's area (1.0), so all three are ignored.
    "many-inside-big-crowd": (
        [_ann(1, 1, 1, [0.0, 0.0, 40.0, 40.0], 1), _ann(2, 1, 1, [44.0, 44.0, 16.0, 16.0], 0)],
        [
            (1, 1, [2.0, 2.0, 8, 8], 0.99),
            (1, 1, [20.0, 20.0, 8, 8], 0.98),
            (1, 1, [5.0, 25.0, 10, 10], 0.97),
            (1, 1, [44.0, 44.0, 16, 16], 0.5),
        ],
        1,
    ),
    # A crowd region over an ordinary object: COCOeval matches the ordinary one first, so
    # the second detection there is ignored instead of counting as a false positive.
    "crowd-over-object": (
        [_ann(1, 1, 1, [0.0, 0.0, 60.0, 60.0], 1), _ann(2, 1, 1, [10.0, 10.0, 20.0, 20.0], 0)],
        [(1, 1, [10.0, 10.0, 20, 20], 0.9), (1, 1, [11.0, 11.0, 20, 20], 0.95)],
        1,
    ),
    # Class c1 has only a crowd region (no ground truth: NaN, excluded from the mean); a
    # crowd region of c1 does not hide a c0 false positive on it, and image 2's crowd-only
    # ground truth leaves it without positives.
    "crowd-only-class-and-image": (
        [_ann(1, 1, 2, A, 1), _ann(2, 1, 1, B, 0), _ann(3, 2, 1, A, 1)],
        [(1, 2, A, 0.9), (1, 1, A, 0.95), (1, 1, B, 0.8), (2, 1, A, 0.7)],
        2,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_crowd_regions_score_as_pycocotools_on_the_file(tmp_path: Path, case: str) -> None:
    anns, dets, cats = CASES[case]
    doc = _doc(anns, images=1 + any(a["image_id"] == 2 for a in anns), cats=cats)
    want_map, want_50 = _pycocotools(doc, dets)
    got = _geofl(tmp_path, doc, dets)
    assert got.values["map_50"] == pytest.approx(want_50, abs=1e-9)
    assert got.values["map"] == pytest.approx(want_map, abs=1e-9)
    if case == "crowd-and-normal":  # the numbers: COCO 1.0 (geofl gave 0.5)
        assert got.values["map_50"] == pytest.approx(1.0, abs=1e-12)
    if case == "crowd-only-class-and-image":
        assert math.isnan(got.per_class["ap_50"][1])


def test_coco_map_takes_crowd_flags() -> None:
    a, b = [2.0, 2.0, 22.0, 22.0], [36.0, 36.0, 56.0, 56.0]
    truth = [ImageBoxes(np.array([a, b]), np.array([0, 0]), iscrowd=np.array([True, False]))]
    dets = [ImageBoxes(np.array([a, b]), np.array([0, 0]), np.array([0.9, 0.8]))]
    assert coco_map(truth, dets, 1).map_50 == pytest.approx(1.0, abs=1e-12)
    plain = [ImageBoxes(np.array([a, b]), np.array([0, 0]))]
    assert coco_map(plain, dets, 1).map_50 == pytest.approx(1.0, abs=1e-12)  # both found
    only_crowd = [ImageBoxes(np.array([a]), np.array([0]), iscrowd=np.array([True]))]
    r = coco_map(only_crowd, dets, 1)  # no positives anywhere: NaN, as without truth
    assert math.isnan(r.map_50) and math.isnan(r.ap_50[0])
    none = [ImageBoxes(np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0))]
    r = coco_map(truth, none, 2)  # no detections: 0 where there are positives, else NaN
    assert r.ap_50[0] == 0.0 and math.isnan(r.ap_50[1])


def test_crowd_rows_are_no_training_targets_and_no_objects() -> None:
    rows = torch.tensor(
        [[[1, 1, 5, 5, 0], [2, 2, 9, 9, crowd_label(1)], [0, 0, 0, 0, -1]]], dtype=torch.float32
    )
    check_targets(rows, "boxes", 2, 1)
    (d,) = targets_to_dicts(rows)
    assert d["boxes"].tolist() == [[1, 1, 5, 5]] and d["labels"].tolist() == [0]
    assert d["crowd_boxes"].tolist() == [[2, 2, 9, 9]] and d["crowd_labels"].tolist() == [1]
    assert box_class_counts(rows.numpy(), 2).tolist() == [[1, 0]]  # crowd: not an object
    assert crowd_label(crowd_label(3)) == 3 and crowd_label(0) == -2
    with pytest.raises(DataError, match="crowd"):
        check_targets(rows - torch.tensor([0, 0, 0, 0, 2.0]), "boxes", 2, 1)  # −4: no class


def test_crowd_regions_survive_tiles_while_visible(tmp_path: Path) -> None:
    # A crowd region straddling the tiles is kept (clipped) in each tile it reaches, even
    # with under min_visible of it there: a detection on its visible part is still ignored.
    doc = _doc([_ann(1, 1, 1, [24.0, 24.0, 16.0, 16.0], 1), _ann(2, 1, 1, [2.0, 2.0, 8, 8], 0)])
    Image.new("RGB", (64, 64)).save(tmp_path / "1.png")
    (tmp_path / "a.json").write_text(json.dumps(doc))
    params = CocoParams(root=tmp_path, annotations=tmp_path / "a.json", size=32, tile=32)
    t = build_coco_json(params, cache_dir=tmp_path).targets
    crowd = [r[r[:, 4] == crowd_label(0), :4].tolist() for r in t]
    assert crowd == [[[24, 24, 32, 32]], [[0, 24, 8, 32]], [[24, 0, 32, 8]], [[0, 0, 8, 8]]]
    assert [int((r[:, 4] == 0).sum()) for r in t] == [1, 0, 0, 0]
