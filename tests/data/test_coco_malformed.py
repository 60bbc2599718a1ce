"""Malformed COCO annotation files: one line naming the file, the annotation (or image,
or category) and what is wrong, never a traceback; from the CLI, exit code 2 (geofl
issue 31, item 13). Degenerate boxes are skipped with one warning naming how many and
which annotations."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from geofl.cli import app
from geofl.data.readers.boxfiles import read_coco_json
from geofl.errors import DataError

Doc = dict[str, Any]


def _good() -> Doc:
    return {
        "images": [
            {"id": 7, "file_name": "a.png", "width": 40, "height": 30},
            {"id": 9, "file_name": "b.png", "width": 40, "height": 40},
        ],
        "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "ship"}],
        "annotations": [
            {"id": 11, "image_id": 7, "category_id": 1, "bbox": [1, 2, 10, 5], "iscrowd": 0},
            {"id": 12, "image_id": 9, "category_id": 2, "bbox": [0, 0, 8, 8], "iscrowd": 1},
        ],
    }


def _ann(**over: Any) -> Callable[[Doc], None]:
    def edit(d: Doc) -> None:
        for k, v in over.items():
            if v is _DROP:
                del d["annotations"][0][k]
            else:
                d["annotations"][0][k] = v

    return edit


def _img(**over: Any) -> Callable[[Doc], None]:
    def edit(d: Doc) -> None:
        for k, v in over.items():
            if v is _DROP:
                del d["images"][0][k]
            else:
                d["images"][0][k] = v

    return edit


def _set(key: str, value: Any) -> Callable[[Doc], None]:
    def edit(d: Doc) -> None:
        d[key] = value

    return edit


_DROP = object()
NAN, INF = float("nan"), float("inf")

#: (case, edit of the good file, text the one-line error must hold after the file name).
MALFORMED: list[tuple[str, Callable[[Doc], None], str]] = [
    ("bbox-3-values", _ann(bbox=[1, 2, 10]), "annotation 11: bbox [1, 2, 10] must be 4"),
    ("bbox-null", _ann(bbox=None), "annotation 11: bbox None must be 4 numbers"),
    ("bbox-missing", _ann(bbox=_DROP), "annotation 11: bbox is missing"),
    ("bbox-strings", _ann(bbox=["1", "2", "10", "5"]), "annotation 11: bbox ['1', "),
    ("bbox-string-junk", _ann(bbox=["a", 2, 10, 5]), "annotation 11: bbox ['a', "),
    ("bbox-bool", _ann(bbox=[True, 2, 10, 5]), "annotation 11: bbox [True, "),
    ("bbox-object", _ann(bbox={"x": 1}), "annotation 11: bbox {'x': 1} must be 4"),
    ("bbox-nan", _ann(bbox=[NAN, 2, 10, 5]), "annotation 11: bbox [nan, 2, 10, 5] holds NaN"),
    ("bbox-inf", _ann(bbox=[1, 2, INF, 5]), "annotation 11: bbox [1, 2, inf, 5] holds NaN"),
    ("bbox-overflow", _ann(bbox=[1, 2, 10**400, 5]), "annotation 11: bbox [1, 2, "),
    ("no-file-name", _img(file_name=_DROP), "image 7: file_name is missing"),
    ("file-name-number", _img(file_name=3), "image 7: file_name 3 must be"),
    ("width-abc", _img(width="abc"), "image 7: width 'abc' must be a positive integer"),
    ("width-zero", _img(width=0), "image 7: width 0 must be a positive integer"),
    ("width-huge", _img(width=10**400), "image 7: width "),
    ("height-missing", _img(height=_DROP), "image 7: width and height"),
    ("image-id-string", _img(id="abc"), "images[0]: id 'abc' must be an integer"),
    ("image-id-duplicate", _img(id=9), "image 9: id is used by two images"),
    ("image-is-list", _set("images", [[7, "a.png"]]), "images[0] must be an object"),
    ("annotation-is-list", _set("annotations", [[1, 2]]), "annotations[0] must be an object"),
    ("category-is-list", _set("categories", [["car"]]), "categories[0] must be an object"),
    ("images-is-object", _set("images", {"id": 7}), "'images' must be a list"),
    ("annotations-null", _set("annotations", None), "'annotations' must be a list"),
    ("no-categories", lambda d: d.pop("categories"), "'categories' must be a list"),
    ("category-no-name", lambda d: d["categories"][0].pop("name"), "category 1: name is"),
    ("category-twice", lambda d: d["categories"].append({"id": 3, "name": "car"}), "'car'"),
    ("image-id-list", _ann(image_id=[7]), "annotation 11: image_id [7] is not the id of an"),
    ("image-id-unknown", _ann(image_id=8), "annotation 11: image_id 8 is not the id of an"),
    ("category-unknown", _ann(category_id=5), "annotation 11: category_id 5 is not the id"),
    ("iscrowd-2", _ann(iscrowd=2), "annotation 11: iscrowd 2 must be 0 or 1"),
    ("no-id", _ann(id=_DROP, bbox=None), "annotations[0] (no id): bbox None"),
    ("id-is-list", _ann(id=[1], bbox=None), "annotations[0] (no id): bbox None"),
]


@pytest.mark.parametrize(
    ("edit", "needle"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_malformed_coco_is_one_line_naming_file_and_id(
    tmp_path: Path, edit: Callable[[Doc], None], needle: str
) -> None:
    doc = _good()
    edit(doc)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        read_coco_json(path, tmp_path, None)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and "\n" not in text and len(text) < 400, text
    assert needle in text, text


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{", "not valid JSON"),
        ("[1, 2]", "must hold an object with 'images'"),
        ('"x"', "must hold an object with 'images'"),
        ("\xff\xfe{", "not valid JSON"),
    ],
)
def test_not_a_coco_file(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(DataError, match=needle):
        read_coco_json(path, tmp_path, None)
    with pytest.raises(DataError, match="cannot read"):
        read_coco_json(tmp_path / "missing.json", tmp_path, None)


def test_categories_param_named_twice(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps(_good()))
    with pytest.raises(DataError, match="categories lists 'car' twice"):
        read_coco_json(path, tmp_path, ("car", "car"))


def test_degenerate_boxes_skipped_with_one_warning_naming_count_and_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = _good()
    extra = [
        {"id": 20, "image_id": 7, "category_id": 1, "bbox": [5, 5, 0, 4]},  # zero width
        {"id": 21, "image_id": 7, "category_id": 1, "bbox": [5, 5, 3, -1]},  # negative height
        {"id": 22, "image_id": 7, "category_id": 1, "bbox": [50, 5, 3, 3]},  # right of the image
        {"id": 23, "image_id": 9, "category_id": 2, "bbox": [1, 1, 0, 0], "iscrowd": 1},
    ]
    doc["annotations"] += extra
    path = tmp_path / "a.json"
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="geofl"):
        records, names = read_coco_json(path, tmp_path, None)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0] == (
        f"{path}: 4 boxes skipped: degenerate (width or height <= 0): annotations 20, 21, 23; "
        "outside the image: annotation 22"
    )
    assert names == ("car", "ship") and [len(r.boxes) for r in records] == [1, 1]
    assert records[0].boxes.tolist() == [[1, 2, 11, 7]] and records[1].iscrowd.tolist() == [True]


def test_many_skipped_ids_are_capped_in_the_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = copy.deepcopy(_good())
    doc["annotations"] += [
        {"id": 100 + k, "image_id": 7, "category_id": 1, "bbox": [1, 1, 0, 1]} for k in range(25)
    ]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="geofl"):
        read_coco_json(path, tmp_path, None)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "25 boxes skipped" in line and "100, 101," in line and "109, … (15 more)" in line


def test_cli_exits_2_with_one_line_on_a_malformed_coco_file(tmp_path: Path) -> None:
    doc = _good()
    doc["annotations"][0]["bbox"] = [1, 2, 10]
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps(doc))
    raw = {
        "name": "coco-bad",
        "seeds": [1],
        "task": {"name": "detection"},
        "data": {
            "dataset": "coco_json",
            "params": {"root": str(tmp_path), "annotations": str(ann), "size": 32},
        },
        "model": {"name": "fcos", "params": {"width": 8, "fpn_channels": 64, "head_convs": 1}},
        "federation": {"num_clients": 2, "rounds": 1},
        "methods": [{"name": "fedavg", "partition": {"name": "iid"}}],
    }
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["data", "describe", str(cfg)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    want = f"error: {ann}: annotation 11: bbox [1, 2, 10] must be 4 numbers [x, y, width, height]"
    assert lines == [want], result.output
    assert "Traceback" not in result.output
