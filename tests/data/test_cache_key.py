"""The decode-once cache key covers everything decoding reads (geofl issue 31, item 12).

Each scenario edits a tiny dataset written in its real on-disk format so that the old
fingerprint (file count, total bytes, newest mtime; the sum of the box coordinates) stays
the same, then loads it again from the same cache directory: the second load must see the
edit. An unchanged dataset must still be served from the cache without decoding.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from geofl.data.base import DATASETS, ArrayDataset, CacheMode
from geofl.data.readers import bigearthnet, eurosat, sen12ms
from geofl.data.readers import detection as detection_formats
from geofl.data.readers.detection import CocoParams, build_coco_json
from geofl.data.storage.cache import array_digest, file_manifest, manifest_digest

HERE = Path(__file__).resolve().parent


def _fixture_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_geofl_fixture_{name}", HERE / name / "data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RGB = _fixture_module("eurosat_rgb")
S12 = _fixture_module("sen12ms")
BEN = _fixture_module("bigearthnet")
assert bigearthnet.build_bigearthnet and sen12ms.build_sen12ms  # registers both loaders


def _eurosat(root: Path, cache: Path, cache_mode: CacheMode = "memory") -> ArrayDataset:
    params = {"root": root, "size": 32}
    return DATASETS.build("eurosat_rgb", params, cache_dir=cache, cache_mode=cache_mode)


def _label_of(ds: ArrayDataset, rel_suffix: str) -> str:
    (i,) = [k for k, p in enumerate(ds.metadata["path"]) if str(p).endswith(rel_suffix)]
    return ds.classes[int(ds.targets[i])]


def _move_keeping_mtime(src: Path, dst: Path) -> None:
    st = src.stat()
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src, dst)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count EuroSAT RGB decodes (the loader looks ``decode_rgb`` up in its module)."""
    calls: list[int] = []
    real = eurosat.decode_rgb

    def counted(data: bytes, size: int) -> np.ndarray:
        calls.append(size)
        return real(data, size)

    monkeypatch.setattr(eurosat, "decode_rgb", counted)
    return calls


# ------------------------------------------------------------------ class folders


@pytest.mark.parametrize("cache_mode", ["memory", "mmap"])
def test_image_moved_to_another_class_folder_is_relabelled(
    tmp_path: Path, cache_mode: CacheMode
) -> None:
    """Scenario (a): same files, bytes and newest mtime; one image changes class folder."""
    root = RGB.make_fixture(tmp_path / "src")
    cache = tmp_path / "cache"
    first = _eurosat(root, cache, cache_mode=cache_mode)
    assert _label_of(first, "Forest/Forest_1.jpg") == "Forest"
    base = root / "2750"
    _move_keeping_mtime(base / "Forest" / "Forest_1.jpg", base / "River" / "Forest_1.jpg")
    again = _eurosat(root, cache, cache_mode=cache_mode)
    assert _label_of(again, "River/Forest_1.jpg") == "River"
    assert not any(str(p).endswith("Forest/Forest_1.jpg") for p in again.metadata["path"])
    assert int((again.targets == first.classes.index("River")).sum()) == 4


def test_zip_member_moved_to_another_class_is_relabelled(tmp_path: Path) -> None:
    """Scenario (a) in the distributed zip: same size and mtime of the archive."""
    zpath = RGB.make_zip(tmp_path / "z")
    cache = tmp_path / "cache"
    assert _label_of(_eurosat(zpath, cache), "Highway/Highway_1.jpg") == "Highway"
    st = zpath.stat()
    with zipfile.ZipFile(zpath) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    old, new = "2750/Highway/Highway_1.jpg", "2750/Pasture/Highway_1.jpg"  # same name length
    members = {new if k == old else k: v for k, v in members.items()}
    with zipfile.ZipFile(zpath, "w") as zf:
        for rel, data in members.items():
            zf.writestr(zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0)), data)
    os.utime(zpath, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert zpath.stat().st_size == st.st_size
    assert _label_of(_eurosat(zpath, cache), "Pasture/Highway_1.jpg") == "Pasture"


def test_unchanged_folder_is_served_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = RGB.make_fixture(tmp_path / "src")
    calls = _decodes(monkeypatch)
    first = _eurosat(root, tmp_path / "cache")
    assert len(calls) == 30
    again = _eurosat(root, tmp_path / "cache")
    assert len(calls) == 30  # no decode
    assert list(again.metadata["path"]) == list(first.metadata["path"])
    # Touching one file (new mtime, same bytes) is a change: decoded again.
    victim = root / "2750" / "River" / "River_2.jpg"
    st = victim.stat()
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    _eurosat(root, tmp_path / "cache")
    assert len(calls) == 60


# ------------------------------------------------------------------ COCO boxes


def _coco(tmp_path: Path) -> tuple[CocoParams, Path, dict[str, Any]]:
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png"):
        (tmp_path / "img").mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(
            tmp_path / "img" / name
        )
    doc = {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 40, "height": 40},
            {"id": 2, "file_name": "b.png", "width": 40, "height": 40},
        ],
        "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "ship"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [4, 8, 12, 16], "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 2, "bbox": [10, 2, 20, 6], "iscrowd": 0},
        ],
    }
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps(doc))
    return CocoParams(root=tmp_path / "img", annotations=ann, size=40), ann, doc


