"""Fuzzing the COCO reader: hostile annotation JSON is read or refused with one line.

hypothesis mutates a small valid COCO detection file: any value at any depth replaced by
an arbitrary JSON value (NaN, ±inf, integers past float range, strings, nested lists and
objects, null), keys deleted, elements of the three lists swapped for other JSON values,
or a whole list replaced. The contract (geofl issue 31, item 13): either
:func:`~geofl.data.readers.boxfiles.read_coco_json` returns records whose boxes are finite,
non-degenerate and inside their image, or it raises a :class:`~geofl.errors.DataError`
whose text is one line starting with the file's path. Any other exception is a crash.

Derandomized, no database: the same examples every run; about 5 s.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from geofl.data.readers.boxfiles import BoxRecord, read_coco_json
from geofl.errors import DataError

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BASE: dict[str, Any] = {
    "images": [
        {"id": 1, "file_name": "a.png", "width": 40, "height": 30},
        {"id": 2, "file_name": "b.png"},
    ],
    "categories": [{"id": 1, "name": "car"}, {"id": 4, "name": "ship"}],
    "annotations": [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 10, 5], "iscrowd": 0},
        {"id": 2, "image_id": 2, "category_id": 4, "bbox": [0.5, 0, 8, 8], "iscrowd": 1},
        {"id": 3, "image_id": 1, "category_id": 4, "bbox": [30, 20, 20, 20]},
    ],
}

LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**3), 10**3),
    st.sampled_from([0, -1, 2, 10**400, -(10**400), 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["", "abc", "1", "NaN", "a.png", "\n", "[red]x[/]"]),
)
JSON = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value below ``node`` (dict keys and list indices)."""
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*here, i))
    return out


@st.composite
def hostile(draw: st.DrawFn) -> Any:
    """``BASE`` with 1–4 mutations (replace, delete, or append hostile values)."""
    doc: Any = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        value = draw(JSON)
        action = draw(st.sampled_from(["replace", "delete", "append"]))
        if not path:
            doc = value if action == "replace" else doc
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if action == "delete":
            del parent[path[-1]]
        elif action == "append" and isinstance(parent[path[-1]], list):
            parent[path[-1]].append(value)
        else:
            parent[path[-1]] = value
    return doc


def _check(doc: Any, categories: tuple[str, ...] | None) -> list[BoxRecord] | None:
    """The records of ``doc``, checked, or None when it was refused in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "instances.json"
        path.write_text(json.dumps(doc))
        try:
            records, names = read_coco_json(path, Path(tmp), categories)
        except DataError as err:
            text = str(err)
            assert text.startswith(f"{path}: ") and "\n" not in text and len(text) < 500, text
            return None
    assert len(set(names)) == len(names)
    for r in records:
        b = r.boxes
        assert b.dtype == np.float32 and b.shape == (len(r.labels), 4) == (len(r.iscrowd), 4)
        assert np.isfinite(b).all() and (b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all()
        assert ((r.labels >= 0) & (r.labels < len(names))).all()
    return records


@FUZZ
@given(doc=hostile(), subset=st.booleans())
def test_hostile_coco_json_is_read_or_refused_in_one_line(doc: Any, subset: bool) -> None:
    note(json.dumps(doc)[:2000])
    _check(doc, ("ship",) if subset else None)


COORD = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.integers(-100, 100),
    st.sampled_from([0, 0.0, -0.0, 1e-300, 1e300, 40, 30]),
)


@FUZZ
@given(
    boxes=st.lists(st.tuples(st.lists(COORD, min_size=4, max_size=4), st.booleans()), max_size=8),
    sized=st.booleans(),
)
def test_numeric_boxes_are_clipped_or_skipped(
    boxes: list[tuple[list[float], bool]], sized: bool
) -> None:
    """Finite boxes anywhere (far outside, inverted, tiny, near float range): every one is
    kept inside its image or skipped (logged), crowd flags follow their boxes."""
    doc: dict[str, Any] = json.loads(json.dumps(BASE))
    if not sized:
        doc["images"][0].pop("width")
        doc["images"][0].pop("height")
    doc["annotations"] = [
        {"id": k, "image_id": 1, "category_id": 1, "bbox": b, "iscrowd": int(c)}
        for k, (b, c) in enumerate(boxes)
    ]
    note(json.dumps(doc["annotations"]))
    records = _check(doc, None)
    if records is None:  # a corner beyond float32 range: refused, as NaN is
        assert any(abs(v) > 3e38 for b, _ in boxes for v in (*b, b[0] + b[2], b[1] + b[3]))
        return
    r = records[0]
    assert len(r.labels) <= len(boxes) and r.iscrowd.sum() <= sum(c for _, c in boxes)
    if sized:
        assert (r.boxes >= 0).all() and (r.boxes[:, [0, 2]] <= 40).all()
        assert (r.boxes[:, [1, 3]] <= 30).all()
