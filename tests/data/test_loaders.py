"""EuroSAT RGB/MS and UC Merced loaders on tiny fixtures written in the real formats."""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset
from geofl.data.readers import eurosat, ucmerced
from geofl.errors import ConfigError, DataError

HERE = Path(__file__).resolve().parent


def _fixture_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_geofl_fixture_{name}", HERE / name / "data.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RGB = _fixture_module("eurosat_rgb")
MS = _fixture_module("eurosat_ms")
UCM = _fixture_module("ucmerced")


def _build(key: str, root: Path, cache: Path, **params: Any) -> ArrayDataset:
    return DATASETS.build(key, {"root": root, **params}, cache_dir=cache)


def _boom(data: bytes, size: int) -> np.ndarray:
    raise AssertionError("decoder called although the cache should have been used")


# ---------------------------------------------------------------- EuroSAT RGB


def test_eurosat_rgb_folder(tmp_path: Path) -> None:
    root = RGB.make_fixture(tmp_path / "src")
    ds = _build("eurosat_rgb", root, tmp_path / "cache")
    assert ds.inputs.shape == (30, 3, 64, 64)
    assert ds.inputs.dtype == torch.float32
    assert ds.targets.dtype == torch.int64
    assert ds.classes == RGB.CLASSES == eurosat.EUROSAT_CLASSES
    assert ds.bands == ("R", "G", "B")
    assert ds.targets.tolist() == [c for c in range(10) for _ in range(3)]
    assert ds.metadata["gsd_m"].dtype == np.float32
    assert set(ds.metadata["gsd_m"].tolist()) == {10.0}
    want = RGB.expected()
    assert list(ds.metadata["path"]) == sorted(want)
    for i, rel in enumerate(ds.metadata["path"]):
        ref = torch.from_numpy(want[rel]).permute(2, 0, 1).float() / 255
        assert (ds.inputs[i] - ref).abs().max().item() < 12 / 255
        assert (ds.inputs[i] - ref).abs().mean().item() < 2 / 255


@pytest.mark.parametrize("sub", ["", "2750"])
def test_eurosat_rgb_layouts_and_zip(tmp_path: Path, sub: str) -> None:
    root = RGB.make_fixture(tmp_path / "src")
    ref = _build("eurosat_rgb", root, tmp_path / "c0")
    from_sub = _build("eurosat_rgb", root / sub, tmp_path / "c1")
    assert torch.equal(from_sub.inputs, ref.inputs)
    moved = tmp_path / "alt" / "EuroSAT_RGB"
    moved.parent.mkdir()
    (root / "2750").rename(moved)
    assert torch.equal(_build("eurosat_rgb", moved.parent, tmp_path / "c2").inputs, ref.inputs)
    zipped = _build("eurosat_rgb", RGB.make_zip(tmp_path / "z"), tmp_path / "c3")
    assert torch.equal(zipped.inputs, ref.inputs)
    assert list(zipped.metadata["path"]) == list(ref.metadata["path"])


def test_eurosat_rgb_resize_and_cache_reuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = RGB.make_fixture(tmp_path / "src")
    first = _build("eurosat_rgb", root, tmp_path / "cache", size=32)
    assert first.inputs.shape == (30, 3, 32, 32)
    assert len(list((tmp_path / "cache").glob("eurosat_rgb-*.npz"))) == 1
    monkeypatch.setattr(eurosat, "decode_rgb", _boom)
    again = _build("eurosat_rgb", root, tmp_path / "cache", size=32)
    assert torch.equal(again.inputs, first.inputs)
    assert list(again.metadata["path"]) == list(first.metadata["path"])
    with np.load(next((tmp_path / "cache").glob("*.npz")), allow_pickle=False) as npz:
        assert npz["images"].dtype == np.uint8
        assert npz["paths"].dtype.kind == "U"
    # A changed source (new bytes) invalidates the cache key and decodes again.
    victim = root / "2750" / "Forest" / "Forest_1.jpg"
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(DataError, match="decoder called"):
        _build("eurosat_rgb", root, tmp_path / "cache", size=32)


# ---------------------------------------------------------------- EuroSAT MS


def test_eurosat_ms_exact_values(tmp_path: Path) -> None:
    root = MS.make_fixture(tmp_path / "src")
    ds = _build("eurosat_ms", root, tmp_path / "cache")
    assert ds.inputs.shape == (30, 13, 64, 64)
    assert ds.bands == SENTINEL2_BANDS
    assert ds.targets.tolist() == [c for c in range(10) for _ in range(3)]
    want = MS.expected()
    for i, rel in enumerate(ds.metadata["path"]):
        ref = torch.from_numpy(want[rel].astype(np.float32)).permute(2, 0, 1) / 10000
        assert torch.equal(ds.inputs[i], ref), rel
    with np.load(next((tmp_path / "cache").glob("eurosat_ms-*.npz"))) as npz:
        assert npz["images"].dtype == np.uint16
        assert np.array_equal(npz["images"][0], next(iter(want.values())).transpose(2, 0, 1))


