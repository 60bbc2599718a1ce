"""Synthetic Sentinel-2-like generator: determinism, shapes, physics, priors, cache, params."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

import geofl.data.synthetic.landcover as synthetic
from geofl.data.base import DATASETS, SENTINEL2_BANDS
from geofl.data.synthetic.landcover import (
    CHUNK,
    METADATA_KEYS,
    SYNTHETIC_CLASSES,
    SyntheticParams,
    build_synthetic,
    generate_synthetic,
)
from geofl.data.synthetic.textures import CLASS_MATERIALS, TEXTURES

SMALL = SyntheticParams(num_samples=300, size=16, seed=3)
BAND = {name: i for i, name in enumerate(SENTINEL2_BANDS)}


@pytest.fixture(scope="module")
def small() -> dict[str, np.ndarray]:
    return generate_synthetic(SMALL)


@pytest.fixture(scope="module")
def class_means() -> np.ndarray:
    """``[10, 13]`` mean reflectance per class and band (32x32 patches)."""
    out = generate_synthetic(SyntheticParams(num_samples=600, size=32, seed=11))
    refl = out["images"].astype(np.float32) / 10000
    return np.stack([refl[out["labels"] == c].mean(axis=(0, 2, 3)) for c in range(10)])


def _mean(means: np.ndarray, cls: str, *bands: str) -> float:
    return float(np.mean([means[SYNTHETIC_CLASSES.index(cls), BAND[b]] for b in bands]))


def test_classes_are_eurosat_order() -> None:
    assert SYNTHETIC_CLASSES == (
        "AnnualCrop",
        "Forest",
        "HerbaceousVegetation",
        "Highway",
        "Industrial",
        "Pasture",
        "PermanentCrop",
        "Residential",
        "River",
        "SeaLake",
    )
    assert len(TEXTURES) == len(CLASS_MATERIALS) == len(SYNTHETIC_CLASSES)


def test_same_params_give_identical_arrays(small: dict[str, np.ndarray]) -> None:
    again = generate_synthetic(SMALL)
    assert again.keys() == small.keys()
    for key, arr in small.items():
        np.testing.assert_array_equal(arr, again[key], err_msg=key)


def test_other_seed_gives_other_data(small: dict[str, np.ndarray]) -> None:
    other = generate_synthetic(SMALL.model_copy(update={"seed": 4}))
    assert not np.array_equal(other["images"], small["images"])
    assert not np.array_equal(other["labels"], small["labels"])


def test_leading_chunks_do_not_depend_on_num_samples() -> None:
    base = SyntheticParams(num_samples=CHUNK, size=16)
    longer = generate_synthetic(base.model_copy(update={"num_samples": CHUNK + 17}))
    short = generate_synthetic(base)
    np.testing.assert_array_equal(longer["images"][:CHUNK], short["images"])
    np.testing.assert_array_equal(longer["labels"][:CHUNK], short["labels"])


def test_shapes_dtypes_and_metadata(small: dict[str, np.ndarray]) -> None:
    n = SMALL.num_samples
    assert small["images"].shape == (n, 13, 16, 16)
    assert small["images"].dtype == np.uint16
    assert small["labels"].shape == (n,) and small["labels"].dtype == np.int64
    assert set(small) == {"images", "labels", *METADATA_KEYS}
    for key in ("region", "season"):
        assert small[key].dtype == np.int64 and small[key].shape == (n,)
    for key in ("elevation_mean", "elevation_std", "gsd_m", "lat", "lon"):
        assert small[key].dtype == np.float32 and small[key].shape == (n,)
    assert set(np.unique(small["region"])) <= set(range(SMALL.num_regions))
    assert set(np.unique(small["season"])) <= {0, 1, 2, 3}
    assert set(np.unique(small["gsd_m"])) <= {10.0, 20.0}
    assert (small["elevation_mean"] >= 0).all() and (small["elevation_std"] > 0).all()
    assert (np.abs(small["lat"]) <= 90).all() and (np.abs(small["lon"]) <= 180).all()


@pytest.mark.parametrize("size", [16, 17, 33])
def test_any_size_from_16_works(size: int) -> None:
    out = generate_synthetic(SyntheticParams(num_samples=24, size=size, num_regions=1))
    assert out["images"].shape == (24, 13, size, size)
    assert out["images"].max() <= 10000


def test_every_class_present_at_100_samples() -> None:
    for seed in range(3):
        labels = generate_synthetic(SyntheticParams(num_samples=100, size=16, seed=seed))["labels"]
        assert set(labels.tolist()) == set(range(10))


def test_reflectance_is_physically_plausible(class_means: np.ndarray) -> None:
    m = class_means
    assert m.max() < 0.6 and m.min() > 0.0
    # Vegetation: low red, strong red edge and NIR.
    for cls in ("Forest", "Pasture", "AnnualCrop", "HerbaceousVegetation"):
        assert _mean(m, cls, "B08") > _mean(m, cls, "B04") + 0.1, cls
    assert _mean(m, "Forest", "B07", "B08", "B8A") > 2 * _mean(m, "Forest", "B05")
    # Water absorbs NIR and SWIR.
    assert _mean(m, "SeaLake", "B08") < 0.1
    assert _mean(m, "SeaLake", "B08") < _mean(m, "Forest", "B08") / 3
    assert _mean(m, "SeaLake", "B11", "B12") < 0.05
    assert _mean(m, "River", "B11") < _mean(m, "Pasture", "B11")
    # Built-up: Industrial bright and flat, brighter than Forest and Residential.
    visible = ("B02", "B03", "B04")
    assert _mean(m, "Industrial", *visible) > _mean(m, "Forest", *visible) + 0.05
    assert _mean(m, "Industrial", *visible) > _mean(m, "Residential", *visible)
    ind = m[SYNTHETIC_CLASSES.index("Industrial")]
    assert ind[BAND["B08"]] / ind[BAND["B04"]] < 1.6  # no red edge to speak of
    # Cirrus band near zero; coastal aerosol brighter than blue for dark water (haze).
    assert m[:, BAND["B10"]].max() < 0.01
    assert _mean(m, "SeaLake", "B01") > _mean(m, "SeaLake", "B02")


def test_coarse_bands_are_blocky(small: dict[str, np.ndarray]) -> None:
    img = small["images"][:, :, :12, :12].astype(np.int32)
    b05 = img[:, BAND["B05"]].reshape(-1, 6, 2, 6, 2)  # 20 m: constant over 2x2 blocks
    assert (b05 == b05[:, :, :1, :, :1]).all()
    b01 = img[:, BAND["B01"]].reshape(-1, 2, 6, 2, 6)  # 60 m: constant over 6x6 blocks
    assert (b01 == b01[:, :, :1, :, :1]).all()
    b02 = img[:, BAND["B02"]].reshape(-1, 6, 2, 6, 2)
    assert not (b02 == b02[:, :, :1, :, :1]).all()


def test_region_priors_differ() -> None:
    params = SyntheticParams(num_samples=2000, size=16, num_regions=4, seed=5)
    out = generate_synthetic(params)
    hist = np.stack(
        [np.bincount(out["labels"][out["region"] == r], minlength=10) for r in range(4)]
    ).astype(float)
    dist = hist / hist.sum(1, keepdims=True)
    pairwise_tv = [0.5 * np.abs(dist[a] - dist[b]).sum() for a in range(4) for b in range(a)]
    assert min(pairwise_tv) > 0.15
    coastal, urban = dist[1], dist[2]
    water = [SYNTHETIC_CLASSES.index(c) for c in ("River", "SeaLake")]
    built = [SYNTHETIC_CLASSES.index(c) for c in ("Industrial", "Residential")]
    assert coastal[water].sum() > urban[water].sum()
    assert urban[built].sum() > coastal[built].sum()
    # Region-level metadata differs too (upland region is high and on a 20 m grid).
    elevation = [out["elevation_mean"][out["region"] == r].mean() for r in range(4)]
    assert elevation[3] > 4 * elevation[1]
    assert set(np.unique(out["gsd_m"][out["region"] == 0])) == {10.0}
    assert set(np.unique(out["gsd_m"][out["region"] == 3])) == {20.0}


def test_build_caches_and_reads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_synthetic(SMALL, cache_dir=tmp_path)
    assert list(tmp_path.glob("synthetic-v1-*.npz"))
    assert first.name == "synthetic" and first.classes == SYNTHETIC_CLASSES
    assert first.bands == SENTINEL2_BANDS
    assert first.inputs.dtype == torch.float32 and first.inputs.shape == (300, 13, 16, 16)
    assert float(first.inputs.min()) >= 0.0 and float(first.inputs.max()) <= 1.0
    assert set(first.metadata) == set(METADATA_KEYS)

    def boom(params: SyntheticParams) -> dict[str, np.ndarray]:
        raise AssertionError("cache miss: generator called again")

    monkeypatch.setattr(synthetic, "generate_synthetic", boom)
    second = build_synthetic(SMALL, cache_dir=tmp_path)
    assert torch.equal(first.inputs, second.inputs)
    assert torch.equal(first.targets, second.targets)
    for key in METADATA_KEYS:
        np.testing.assert_array_equal(first.metadata[key], second.metadata[key])


def test_registered_builder_and_rgb_view(tmp_path: Path) -> None:
    ds = DATASETS.build("synthetic", {"num_samples": 40, "size": 16}, cache_dir=tmp_path)
    assert len(ds) == 40 and ds.num_classes == 10
    rgb = ds.select_bands("rgb")
    assert rgb.bands == ("B04", "B03", "B02") and rgb.inputs.shape == (40, 3, 16, 16)
    assert torch.equal(rgb.inputs[:, 0], ds.inputs[:, BAND["B04"]])


@pytest.mark.parametrize(
    "bad",
    [
        {"num_samples": 0},
        {"size": 15},
        {"num_regions": 0},
        {"noise_std": -0.1},
        {"spectral_jitter": -1.0},
        {"illumination_jitter": -1.0},
        {"haze": -1.0},
        {"brightness_texture": -1.0},
        {"colour": "red"},
    ],
)
def test_bad_params_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SyntheticParams.model_validate(bad)


def test_params_are_frozen() -> None:
    with pytest.raises(ValidationError):
        SMALL.seed = 1  # type: ignore[misc]


def test_noise_knob_changes_texture_noise() -> None:
    quiet = generate_synthetic(SyntheticParams(num_samples=40, size=16, noise_std=0.0))
    loud = generate_synthetic(SyntheticParams(num_samples=40, size=16, noise_std=0.05))
    b02 = BAND["B02"]

    def roughness(out: dict[str, np.ndarray]) -> float:
        img = out["images"][:, b02].astype(np.float32)
        return float(np.abs(np.diff(img, axis=-1)).mean())

    assert roughness(loud) > 2 * roughness(quiet)
