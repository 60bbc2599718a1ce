"""SEN12MS- and BigEarthNet-like generators (001 §6.1.1): determinism, bands, label
frequencies and co-occurrence against the stated targets, metadata, spectral physics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from geofl.data.base import DATASETS, SENTINEL2_BANDS
from geofl.data.splitting.partition import GroupParams, group_partition, make_partition
from geofl.data.synthetic.bigearthnet import (
    BIGEARTHNET19_CLASSES,
    BIGEARTHNET_BANDS,
    BIGEARTHNET_COUNTRIES,
    PAPER001_CLASSES,
    BigEarthNetParams,
    country_frequencies,
    generate_bigearthnet,
    target_frequencies,
)
from geofl.data.synthetic.mosaic import balanced_priors
from geofl.data.synthetic.sen12ms import (
    SEN12MS_CLASSES,
    SEN12MS_TARGET_FREQUENCIES,
    SEN12MSParams,
    generate_sen12ms,
)

BEN = {name: i for i, name in enumerate(PAPER001_CLASSES)}
COUNTRY = {c[0]: i for i, c in enumerate(BIGEARTHNET_COUNTRIES)}


@pytest.fixture(scope="module")
def sen12ms() -> dict[str, np.ndarray]:
    """2000 patches of 16 × 16 (well under a second)."""
    return generate_sen12ms(SEN12MSParams(num_samples=2000, size=16))


@pytest.fixture(scope="module")
def ben() -> dict[str, np.ndarray]:
    """2000 paper001 patches of 16 × 16 (about a second)."""
    return generate_bigearthnet(
        BigEarthNetParams(num_samples=2000, size=16, nomenclature="paper001")
    )


def _lift(y: np.ndarray, a: str, b: str) -> float:
    """P(b | a) / P(b)."""
    return float(y[y[:, BEN[a]], BEN[b]].mean() / y[:, BEN[b]].mean())


def _band(x: np.ndarray, name: str, bands: tuple[str, ...] = SENTINEL2_BANDS) -> np.ndarray:
    return x[:, bands.index(name)]


@pytest.mark.parametrize("kind", ["sen12ms", "bigearthnet"])
def test_seeded_and_deterministic(kind: str) -> None:
    gen, params = (
        (generate_sen12ms, SEN12MSParams(num_samples=300, size=16, seed=4))
        if kind == "sen12ms"
        else (generate_bigearthnet, BigEarthNetParams(num_samples=300, size=16, seed=4))
    )
    a, b = gen(params), gen(params)  # type: ignore[operator]
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    other = gen(params.model_copy(update={"seed": 5}))  # type: ignore[operator]
    assert not np.array_equal(a["images"], other["images"])


def test_sen12ms_dataset_bands_shapes_and_cache(tmp_path: Path) -> None:
    params = {"num_samples": 40, "size": 16}
    ds = DATASETS.build("synthetic_sen12ms", params, cache_dir=tmp_path)
    assert ds.inputs.shape == (40, 13, 16, 16) and ds.targets.dtype == torch.int64
    assert ds.bands == SENTINEL2_BANDS and ds.bands[8] == "B8A" and ds.bands[10] == "B10"
    assert ds.classes == SEN12MS_CLASSES and ds.target_kind == "class"
    assert {"region", "season", "lat", "lon"} <= set(ds.metadata)
    assert float(ds.inputs.min()) >= 0.0 and float(ds.inputs.max()) <= 1.0
    again = DATASETS.build("synthetic_sen12ms", params, cache_dir=tmp_path)
    assert torch.equal(again.inputs, ds.inputs) and len(list(tmp_path.iterdir())) == 1


def test_bigearthnet_dataset_has_12_bands_without_b10(tmp_path: Path) -> None:
    ds = DATASETS.build(
        "synthetic_bigearthnet", {"num_samples": 30, "size": 16}, cache_dir=tmp_path
    )
    assert ds.inputs.shape == (30, 12, 16, 16) and ds.bands == BIGEARTHNET_BANDS
    assert ds.bands == (
        "B01",
        "B02",
        "B03",
        "B04",
        "B05",
        "B06",
        "B07",
        "B08",
        "B8A",
        "B09",
        "B11",
        "B12",
    )
    assert ds.classes == BIGEARTHNET19_CLASSES and ds.targets.shape == (30, 19)
    assert ds.target_kind == "multi_hot" and (ds.metadata["country"] == ds.metadata["region"]).all()
    paper = DATASETS.build(
        "synthetic_bigearthnet",
        {"num_samples": 30, "size": 16, "nomenclature": "paper001"},
        cache_dir=tmp_path,
    )
    assert paper.classes[-2:] == ("Burnt areas", "Glaciers and perpetual snow")


def test_sen12ms_label_frequencies_match_the_targets(sen12ms: dict[str, np.ndarray]) -> None:
    freq = np.bincount(sen12ms["labels"], minlength=10) / len(sen12ms["labels"])
    target = np.array(SEN12MS_TARGET_FREQUENCIES)
    assert np.abs(freq - target).max() < 0.04, np.round(freq - target, 3)
    assert freq[SEN12MS_CLASSES.index("Snow/Ice")] < 0.025  # rare stays rare
    assert freq[SEN12MS_CLASSES.index("Wetlands")] < 0.04


def test_balanced_priors_hit_the_target_on_average() -> None:
    base = torch.tensor([[1.0, 1.0, 1.0], [4.0, 1.0, 0.1]])
    p = balanced_priors(base, torch.tensor([0.5, 0.3, 0.2]))
    torch.testing.assert_close(p.sum(1), torch.ones(2))
    torch.testing.assert_close(p.mean(0), torch.tensor([0.5, 0.3, 0.2]))
    assert p[1, 0] > p[0, 0] and p[1, 2] < p[0, 2]  # the base's tilt survives


def test_sen12ms_regions_have_one_season_each(sen12ms: dict[str, np.ndarray]) -> None:
    region, season = sen12ms["region"], sen12ms["season"]
    for r in np.unique(region):
        assert len(np.unique(season[region == r])) == 1
    assert set(np.unique(season)) == {0, 1, 2, 3} and len(np.unique(region)) == 8


def test_sen12ms_spectra_are_physical(sen12ms: dict[str, np.ndarray]) -> None:
    x = sen12ms["images"].astype(np.float64).mean(axis=(2, 3)) / 10000
    y = sen12ms["labels"]
    green, red, nir, swir = (_band(x, b) for b in ("B03", "B04", "B08", "B11"))
    ndsi, ndvi = (green - swir) / (green + swir), (nir - red) / (nir + red)
    snow, water, forest = (y == SEN12MS_CLASSES.index(c) for c in ("Snow/Ice", "Water", "Forest"))
    assert ndsi[snow].mean() > 0.4 and ndsi[~snow].mean() < 0.0
    assert nir[water].mean() < 0.5 * nir[forest].mean()
    crops = y == SEN12MS_CLASSES.index("Croplands")
    season = sen12ms["season"]
    assert ndvi[crops & (season == 2)].mean() > ndvi[crops & (season == 0)].mean() + 0.1


def test_bigearthnet_label_frequencies_match_the_targets(ben: dict[str, np.ndarray]) -> None:
    freq = ben["labels"].mean(axis=0)
    target = target_frequencies("paper001").numpy()
    assert (np.abs(freq - target) < 0.02 + 0.1 * target).all(), np.round(freq - target, 3)
    assert 3.0 < ben["labels"].sum(axis=1).mean() < 3.6  # target sum 3.40 (+ forced patches)
    assert ben["labels"].sum(axis=1).min() >= 1
    for rare in ("Beaches, dunes, sands", "Coastal wetlands", "Burnt areas"):
        assert 0 < freq[BEN[rare]] < 0.015, rare


def test_bigearthnet_labels_co_occur_as_in_corine(ben: dict[str, np.ndarray]) -> None:
    y = ben["labels"].astype(bool)
    assert _lift(y, "Coastal wetlands", "Marine waters") > 2.5
    assert _lift(y, "Beaches, dunes, sands", "Marine waters") > 2.5
    assert _lift(y, "Coniferous forest", "Mixed forest") > 1.2
    assert _lift(y, "Arable land", "Complex cultivation patterns") > 1.2
    assert _lift(y, "Burnt areas", "Moors, heathland and sclerophyllous vegetation") > 2.0
    assert _lift(y, "Marine waters", "Coniferous forest") < 0.95


def test_bigearthnet_countries_shift_the_labels(ben: dict[str, np.ndarray]) -> None:
    y, country = ben["labels"].astype(bool), ben["country"]
    for landlocked in ("Austria", "Switzerland", "Serbia", "Kosovo", "Luxembourg"):
        assert not y[country == COUNTRY[landlocked], BEN["Marine waters"]].any(), landlocked
    snow = y[:, BEN["Glaciers and perpetual snow"]]
    assert set(np.unique(country[snow])) <= {COUNTRY["Austria"], COUNTRY["Switzerland"]}
    shares = np.bincount(country, minlength=10) / len(country)
    assert shares.argmax() == COUNTRY["Finland"] and shares.argmin() == COUNTRY["Luxembourg"]
    freq = country_frequencies("bigearthnet19")
    share = torch.tensor([c[1] for c in BIGEARTHNET_COUNTRIES])
    torch.testing.assert_close(share @ freq, target_frequencies("bigearthnet19"), atol=2e-3, rtol=0)


def test_bigearthnet_snow_and_burnt_look_right(ben: dict[str, np.ndarray]) -> None:
    x = ben["images"].astype(np.float64).mean(axis=(2, 3)) / 10000
    y = ben["labels"].astype(bool)
    green, nir, swir = (_band(x, b, BIGEARTHNET_BANDS) for b in ("B03", "B08", "B12"))
    snow, burnt = y[:, BEN["Glaciers and perpetual snow"]], y[:, BEN["Burnt areas"]]
    assert green[snow].mean() > green[~snow].mean() + 0.1
    nbr = (nir - swir) / (nir + swir)
    assert nbr[burnt].mean() < nbr[~burnt].mean() - 0.1


def test_partitions_by_country_and_region_use_the_metadata(ben: dict[str, np.ndarray]) -> None:
    meta = {"country": ben["country"], "season": ben["season"]}
    fn = group_partition(GroupParams(key="country"))
    rng = np.random.default_rng(0)
    part = make_partition(fn, ben["labels"], meta, 10, 21, rng, kind="multi_hot")
    for idx in part.indices:
        assert len(np.unique(ben["country"][idx])) == 1
    assert sorted(len(idx) for idx in part.indices) == sorted(np.bincount(ben["country"]))
