"""Synthetic tabular farming data: determinism, shapes, label rates, closed-form learnability."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from geofl.data.base import DATASETS
from geofl.data.splitting.partition import PARTITIONERS, make_partition
from geofl.data.synthetic.tabular import (
    STRESS_FEATURES,
    YIELD_FEATURES,
    StressParams,
    YieldParams,
    generate_stress,
    generate_yield,
)


def _ols_r2(x: np.ndarray, y: np.ndarray) -> float:
    """R² of least squares with an intercept (closed form via lstsq)."""
    a = np.c_[np.ones(len(x)), x.astype(np.float64)]
    coef = np.linalg.lstsq(a, y.astype(np.float64), rcond=None)[0]
    res = y - a @ coef
    return float(1 - res @ res / np.sum((y - y.mean()) ** 2))


def _auc(score: np.ndarray, y: np.ndarray) -> float:
    """ROC-AUC by the Mann-Whitney rank sum (scores are continuous: no ties)."""
    rank = np.empty(len(score))
    rank[np.argsort(score)] = np.arange(1, len(score) + 1)
    pos, neg = int(y.sum()), int((1 - y).sum())
    return float((rank[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


@pytest.fixture(scope="module")
def crop_yield() -> dict[str, np.ndarray]:
    return generate_yield(YieldParams())


@pytest.fixture(scope="module")
def stress() -> dict[str, np.ndarray]:
    return generate_stress(StressParams())


@pytest.mark.parametrize(
    ("fn", "params"), [(generate_yield, YieldParams), (generate_stress, StressParams)]
)
def test_seeded_and_deterministic(fn, params) -> None:  # type: ignore[no-untyped-def]
    a, b, c = fn(params(num_samples=300)), fn(params(num_samples=300)), fn(params(seed=1))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert not np.array_equal(a["features"], c["features"][:300])


def test_yield_dataset_shapes_dtypes_and_names(tmp_path: Path) -> None:
    ds = DATASETS.build("synthetic_yield", {"num_samples": 500}, cache_dir=tmp_path)
    assert ds.inputs.shape == (500, 14) and ds.inputs.dtype == torch.float32
    assert ds.targets.shape == (500,) and ds.targets.dtype == torch.float32
    assert ds.target_kind == "real" and ds.classes == ("yield_t_ha",) and ds.is_tabular
    assert ds.bands == (*YIELD_FEATURES, "region_0", "region_1", "region_2", "region_3")
    assert set(ds.metadata) == {"region", "farm"}
    bare = DATASETS.build("synthetic_yield", {"region_one_hot": False}, cache_dir=tmp_path)
    assert bare.inputs.shape[1] == len(YIELD_FEATURES) == 10


def test_yield_values_are_agronomic(crop_yield: dict[str, np.ndarray]) -> None:
    y, x = crop_yield["yield_t_ha"], crop_yield["features"]
    assert y.min() >= 0.2 and 3.5 < y.mean() < 5.5 and np.percentile(y, 99) < 10.0
    col = {name: x[:, i] for i, name in enumerate(YIELD_FEATURES)}
    assert col["ndvi_peak"].min() >= 0.05 and col["ndvi_peak"].max() <= 0.95
    assert (col["ndvi_mean"] < col["ndvi_peak"]).all()
    assert col["soil_moisture"].min() >= 0.03 and col["soil_moisture"].max() <= 0.45
    # farm f lies in region f mod 4 (farms dealt round-robin), one-hot columns agree
    assert np.array_equal(crop_yield["region"], crop_yield["farm"] % 4)
    assert np.array_equal(x[:, 10:].argmax(1), crop_yield["region"])


def test_yield_is_learnable_but_not_linear(crop_yield: dict[str, np.ndarray]) -> None:
    x, y = crop_yield["features"], crop_yield["yield_t_ha"]
    linear = _ols_r2(x, y)
    quadratic = _ols_r2(np.c_[x, x[:, :10] ** 2], y)
    assert 0.75 < linear < 0.87  # 0.821 at the defaults
    assert quadratic - linear > 0.04  # saturations and the temperature optimum: 0.891
    assert quadratic < 0.93  # farm effects and noise stay unexplained


def test_yield_noise_sets_the_ceiling() -> None:
    quiet, loud = (generate_yield(YieldParams(noise_std=s)) for s in (0.0, 1.5))
    r2 = [_ols_r2(d["features"], d["yield_t_ha"]) for d in (quiet, loud)]
    assert r2[0] > 0.85 > 0.6 > r2[1]


def test_stress_dataset_shapes_dtypes_and_names(tmp_path: Path) -> None:
    ds = DATASETS.build("synthetic_tabular_binary", {"num_samples": 400}, cache_dir=tmp_path)
    assert ds.inputs.shape == (400, 14) and ds.inputs.dtype == torch.float32
    assert ds.targets.dtype == torch.int64 and set(ds.targets.unique().tolist()) == {0, 1}
    assert ds.target_kind == "binary" and ds.classes == ("healthy", "stressed")
    assert ds.bands == (*STRESS_FEATURES, "crop_cereal", "crop_maize", "crop_soybean")
    assert set(ds.metadata) == {"region", "farm", "crop"}


def test_stress_is_imbalanced_and_follows_the_weather(stress: dict[str, np.ndarray]) -> None:
    y, region = stress["stress"], stress["region"]
    assert 0.06 < y.mean() < 0.12  # 0.087 at the defaults
    rate = [y[region == r].mean() for r in range(4)]
    assert np.argmax(rate) == 2 and np.argmin(rate) == 3  # hot dry basin vs cool upland
    x = stress["features"]
    drop = x[:, STRESS_FEATURES.index("ndvi_t")] - x[:, STRESS_FEATURES.index("ndvi_base_mean")]
    assert drop[y == 1].mean() < drop[y == 0].mean() - 0.1
    more = generate_stress(StressParams(stress_rate=0.2))["stress"].mean()
    assert more > y.mean() + 0.05


def _ls_auc(data: dict[str, np.ndarray]) -> float:
    """AUC of the least-squares linear score of the features (closed form)."""
    a = np.c_[np.ones(len(data["features"])), data["features"].astype(np.float64)]
    y = data["stress"]
    return _auc(a @ np.linalg.lstsq(a, y.astype(np.float64), rcond=None)[0], y)


def test_stress_is_learnable_but_not_trivial(stress: dict[str, np.ndarray]) -> None:
    cloudy = _ls_auc(stress)
    assert 0.93 < cloudy < 0.99  # 0.973: residual clouds mimic stress drops
    clear = _ls_auc(generate_stress(StressParams(cloud_rate=0.0, observation_noise=0.0)))
    assert clear > cloudy + 0.01


def test_auc_helper_by_hand() -> None:
    assert _auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75


def test_farm_groups_partition_the_tabular_data(tmp_path: Path) -> None:
    ds = DATASETS.build("synthetic_yield", {"num_samples": 800}, cache_dir=tmp_path)
    p = make_partition(
        PARTITIONERS.build("group", {"key": "farm"}),
        ds.targets.numpy(),
        ds.metadata,
        10,
        ds.num_classes,
        np.random.default_rng(0),
        kind=ds.target_kind,
    )
    for k, idx in enumerate(p.indices):  # 40 farms, farm f -> client f mod 10
        assert set(np.unique(ds.metadata["farm"][idx]) % 10) == {k}