def _rewrite_keeping_stat(path: Path, text: str) -> None:
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


def test_coco_box_edit_with_same_coordinate_sum_is_seen(tmp_path: Path) -> None:
    """Scenario (b): x and y of a box swapped; same sum, size and mtime of the JSON."""
    params, ann, doc = _coco(tmp_path)
    cache = tmp_path / "cache"
    assert build_coco_json(params, cache_dir=cache).targets[0, 0].tolist() == [4, 8, 16, 24, 0]
    doc["annotations"][0]["bbox"] = [8, 4, 12, 16]
    _rewrite_keeping_stat(ann, json.dumps(doc))
    assert build_coco_json(params, cache_dir=cache).targets[0, 0].tolist() == [8, 4, 20, 20, 0]


def test_coco_category_edit_is_seen(tmp_path: Path) -> None:
    """Scenario (b): a box's category changes; boxes, sizes and mtimes stay the same."""
    params, ann, doc = _coco(tmp_path)
    cache = tmp_path / "cache"
    assert build_coco_json(params, cache_dir=cache).targets[0, 0, 4].item() == 0  # car
    doc["annotations"][0]["category_id"] = 2
    _rewrite_keeping_stat(ann, json.dumps(doc))
    assert build_coco_json(params, cache_dir=cache).targets[0, 0, 4].item() == 1  # ship


def test_coco_images_swapped_by_name_are_seen(tmp_path: Path) -> None:
    """Two images swap names (``mv`` keeps each one's mtime): same count, total bytes and
    newest mtime of the set, same annotations; the old key kept the old pixels."""
    params, _, _ = _coco(tmp_path)
    cache = tmp_path / "cache"
    a, b = tmp_path / "img" / "a.png", tmp_path / "img" / "b.png"
    os.utime(b, ns=(b.stat().st_atime_ns, a.stat().st_mtime_ns - 10**9))
    first = build_coco_json(params, cache_dir=cache)
    a.rename(tmp_path / "t.png")
    b.rename(a)
    (tmp_path / "t.png").rename(b)
    again = build_coco_json(params, cache_dir=cache)
    assert np.array_equal(again.inputs[0].numpy(), first.inputs[1].numpy())
    assert np.array_equal(again.inputs[1].numpy(), first.inputs[0].numpy())


def test_unchanged_coco_set_is_served_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    params, _, _ = _coco(tmp_path)
    calls: list[Path] = []
    real = detection_formats._decode

    def counted(path: Path) -> np.ndarray:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(detection_formats, "_decode", counted)
    first = build_coco_json(params, cache_dir=tmp_path / "cache")
    assert len(calls) == 2
    again = build_coco_json(params, cache_dir=tmp_path / "cache")
    assert len(calls) == 2
    assert np.array_equal(again.targets.numpy(), first.targets.numpy())


# ------------------------------------------------------------------ per-patch GeoTIFFs


def _swap_keeping_mtimes(a: Path, b: Path) -> None:
    """Swap the contents of ``a`` and ``b``; each name keeps a distinct mtime of its own."""
    sa, sb = a.stat(), b.stat()
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    os.utime(a, ns=(sa.st_atime_ns, sb.st_mtime_ns))  # as ``mv``: mtimes travel with bytes
    os.utime(b, ns=(sb.st_atime_ns, sa.st_mtime_ns))


