"""The ``sentinel2_npz`` loader and its label-free proxy regions (fixture and real file)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from tests.conftest import tiny_raw

from geofl.client.data import ClientData
from geofl.client.spatial import SpatialAlphaParams, client_alpha, ndvi_stats, red_nir_indices
from geofl.config.load import load_config
from geofl.data.base import DATASETS, ArrayDataset
from geofl.data.readers import sentinel2_npz
from geofl.data.readers.formats import file_format_of
from geofl.data.splitting.regions import kmeans_regions, patch_ndvi
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError, DataError
from geofl.io import read_jsonl

HERE = Path(__file__).resolve().parent


def _fixture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_geofl_fixture_sentinel2_npz", HERE / "sentinel2_npz" / "data.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIX = _fixture_module()


def _build(path: Path, cache: Path, **params: Any) -> ArrayDataset:
    return DATASETS.build("sentinel2_npz", {"path": path, **params}, cache_dir=cache)


def test_fixture_shapes_scaling_bands_and_targets(tmp_path: Path) -> None:
    path = FIX.make_fixture(tmp_path)
    raw = FIX.expected()
    ds = _build(path, tmp_path / "cache")
    assert ds.inputs.shape == (FIX.N, 4, FIX.SIDE, FIX.SIDE) and ds.inputs.dtype == torch.float32
    assert ds.bands == ("B02", "B03", "B04", "B8A")
    want = torch.from_numpy(raw["images"].astype(np.float32) / 10000.0)
    assert torch.allclose(ds.inputs, want, rtol=0, atol=1e-7)
    assert ds.target_kind == "binary" and ds.classes == sentinel2_npz.SLUMS_CLASSES
    assert ds.targets.tolist() == raw["labels"].tolist()
    assert ds.metadata["id"].tolist() == list(range(FIX.N))
    assert ds.metadata["region"].dtype == np.int64 and len(ds.metadata["region"]) == FIX.N
    assert file_format_of("sentinel2_npz") == "uint16_bands"


def test_ndvi_uses_b04_and_b8a_on_the_constructed_patch(tmp_path: Path) -> None:
    ds = _build(FIX.make_fixture(tmp_path), tmp_path / "cache")
    assert red_nir_indices(ds.bands) == (2, 3)  # B04 red, B8A narrow NIR
    x = ds.inputs[:1]  # patch 0: B04 = 0.1, B8A = 0.3 everywhere
    mu, var = ndvi_stats(x[:, 2], x[:, 3])
    assert mu == pytest.approx(0.5) and var == pytest.approx(0.0, abs=1e-12)
    assert patch_ndvi(x[:, 2].numpy(), x[:, 3].numpy()).tolist() == pytest.approx([0.5])
    data = ClientData(0, x, ds.targets[:1], np.array([1, 0]), bands=ds.bands)
    alpha, log = client_alpha(data, SpatialAlphaParams(terms=("ndvi",)))
    # t = ½·(0.5 + 1)/2 + ½·0 = 0.375, α = 0.5 + t
    assert log["ndvi"]["mean"] == pytest.approx(0.5) and alpha == pytest.approx(0.875)


def test_mmap_mode_gives_the_same_dataset(tmp_path: Path) -> None:
    path = FIX.make_fixture(tmp_path)
    mem = _build(path, tmp_path / "cache")
    ds = DATASETS.build(
        "sentinel2_npz", {"path": path}, cache_dir=tmp_path / "c", cache_mode="mmap"
    )
    assert torch.equal(ds.inputs[torch.arange(FIX.N)], mem.inputs)
    assert ds.metadata["region"].tolist() == mem.metadata["region"].tolist()


def test_regions_deterministic_label_free_and_ordered_by_ndvi(tmp_path: Path) -> None:
    raw = FIX.expected()
    a = _build(FIX.make_fixture(tmp_path / "a"), tmp_path / "cache", num_regions=2)
    flipped = {**raw, "labels": 1 - raw["labels"]}
    np.savez(tmp_path / "b.npz", **flipped)
    b = _build(tmp_path / "b.npz", tmp_path / "cache", num_regions=2)
    assert a.metadata["region"].tolist() == b.metadata["region"].tolist()
    again = kmeans_regions(raw["images"], FIX.BANDS, 2, seed=0)
    assert again.tolist() == a.metadata["region"].tolist()
    # Region 1 (higher NDVI) holds exactly the vegetated patches (odd indices beyond 0).
    vegetated = (np.arange(FIX.N) % 2 == 1).astype(np.int64)
    assert a.metadata["region"][1:].tolist() == vegetated[1:].tolist()


def test_regions_numbered_by_centroid_ndvi() -> None:
    images = FIX.expected(seed=3, n=60)["images"]
    region = kmeans_regions(images, FIX.BANDS, 3, seed=5)
    ndvi = patch_ndvi(images[:, 2], images[:, 3])
    means = [ndvi[region == r].mean() for r in range(3)]
    assert sorted(set(region.tolist())) == [0, 1, 2] and means == sorted(means)


def _save(tmp_path: Path, **arrays: Any) -> Path:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"images": None}, r"lacks \['images'\]"),
        ({"images": np.zeros((2, 4, 8, 8), np.float32)}, "images are float32 .*expected uint16"),
        ({"images": np.zeros((2, 8, 8), np.uint16)}, r"expected uint16 \[N, C, H, W\]"),
        ({"labels": np.array([0, 2])}, r"labels span 0\.\.2, expected 0\.\.1"),
        ({"labels": np.array([0.0, 1.0])}, "labels are float64"),
        ({"bands": np.array(["B02", "B03", "B04"])}, r"bands are <U3 \[3\], expected \[4\]"),
        ({"ids": np.arange(3)}, r"ids have shape \[3\], expected \[2\]"),
    ],
)
def test_one_line_errors_for_bad_files(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    arrays: dict[str, Any] = {
        "images": np.zeros((2, 4, 8, 8), np.uint16),
        "labels": np.array([0, 1]),
        "bands": np.array(FIX.BANDS),
        **change,
    }
    path = _save(tmp_path, **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(DataError, match=message) as err:
        _build(path, tmp_path / "cache")
    assert "\n" not in str(err.value)


def test_missing_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"does not exist; point data\.params\.path at it"):
        _build(tmp_path / "nope.npz", tmp_path / "cache")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"is not a readable \.npz"):
        _build(tmp_path / "junk.npz", tmp_path / "cache")


def test_params_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="path: field required"):
        DATASETS.build("sentinel2_npz", {"root": tmp_path}, cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="root: unknown field"):
        _build(tmp_path, tmp_path, root=tmp_path)
    with pytest.raises(ConfigError, match="num_regions"):
        _build(tmp_path, tmp_path, num_regions=0)


def test_spatial_weighting_run_on_region_clients(tmp_path: Path) -> None:
    path = FIX.make_fixture(tmp_path, name="p.npz")
    raw = tiny_raw(
        task={"name": "binary"},
        data={"dataset": "sentinel2_npz", "params": {"path": str(path), "num_regions": 2}},
        methods=[
            {
                "name": "spatial",
                "partition": {"name": "region"},
                "release": [{"name": "spatial_alpha"}],
                "weighting": {"name": "spatial"},
            }
        ],
    )
    raw["federation"] = {"num_clients": 2, "rounds": 1}
    raw["data"]["split"] = {"val": 0.25, "test": 0.25}
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    out = run_experiment(load_config(cfg_path), tmp_path / "run")
    sdir = next(out.glob("methods/spatial/seed-*"))
    rec = read_jsonl(sdir / "rounds.jsonl")[0]
    logs = [rec["client_log"][str(k)]["spatial_alpha"] for k in rec["participants"]]
    assert all(log["used"] == ["ndvi", "spectral"] for log in logs)
    assert all(log["missing"] == ["elevation", "season"] for log in logs)
    assert json.loads((sdir / "partition.json").read_text())["sizes"]


def _shared_npz() -> Path | None:
    candidates = []
    env = os.environ.get("GEOFL_SHARED_DATA")
    if env:
        candidates.append(Path(env) / "sentinel2_slums_ar/slums_s2_32px.npz")
    candidates.append(
        Path(__file__).resolve().parents[3] / "shared/data/sentinel2_slums_ar/slums_s2_32px.npz"
    )
    return next((c for c in candidates if c.is_file()), None)


def test_real_slums_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _shared_npz()
    if path is None:
        pytest.skip(
            "real Sentinel-2 slums file absent (../shared/data/sentinel2_slums_ar/"
            "slums_s2_32px.npz; set GEOFL_SHARED_DATA to the shared data dir)"
        )
    with caplog.at_level("WARNING", logger="geofl"):
        ds = _build(path, tmp_path / "cache")
    assert "B02 in 13" in caplog.text and "B8A in 1124" in caplog.text
    assert ds.inputs.shape == (2000, 4, 32, 32)
    assert ds.bands == ("B02", "B03", "B04", "B8A") and red_nir_indices(ds.bands) == (2, 3)
    assert ds.label_histogram().tolist() == [536, 1464]
    assert float(ds.inputs.min()) >= 0.0 and float(ds.inputs.max()) < 2.0
    region = ds.metadata["region"]
    assert sorted(set(region.tolist())) == list(range(8))
    assert region.tolist() == _build(path, tmp_path / "c2").metadata["region"].tolist()