def test_eurosat_ms_planar_separate_zip_and_resize(tmp_path: Path) -> None:
    root = MS.make_fixture(tmp_path / "src")
    rel = sorted(MS.expected())[4]
    hwc = MS.expected()[rel]
    (root / rel).write_bytes(MS.encode(hwc.transpose(2, 0, 1).copy(), "separate"))
    ds = _build("eurosat_ms", root, tmp_path / "c0")
    assert torch.equal(
        ds.inputs[4], torch.from_numpy(hwc.astype(np.float32)).permute(2, 0, 1) / 1e4
    )
    zipped = _build("eurosat_ms", MS.make_zip(tmp_path / "z"), tmp_path / "c1")
    assert torch.equal(zipped.inputs, ds.inputs)
    small = _build("eurosat_ms", root, tmp_path / "c2", size=16)
    assert small.inputs.shape == (30, 13, 16, 16)
    # Antialiased downsampling keeps each band's mean.
    torch.testing.assert_close(small.inputs.mean((2, 3)), ds.inputs.mean((2, 3)), atol=5e-3, rtol=0)


def test_eurosat_ms_wrong_band_count(tmp_path: Path) -> None:
    root = MS.make_fixture(tmp_path / "src")
    bad = root / MS.PREFIX / "River" / "River_2.tif"
    bad.write_bytes(MS.encode(np.zeros((64, 64, 12), np.uint16)))
    with pytest.raises(DataError, match=r"River_2\.tif has 12 bands, expected 13") as info:
        _build("eurosat_ms", root, tmp_path / "cache")
    assert str(bad) in str(info.value)
    assert "\n" not in str(info.value)
    assert not list((tmp_path / "cache").glob("*.npz"))


# ---------------------------------------------------------------- UC Merced


def test_ucmerced_tif_exact_and_resized(tmp_path: Path) -> None:
    root = UCM.make_fixture(tmp_path / "src")
    ds = _build("ucmerced", root, tmp_path / "cache", size=32)
    assert ds.inputs.shape == (42, 3, 32, 32)
    assert ds.classes == UCM.CLASSES == ucmerced.UCMERCED_CLASSES
    assert ds.targets.tolist() == [c for c in range(21) for _ in range(2)]
    assert ds.metadata["gsd_m"].dtype == np.float32
    assert np.allclose(ds.metadata["gsd_m"], 0.3048)
    want = UCM.expected()
    for i, rel in enumerate(ds.metadata["path"]):
        img = want[rel]
        ref = torch.from_numpy(img).permute(2, 0, 1).float() / 255
        if img.shape[:2] == (32, 32):  # lossless TIFF at native size: exact
            assert torch.equal(ds.inputs[i], ref), rel
        else:  # 32 x 29 stretched to 32 x 32: same mean colour
            assert (ds.inputs[i].mean((1, 2)) - ref.mean((1, 2))).abs().max() < 3 / 255
    default = _build("ucmerced", root, tmp_path / "cache")
    assert default.inputs.shape == (42, 3, 64, 64)


def test_ucmerced_layouts_zip_and_jpeg(tmp_path: Path) -> None:
    root = UCM.make_fixture(tmp_path / "src")
    ref = _build("ucmerced", root, tmp_path / "c0", size=16)
    for sub in ("UCMerced_LandUse", "UCMerced_LandUse/Images"):
        assert torch.equal(
            _build("ucmerced", root / sub, tmp_path / "c1", size=16).inputs, ref.inputs
        )
    zipped = _build("ucmerced", UCM.make_zip(tmp_path / "z"), tmp_path / "c2", size=16)
    assert torch.equal(zipped.inputs, ref.inputs)
    jpg_root = UCM.make_fixture(tmp_path / "jpg", ext=".jpg", side=64)
    jpg = _build("ucmerced", jpg_root, tmp_path / "c3", size=16)
    assert jpg.metadata["path"][0].endswith("agricultural00.jpg")
    assert (jpg.inputs - ref.inputs).abs().mean().item() < 3 / 255


def test_ucmerced_cache_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = UCM.make_fixture(tmp_path / "src")
    first = _build("ucmerced", root, tmp_path / "cache", size=24)
    monkeypatch.setattr(ucmerced, "decode_rgb", _boom)
    again = _build("ucmerced", root, tmp_path / "cache", size=24)
    assert torch.equal(again.inputs, first.inputs)
    assert torch.equal(again.targets, first.targets)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("key", ["eurosat_rgb", "eurosat_ms", "ucmerced"])
def test_missing_root(tmp_path: Path, key: str) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="does not exist; download") as info:
        _build(key, missing, tmp_path / "cache")
    assert str(missing) in str(info.value)
    assert "data.params.root=" in str(info.value)


@pytest.mark.parametrize("key", ["eurosat_rgb", "eurosat_ms", "ucmerced"])
def test_no_images(tmp_path: Path, key: str) -> None:
    empty = tmp_path / "empty"
    (empty / "Forest").mkdir(parents=True)
    (empty / "Forest" / "notes.txt").write_text("not an image")
    with pytest.raises(DataError, match=r"images .* found under .*; expected <root>/") as info:
        _build(key, empty, tmp_path / "cache")
    assert str(empty) in str(info.value)


