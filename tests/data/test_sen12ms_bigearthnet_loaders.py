"""SEN12MS and BigEarthNet-S2 v1.0 loaders on tiny fixtures written in the real formats."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset
from geofl.data.readers.bigearthnet import BIGEARTHNET43_CLASSES, MAP_43_TO_19, label_vector
from geofl.data.readers.patchfiles import season_of_month, utm_to_latlon
from geofl.data.readers.sen12ms import IGBP_TO_SIMPLIFIED, majority_label
from geofl.data.synthetic.bigearthnet import BIGEARTHNET19_CLASSES, BIGEARTHNET_BANDS
from geofl.data.synthetic.sen12ms import SEN12MS_CLASSES
from geofl.errors import DataError

HERE = Path(__file__).resolve().parent


def _fixture_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_geofl_fixture_{name}", HERE / name / "data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


S12 = _fixture_module("sen12ms")
BEN = _fixture_module("bigearthnet")


def _build(key: str, root: Path, cache: Path, **params: Any) -> ArrayDataset:
    return DATASETS.build(key, {"root": root, **params}, cache_dir=cache)


# ---------------------------------------------------------------- SEN12MS


@pytest.mark.parametrize("suffixed", [False, True])
def test_sen12ms_reads_images_labels_and_metadata(tmp_path: Path, suffixed: bool) -> None:
    root = S12.make_fixture(tmp_path / "src", suffixed=suffixed)
    ds = _build("sen12ms", root, tmp_path / "cache", size=S12.SIZE)
    assert ds.inputs.shape == (5, 13, S12.SIZE, S12.SIZE) and ds.bands == SENTINEL2_BANDS
    assert ds.classes == SEN12MS_CLASSES and ds.targets.tolist() == list(S12.LABELS)
    assert ds.metadata["season"].tolist() == list(S12.SEASONS)
    assert ds.metadata["region"].tolist() == list(S12.REGIONS)
    want = S12.expected(suffixed=suffixed)
    for i, rel in enumerate(ds.metadata["path"]):
        ref = torch.from_numpy(want[rel].astype(np.float32)).permute(2, 0, 1) / 10000
        assert torch.equal(ds.inputs[i], ref)  # native size: exact digital numbers / 10000
    # EPSG 32632, centre (500160, 4999840): just east of 9° E on 45.15° N
    np.testing.assert_allclose(ds.metadata["lat"], 45.152, atol=1e-3)
    np.testing.assert_allclose(ds.metadata["lon"], 9.002, atol=1e-3)


def test_sen12ms_resize_and_cap(tmp_path: Path) -> None:
    root = S12.make_fixture(tmp_path / "src")
    small = _build("sen12ms", root, tmp_path / "c", size=8)
    assert small.inputs.shape == (5, 13, 8, 8)
    capped = _build("sen12ms", root, tmp_path / "c", size=8, max_samples=3, seed=1)
    again = _build("sen12ms", root, tmp_path / "c2", size=8, max_samples=3, seed=1)
    assert len(capped) == 3 and capped.metadata["path"].tolist() == again.metadata["path"].tolist()
    assert set(capped.metadata["path"]) < set(small.metadata["path"])


def test_igbp_to_simplified_majority() -> None:
    assert len(IGBP_TO_SIMPLIFIED) == 18
    assert [IGBP_TO_SIMPLIFIED[i] for i in (1, 5, 6, 8, 10, 11, 12, 13, 14, 15, 16, 17)] == [
        1,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        6,
        8,
        9,
        10,
    ]
    igbp = np.array([[12, 12, 14], [10, 10, 10], [0, 0, 0]])  # 3 croplands (12, 14) vs 3 grass
    assert majority_label(igbp, "x") == SEN12MS_CLASSES.index("Grassland")  # tie: lower index
    assert majority_label(np.array([[0, 17, 17, 11]]), "x") == SEN12MS_CLASSES.index("Water")
    with pytest.raises(DataError, match=r"^x has IGBP value 18; .*replace"):
        majority_label(np.array([[18]]), "x")
    with pytest.raises(DataError, match="all no-data"):
        majority_label(np.zeros((2, 2), np.int64), "x")


def test_sen12ms_errors_name_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"is not a folder; download ROIs"):
        _build("sen12ms", tmp_path / "nowhere", tmp_path / "c")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no SEN12MS s2 patches under .*ROIs1158_spring\[_s2\]"):
        _build("sen12ms", tmp_path / "empty", tmp_path / "c")
    root = S12.make_fixture(tmp_path / "src")
    lc = root / "ROIs2017_winter/lc_7/ROIs2017_winter_lc_7_p2.tif"
    lc.unlink()
    with pytest.raises(DataError, match=r"missing label file .*ROIs2017_winter_lc_7_p2.tif") as e:
        _build("sen12ms", root, tmp_path / "c")
    assert "\n" not in str(e.value)
    root = S12.make_fixture(tmp_path / "src2")
    s2 = root / "ROIs1158_spring/s2_2/ROIs1158_spring_s2_2_p5.tif"
    s2.write_bytes(S12.encode(np.zeros((8, 8, 12), np.uint16)))
    with pytest.raises(DataError, match=r"ROIs1158_spring_s2_2_p5.tif has 12 bands, expected"):
        _build("sen12ms", root, tmp_path / "c")
    s2.write_bytes(S12.encode(np.zeros((8, 8, 13), np.float32)))
    with pytest.raises(DataError, match=r"p5.tif has pixel type float32; expected uint16"):
        _build("sen12ms", root, tmp_path / "c")


# ---------------------------------------------------------------- BigEarthNet


def test_bigearthnet_reads_bands_labels_and_metadata(tmp_path: Path) -> None:
    root = BEN.make_fixture(tmp_path / "src")
    ds = _build("bigearthnet", root, tmp_path / "cache")
    assert ds.inputs.shape == (3, 12, 120, 120) and ds.bands == BIGEARTHNET_BANDS
    assert ds.classes == BIGEARTHNET19_CLASSES and ds.target_kind == "multi_hot"
    names = [Path(p).name for p in ds.metadata["path"]]
    assert BEN.PATCHES[-1][0] not in names  # listed in patches_with_cloud_and_shadow.csv
    arrays = BEN.band_arrays()
    by_name = {p[0]: i for i, p in enumerate(BEN.PATCHES)}
    for i, name in enumerate(names):
        want = BEN.LABELS_19[by_name[name]]
        assert torch.nonzero(ds.targets[i]).flatten().tolist() == list(want)
        b02, b05, b01 = arrays[name]["B02"], arrays[name]["B05"], arrays[name]["B01"]
        assert torch.equal(ds.inputs[i, 1], torch.from_numpy(b02.astype(np.float32)) / 10000)
        up = np.repeat(np.repeat(b05, 2, 0), 2, 1).astype(np.float32)  # nearest, 2 x 2
        assert torch.equal(ds.inputs[i, 4], torch.from_numpy(up) / 10000)
        up = np.repeat(np.repeat(b01, 6, 0), 6, 1).astype(np.float32)  # nearest, 6 x 6
        assert torch.equal(ds.inputs[i, 0], torch.from_numpy(up) / 10000)
    meta = ds.metadata
    assert meta["country"].tolist() == ["Portugal", "Portugal", "Finland"]
    assert meta["region"].tolist() == ["29SND", "29SND", "35VMJ"]
    assert meta["season"].tolist() == [2, 3, 0]  # June, October, February
    np.testing.assert_allclose(meta["lat"], [39.748, 39.748, 62.218], atol=1e-3)
    kept = _build("bigearthnet", root, tmp_path / "c2", exclude_listed=False, size=30)
    assert kept.inputs.shape == (4, 12, 30, 30) and "Austria" in kept.metadata["country"]


def test_43_to_19_mapping_on_constructed_examples() -> None:
    assert len(BIGEARTHNET43_CLASSES) == len(MAP_43_TO_19) == 43
    dropped = {BIGEARTHNET43_CLASSES[i] for i, j in enumerate(MAP_43_TO_19) if j is None}
    assert dropped == {
        "Road and rail networks and associated land",
        "Port areas",
        "Airports",
        "Mineral extraction sites",
        "Dump sites",
        "Construction sites",
        "Green urban areas",
        "Sport and leisure facilities",
        "Bare rock",
        "Burnt areas",
    }
    assert sorted({j for j in MAP_43_TO_19 if j is not None}) == list(range(19))

    def on(names: list[str], nomenclature: Any = "bigearthnet19") -> list[int]:
        return np.nonzero(label_vector(names, nomenclature, "x"))[0].tolist()

    assert on(["Vineyards", "Olive groves", "Annual crops associated with permanent crops"]) == [3]
    assert on(["Salt marshes", "Intertidal flats", "Estuaries"]) == [16, 18]
    assert on(["Natural grassland", "Sparsely vegetated areas", "Peatbogs"]) == [11, 15]
    assert on(["Moors and heathland", "Transitional woodland/shrub"]) == [12, 13]
    assert on(["Burnt areas", "Mixed forest"], "paper001") == [10, 19]
    assert on(["Burnt areas"], "bigearthnet43") == [32]
    with pytest.raises(DataError, match=r"^x has label 'Forest', not one of BigEarthNet's 43"):
        on(["Forest"])


def test_bigearthnet_nomenclatures(tmp_path: Path) -> None:
    root = BEN.make_fixture(tmp_path / "src")
    paper = _build("bigearthnet", root, tmp_path / "c", nomenclature="paper001")
    assert paper.targets.shape == (3, 21) and paper.targets[:, 19].tolist() == [0, 1, 0]
    assert paper.targets[:, 20].sum() == 0  # no glacier class in BigEarthNet
    full = _build("bigearthnet", root, tmp_path / "c", nomenclature="bigearthnet43")
    assert full.targets.shape == (3, 43) and int(full.targets[1].sum()) == 2  # burnt, rock


def test_bigearthnet_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"is not a folder; download BigEarthNet-S2-v1.0"):
        _build("bigearthnet", tmp_path / "nowhere", tmp_path / "c")
    (tmp_path / "v2" / "sub").mkdir(parents=True)
    (tmp_path / "v2" / "sub" / "metadata.parquet").write_bytes(b"PAR1")
    with pytest.raises(DataError, match=r"v2.0 \(metadata.parquet\) is not supported"):
        _build("bigearthnet", tmp_path / "v2", tmp_path / "c")
    root = BEN.make_fixture(tmp_path / "a")
    name = BEN.PATCHES[0][0]
    (root / BEN.PREFIX / name / f"{name}_B8A.tif").unlink()
    with pytest.raises(DataError, match=rf"missing file .*{name}_B8A.tif"):
        _build("bigearthnet", root, tmp_path / "c")
    root = BEN.make_fixture(tmp_path / "b")
    band = root / BEN.PREFIX / name / f"{name}_B11.tif"
    band.write_bytes(BEN._tif(np.zeros((120, 120), np.uint16), 32629, 0, 0, 10))
    with pytest.raises(
        DataError, match=rf"{name}_B11.tif is 120 x 120, expected 60 x 60 for a 20 m"
    ):
        _build("bigearthnet", root, tmp_path / "c")
    root = BEN.make_fixture(tmp_path / "d")
    meta = root / BEN.PREFIX / name / f"{name}_labels_metadata.json"
    meta.write_text(json.dumps({"labels": []}))
    with pytest.raises(DataError, match=r"lacks \['coordinates'"):
        _build("bigearthnet", root, tmp_path / "c")


def test_utm_and_season_helpers() -> None:
    lat, lon = utm_to_latlon(
        np.array([500000.0, 500000.0, 500000.0]),
        np.array([0.0, 5000000.0, 5000000.0]),
        np.array([32633, 32632, 4326]),
    )
    np.testing.assert_allclose(lat[:2], [0.0, 45.1535], atol=1e-4)
    np.testing.assert_allclose(lon[:2], [15.0, 9.0], atol=1e-9)
    assert np.isnan(lat[2]) and np.isnan(lon[2])
    south = utm_to_latlon(np.array([500000.0]), np.array([10000000.0]), np.array([32733]))
    np.testing.assert_allclose(south[0], [0.0], atol=1e-9)
    assert season_of_month(np.arange(1, 13)).tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 0]