def test_sen12ms_label_files_are_in_the_key(tmp_path: Path) -> None:
    """The labels come from the ``lc`` files; the old key stat'd only the ``s2`` files."""
    root = S12.make_fixture(tmp_path / "src")
    cache = tmp_path / "cache"
    params = {"root": root, "size": S12.SIZE}
    first = DATASETS.build("sen12ms", params, cache_dir=cache)
    assert first.targets.tolist() == list(S12.LABELS)
    lc = sorted(root.glob("ROIs1158_spring/lc_1/*.tif"))
    os.utime(lc[1], ns=(lc[1].stat().st_atime_ns, lc[0].stat().st_mtime_ns + 10**9))
    _swap_keeping_mtimes(lc[0], lc[1])
    again = DATASETS.build("sen12ms", params, cache_dir=cache)
    assert again.targets.tolist()[:2] == [S12.LABELS[1], S12.LABELS[0]]


def _ben(root: Path, cache: Path) -> ArrayDataset:
    params = {"root": root, "size": 120, "nomenclature": "bigearthnet43"}
    return DATASETS.build("bigearthnet", params, cache_dir=cache)


def test_bigearthnet_label_json_edit_is_seen(tmp_path: Path) -> None:
    """A label renamed in the JSON (same length, mtime kept): the JSON is hashed."""
    root = BEN.make_fixture(tmp_path / "src")
    cache = tmp_path / "cache"
    first = _ben(root, cache)
    name = BEN.PATCHES[1][0]
    (i,) = [k for k, p in enumerate(first.metadata["path"]) if name in str(p)]
    peat, past = first.classes.index("Peatbogs"), first.classes.index("Pastures")
    assert first.targets[i, peat] == 1 and first.targets[i, past] == 0
    path = root / BEN.PREFIX / name / f"{name}_labels_metadata.json"
    _rewrite_keeping_stat(path, path.read_text().replace("Peatbogs", "Pastures"))
    again = _ben(root, cache)
    assert again.targets[i, peat] == 0 and again.targets[i, past] == 1


def test_bigearthnet_band_files_are_in_the_key(tmp_path: Path) -> None:
    """Two same-sized band files swap contents: the old key did not look at bands."""
    root = BEN.make_fixture(tmp_path / "src")
    cache = tmp_path / "cache"
    first = _ben(root, cache)
    name = BEN.PATCHES[0][0]
    b02, b03 = (root / BEN.PREFIX / name / f"{name}_{b}.tif" for b in ("B02", "B03"))
    os.utime(b03, ns=(b03.stat().st_atime_ns, b02.stat().st_mtime_ns + 10**9))
    _swap_keeping_mtimes(b02, b03)
    again = _ben(root, cache)
    i2, i3 = first.bands.index("B02"), first.bands.index("B03")
    assert torch.equal(again.inputs[0, i2], first.inputs[0, i3])
    assert torch.equal(again.inputs[0, i3], first.inputs[0, i2])


# ------------------------------------------------------------------ the key's parts


def test_manifest_digest_sees_every_field_and_the_order(tmp_path: Path) -> None:
    rows = [("A/x.jpg", 10, 5), ("B/y.jpg", 10, 6)]
    base = manifest_digest(rows)
    assert manifest_digest(list(rows)) == base
    assert len(base) == 64  # sha256 hex
    for changed in (
        [("B/x.jpg", 10, 5), ("A/y.jpg", 10, 6)],  # moved between folders
        [("A/x.jpg", 11, 5), ("B/y.jpg", 9, 6)],  # same total size
        [("A/x.jpg", 10, 6), ("B/y.jpg", 10, 5)],  # same newest mtime
        rows[::-1],  # order is the sample order
        rows[:1],
    ):
        assert manifest_digest(changed) != base, changed
    # Field boundaries are unambiguous: no two rows hash alike by shifting a separator.
    assert manifest_digest([("a", "b c")]) != manifest_digest([("a b", "c")])


def test_file_manifest_and_array_digest(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    f = tmp_path / "d" / "f.bin"
    f.write_bytes(b"12345")
    st = f.stat()
    assert file_manifest([f], root=tmp_path) == [("d/f.bin", 5, st.st_mtime_ns)]
    assert file_manifest([tmp_path / "gone"], root=tmp_path) == [("gone", -1, -1)]
    boxes = np.array([[4, 8, 16, 24]], np.float32)
    same_sum = np.array([[8, 4, 24, 16]], np.float32)
    assert array_digest([boxes]) == array_digest([boxes.copy()])
    assert array_digest([boxes]) != array_digest([same_sum])
    assert array_digest([boxes]) != array_digest([boxes.astype(np.float64)])
    assert array_digest([boxes]) != array_digest([boxes.reshape(2, 2)])
    assert array_digest([np.zeros(2), np.zeros(1)]) != array_digest([np.zeros(1), np.zeros(2)])