def test_not_a_zip_and_unknown_class(tmp_path: Path) -> None:
    fake = tmp_path / "EuroSAT.zip"
    fake.write_bytes(b"this is not a zip")
    with pytest.raises(DataError, match=r"cannot open .*EuroSAT\.zip as a zip"):
        _build("eurosat_rgb", fake, tmp_path / "cache")
    root = RGB.make_fixture(tmp_path / "src") / "2750"
    (root / "Forest").rename(root / "Forrest")
    with pytest.raises(DataError, match=r"unexpected class folder\(s\) \['Forrest'\]"):
        _build("eurosat_rgb", root, tmp_path / "cache")


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data:UserWarning")
def test_corrupt_image_named(tmp_path: Path) -> None:
    root = UCM.make_fixture(tmp_path / "src")
    bad = root / UCM.PREFIX / "harbor" / "harbor01.tif"
    bad.write_bytes(b"II*\0garbage")
    with pytest.raises(DataError, match=r"cannot decode image .*harbor01\.tif") as info:
        _build("ucmerced", root, tmp_path / "cache")
    assert str(bad) in str(info.value)
    assert "\n" not in str(info.value)
    zpath = tmp_path / "broken.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("2750/Forest/Forest_1.jpg", b"\xff\xd8 truncated jpeg")
    with pytest.raises(DataError, match=r"2750/Forest/Forest_1\.jpg in .*broken\.zip"):
        _build("eurosat_rgb", zpath, tmp_path / "cache")


def test_macosx_and_hidden_entries_ignored(tmp_path: Path) -> None:
    root = RGB.make_fixture(tmp_path / "src")
    (root / "2750" / "Forest" / "._Forest_1.jpg").write_bytes(b"resource fork")
    Image.new("RGB", (64, 64)).save(root / "2750" / ".thumbs.jpg")
    ds = _build("eurosat_rgb", root, tmp_path / "cache")
    assert len(ds) == 30


# ---------------------------------------------------------------- real data


def _shared_ucmerced() -> Path | None:
    candidates = []
    env = os.environ.get("GEOFL_SHARED_DATA")
    if env:
        candidates += [Path(env) / "ucmerced_landuse", Path(env)]
    candidates.append(Path(__file__).resolve().parents[3] / "shared/data/ucmerced_landuse")
    return next((c for c in candidates if (c / "agricultural").is_dir()), None)


def test_real_ucmerced(tmp_path: Path) -> None:
    root = _shared_ucmerced()
    if root is None:
        pytest.skip("real UC Merced copy absent (set GEOFL_SHARED_DATA to the shared data dir)")
    ds = _build("ucmerced", root, tmp_path / "cache")
    assert ds.inputs.shape == (2100, 3, 64, 64)
    assert ds.num_classes == 21
    assert ds.label_histogram().tolist() == [100] * 21
    assert ds.metadata["path"][0] == "agricultural/agricultural00.jpg"
    assert 0.2 < ds.inputs.mean().item() < 0.7


@pytest.mark.parametrize("key", ["eurosat_rgb", "eurosat_ms", "ucmerced"])
def test_params_validated(tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError, match="sizee: unknown field"):
        _build(key, tmp_path, tmp_path / "cache", sizee=32)
    with pytest.raises(ConfigError, match="size"):
        _build(key, tmp_path, tmp_path / "cache", size=0)
    with pytest.raises(ConfigError, match="root: field required"):
        DATASETS.build(key, {}, cache_dir=tmp_path)
    assert DATASETS.validate(key, {"root": tmp_path}).model_dump()["size"] == 64


def test_params_frozen(tmp_path: Path) -> None:
    params = ucmerced.UCMercedParams(root=tmp_path)
    with pytest.raises(ValidationError):
        params.size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "module", "params"), [("eurosat_ms", MS, {}), ("ucmerced", UCM, {"size": 16})]
)
def test_folder_loaders_store_round_trip(
    tmp_path: Path, key: str, module: ModuleType, params: dict[str, Any]
) -> None:
    """``data.cache: mmap``: the same samples, labels and paths as the in-memory cache."""
    root = module.make_fixture(tmp_path / "src")
    mem = _build(key, root, tmp_path / "cache", **params)
    stored = DATASETS.build(
        key, {"root": root, **params}, cache_dir=tmp_path / "cache", cache_mode="mmap"
    )
    assert not isinstance(stored.inputs, torch.Tensor)
    assert list((tmp_path / "cache").glob("*.store"))  # beside the npz, not instead
    idx = torch.tensor([len(mem) - 1, 0, 5, 5, 2])
    assert torch.equal(stored.inputs[idx], mem.inputs[idx])
    assert torch.equal(stored.inputs[0 : len(mem)], mem.inputs)
    assert torch.equal(stored.targets, mem.targets)
    assert stored.metadata["path"].tolist() == mem.metadata["path"].tolist()
