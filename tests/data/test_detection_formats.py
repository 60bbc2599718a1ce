"""Detection loaders on fixtures written in each dataset's real on-disk format, bad input,
and the real NEON tree crowns (skipped when absent)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from geofl.data.readers.boxfiles import clip_box, read_nwpu_txt, read_voc_xml
from geofl.data.readers.detection import (
    CocoParams,
    DiorParams,
    NeonParams,
    NwpuParams,
    build_coco_json,
    build_dior,
    build_neon_tree_crowns,
    build_nwpu_vhr10,
)
from geofl.data.targets import crowd_label
from geofl.errors import DataError

NEON = Path("/work/shared/data/neon_tree_crowns")


def _jpg(path: Path, w: int, h: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(path)


def _voc(path: Path, filename: str, w: int, h: int, objects: list[tuple[str, list[float]]]) -> None:
    objs = "".join(
        f"<object><name>{n}</name><difficult>0</difficult><bndbox><xmin>{b[0]}</xmin>"
        f"<ymin>{b[1]}</ymin><xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox></object>"
        for n, b in objects
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"<annotation><filename>{filename}</filename><size><width>{w}</width>"
        f"<height>{h}</height><depth>3</depth></size>{objs}</annotation>"
    )


def test_nwpu_layout(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "NWPU VHR-10 dataset"
    _jpg(root / "positive image set" / "001.jpg", 200, 100)
    _jpg(root / "positive image set" / "002.jpg", 100, 100, 1)
    _jpg(root / "positive image set" / "003.jpg", 100, 100, 2)
    gt = root / "ground truth"
    gt.mkdir(parents=True)
    (gt / "001.txt").write_text("(10,20),(50,60),1\n\n(100,10),(150,90),10\n(190,5),(230,40),2\n")
    (gt / "002.txt").write_text("(5,5),(5,30),3\n(20,20),(40,40),4\n")  # first: degenerate
    (gt / "003.txt").write_text("")  # empty: image skipped
    with caplog.at_level(logging.WARNING, logger="geofl"):
        ds = build_nwpu_vhr10(NwpuParams(root=root, size=100), cache_dir=tmp_path / "c")
    assert "002.txt:1" in caplog.text and "degenerate" in caplog.text
    assert "003.txt: empty annotation file" in caplog.text
    assert ds.inputs.shape == (2, 3, 100, 100) and ds.targets.shape == (2, 3, 5)
    t = ds.targets.numpy()
    # 200×100 → 100×100: x halves; the box reaching x = 230 is clipped to 200 first.
    np.testing.assert_allclose(t[0, :, :4], [[5, 20, 25, 60], [50, 10, 75, 90], [95, 5, 100, 40]])
    assert t[0, :, 4].tolist() == [0, 9, 1] and t[1, 0].tolist() == [20, 20, 40, 40, 3]
    assert t[1, 1, 4] == -1 and ds.classes[9] == "vehicle"


def test_nwpu_bad_lines_name_file_and_line(tmp_path: Path) -> None:
    img = tmp_path / "a.jpg"
    _jpg(img, 50, 50)
    bad = tmp_path / "a.txt"
    bad.write_text("(1,1),(9,9),1\n(1,1),(9,9),11\n")
    with pytest.raises(DataError, match=r"a\.txt:2: class 11 is not an NWPU VHR-10 class"):
        read_nwpu_txt(bad, img, (50, 50))
    bad.write_text("1 1 9 9 airplane\n")
    with pytest.raises(DataError, match=r"a\.txt:1: .* is not '\(x1,y1\),\(x2,y2\),class'"):
        read_nwpu_txt(bad, img, (50, 50))


def test_dior_layout_with_tiles(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "DIOR"
    _jpg(root / "JPEGImages-trainval" / "00001.jpg", 128, 128)
    _jpg(root / "JPEGImages-test" / "11726.jpg", 64, 64, 3)
    ann = root / "Annotations" / "Horizontal Bounding Boxes"
    _voc(
        ann / "00001.xml",
        "00001.jpg",
        128,
        128,
        [
            ("ship", [10, 10, 30, 20]),  # tile (0, 0)
            ("windmill", [60, 60, 70, 70]),  # straddles all four tiles: < 50 % in each
            ("harbor", [70, 5, 120, 40]),  # tile (64, 0)
            ("vehicle", [100, 100, 140, 150]),  # outside on two sides: clipped to 128
        ],
    )
    _voc(ann / "11726.xml", "11726.jpg", 64, 64, [("Expressway-toll-station", [1, 2, 30, 40])])
    ds = build_dior(DiorParams(root=root, size=32, tile=64, split="trainval"), cache_dir=tmp_path)
    assert ds.inputs.shape == (4, 3, 32, 32) and ds.classes[13] == "ship"
    rows = [r[r[:, 4] >= 0].tolist() for r in ds.targets.numpy()]
    assert rows[0] == [[5, 5, 15, 10, 13]]
    assert rows[1] == [[3, 2.5, 28, 20, 11]]
    assert rows[2] == [] and rows[3] == [[18, 18, 32, 32, 18]]
    both = build_dior(DiorParams(root=root, size=32), cache_dir=tmp_path)
    assert len(both) == 2 and both.targets[1, 0, 4] == 8  # test split, toll station


def test_voc_unknown_class_and_bad_xml(tmp_path: Path) -> None:
    xml = tmp_path / "x.xml"
    _voc(xml, "x.jpg", 10, 10, [("ship", [1, 1, 5, 5]), ("spaceship", [1, 1, 5, 5])])
    with pytest.raises(DataError, match=r"x\.xml: object 2: class 'spaceship' is not one of"):
        read_voc_xml(xml, {"ship": 0}, lambda n: tmp_path / n)
    xml.write_text("<annotation><object>")
    with pytest.raises(DataError, match=r"x\.xml: not valid XML"):
        read_voc_xml(xml, {"ship": 0}, lambda n: tmp_path / n)


def test_coco_json_with_category_subset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _jpg(tmp_path / "img" / "a.png", 80, 40)
    _jpg(tmp_path / "img" / "b.png", 40, 40, 1)
    doc = {
        "images": [
            {"id": 7, "file_name": "a.png", "width": 80, "height": 40},
            {"id": 9, "file_name": "b.png", "width": 40, "height": 40},
        ],
        "categories": [
            {"id": 1, "name": "person"},
            {"id": 3, "name": "car"},
            {"id": 5, "name": "dog"},
        ],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 3, "bbox": [8, 4, 16, 20], "iscrowd": 0},
            {"id": 2, "image_id": 7, "category_id": 5, "bbox": [0, 0, 10, 10], "iscrowd": 0},
            {"id": 3, "image_id": 7, "category_id": 1, "bbox": [40, 0, 10, 10], "iscrowd": 1},
            {"id": 4, "image_id": 9, "category_id": 1, "bbox": [90, 90, 5, 5], "iscrowd": 0},
        ],
    }
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps(doc))
    params = CocoParams(
        root=tmp_path / "img", annotations=ann, size=40, categories=("car", "person")
    )
    with caplog.at_level(logging.WARNING, logger="geofl"):
        ds = build_coco_json(params, cache_dir=tmp_path / "c")
    assert "annotation 4" in caplog.text and "outside the image" in caplog.text
    assert ds.classes == ("car", "person") and len(ds) == 2
    t = ds.targets.numpy()
    assert t[0, 0].tolist() == [4, 4, 12, 24, 0]  # the dog is out
    assert t[0, 1].tolist() == [20, 0, 25, 10, crowd_label(1)]  # the crowd of persons stays
    assert (t[1, :, 4] == -1).all()
    doc["annotations"].append({"id": 5, "image_id": 8, "category_id": 1, "bbox": [1, 1, 2, 2]})
    ann.write_text(json.dumps(doc))
    with pytest.raises(DataError, match="annotation 5: image_id 8 is not the id of an image"):
        build_coco_json(params, cache_dir=tmp_path / "c2")
    with pytest.raises(DataError, match=r"categories \['cat'\] are not in the file"):
        build_coco_json(params.model_copy(update={"categories": ("cat",)}), cache_dir=tmp_path)


def test_neon_layout_fixture(tmp_path: Path) -> None:
    _jpg(tmp_path / "SITE_001.png", 100, 100)
    _voc(
        tmp_path / "SITE_001.xml",
        "SITE_001.tif",
        100,
        100,
        [
            ("Tree", [10, 10, 30, 30]),
            ("Dead", [60, 60, 90, 80]),
            ("Alive", [45, 45, 55, 55]),
        ],
    )
    ds = build_neon_tree_crowns(NeonParams(root=tmp_path, tile=50, size=50), cache_dir=tmp_path)
    assert ds.classes == ("tree",) and len(ds) == 4
    assert [int((r[:, 4] >= 0).sum()) for r in ds.targets] == [1, 0, 0, 1]  # centre box split


def test_neon_csv_annotations_and_bad_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _jpg(tmp_path / "A.png", 60, 40)
    _jpg(tmp_path / "B.png", 40, 40, 1)
    rows = [
        "image_path,xmin,ymin,xmax,ymax,label",
        "A.png,10,10,30,20,Tree",
        "A.png,50,30,70,50,Dead",  # reaches outside: clipped to 60 × 40
        "B.png,5,5,5,9,Alive",  # degenerate: skipped with file and line
    ]
    (tmp_path / "boxes.csv").write_text("\n".join(rows) + "\n")
    params = NeonParams(root=tmp_path, tile=None, size=40, annotations="csv")
    with caplog.at_level(logging.WARNING, logger="geofl"):
        ds = build_neon_tree_crowns(params, cache_dir=tmp_path / "c")
    assert "boxes.csv:4" in caplog.text and "degenerate" in caplog.text
    t = ds.targets.numpy()  # A: 60 × 40 → 40 × 40 scales x by 2/3
    np.testing.assert_allclose(t[0, :, :4], [[10 * 2 / 3, 10, 20, 20], [50 * 2 / 3, 30, 40, 40]])
    assert (t[1, :, 4] == -1).all()
    (tmp_path / "boxes.csv").write_text("\n".join([*rows[:2], "A.png,1,1,5,5,Palm"]) + "\n")
    with pytest.raises(DataError, match=r"boxes\.csv:3: label 'Palm' is not one of"):
        build_neon_tree_crowns(params, cache_dir=tmp_path / "c2")


@pytest.mark.skipif(not NEON.is_dir(), reason="NEON tree crowns absent (/work/shared/data)")
def test_real_neon_tree_crowns(tmp_path: Path) -> None:
    ds = build_neon_tree_crowns(NeonParams(root=NEON), cache_dir=tmp_path)
    # 4 images: 2 of 400², 1249×1035 and 2299×2472, in 200 px tiles: 4 + 4 + 30 + 132.
    assert ds.inputs.shape == (170, 3, 128, 128)
    counts = (ds.targets[..., 4] >= 0).sum()
    assert 700 < int(counts) <= 951  # 951 crowns in the XML files, some split by tiles


@pytest.mark.skipif(not NEON.is_dir(), reason="NEON tree crowns absent (/work/shared/data)")
def test_real_neon_csv_annotations(tmp_path: Path) -> None:
    ds = build_neon_tree_crowns(NeonParams(root=NEON, annotations="csv"), cache_dir=tmp_path)
    # The CSVs cover OSBS_029 and SOAP_061 (400², 4 tiles each) and one YELL crop (30 tiles).
    assert len(ds) == 38 and set(np.unique(ds.metadata["source"])) == {0, 1, 2}


def test_clip_box_judges_the_float32_values_a_record_stores(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert clip_box((0.0, 0.0, 1e-300, 5.0), None) == (None, "degenerate")  # 0 in float32
    assert clip_box((0.0, 0.0, 1e300, 5.0), None) == (None, "not finite")
    assert clip_box((0.0, 0.0, 1e300, 5.0), (10, 10)) == ((0.0, 0.0, 10.0, 5.0), "")
    assert clip_box((20.0, 0.0, 30.0, 5.0), (10, 10)) == (None, "outside the image")
    xml = tmp_path / "x.xml"  # "nan" parses as a float: skipped with file and object, not kept
    _voc(xml, "x.jpg", 10, 10, [("ship", [1, 1, 5, 5]), ("ship", [float("nan"), 1, 5, 5])])
    with caplog.at_level(logging.WARNING, logger="geofl"):
        rec = read_voc_xml(xml, {"ship": 0}, lambda n: tmp_path / n)
    assert rec is not None and rec.boxes.tolist() == [[1, 1, 5, 5]]
    assert "x.xml: object 2: box [nan, 1.0, 5.0, 5.0] is not finite; skipped" in caplog.text
