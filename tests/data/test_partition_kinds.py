"""Partitioners over multi-hot, real and binary targets, and over stated attributes."""

from __future__ import annotations

import numpy as np
import pytest

from geofl.data.splitting.partition import PARTITIONERS, Partition, make_partition
from geofl.errors import ConfigError, PartitionError

RNG = np.random.default_rng(0)
N = 1200
LABELS = RNG.integers(0, 10, N)
# Multi-hot over 5 labels: label 0 on most samples, label 4 rare.
MULTI = (RNG.random((N, 5)) < np.array([0.8, 0.5, 0.3, 0.2, 0.05])).astype(np.float32)
YIELD = RNG.gamma(4.0, 1.5, N).astype(np.float32)
META = {
    "region": RNG.integers(0, 4, N),
    "farm": np.repeat(np.arange(24), N // 24),
    "elevation_mean": RNG.uniform(0, 2000, N).astype(np.float32),
}


def _part(name: str, targets: np.ndarray, kind: str, k: int = 6, **params: object) -> Partition:
    fn = PARTITIONERS.build(name, params)
    width = 5 if kind == "multi_hot" else 10
    return make_partition(fn, targets, META, k, width, np.random.default_rng(1), kind=kind)  # type: ignore[arg-type]


def _covers_once(p: Partition) -> None:
    assert np.array_equal(np.sort(np.concatenate(p.indices)), np.arange(N))
    assert p.sizes.sum() == N


def test_default_by_label_is_the_classic_label_skew() -> None:
    fn = PARTITIONERS.build("dirichlet", {"alpha": 0.3})
    default = make_partition(fn, LABELS, META, 6, 10, np.random.default_rng(1))
    stated = _part("dirichlet", LABELS, "class", alpha=0.3, by="label")
    as_meta = make_partition(
        PARTITIONERS.build("dirichlet", {"alpha": 0.3, "by": "cls"}),
        LABELS,
        {**META, "cls": LABELS},
        6,
        10,
        np.random.default_rng(1),
    )
    for p in (stated, as_meta):
        assert all(np.array_equal(a, b) for a, b in zip(default.indices, p.indices, strict=True))


def test_multi_hot_histograms_count_positives_and_skew_follows_rarest_label() -> None:
    p = _part("dirichlet", MULTI, "multi_hot", alpha=0.1, min_samples=20)
    _covers_once(p)
    for idx, row in zip(p.indices, p.histograms, strict=True):
        assert row.tolist() == MULTI[idx].sum(axis=0).astype(int).tolist()
    assert p.histograms.sum() > N  # ~1.9 labels per sample
    # Every rarest-present-label group is split by its own Dirichlet draw, so with α = 0.1
    # the samples whose rarest label is 4 concentrate on few clients.
    present = MULTI > 0
    freq = present.sum(0)
    rarest = np.where(present.any(1), np.argmin(np.where(present, freq, 10**9), 1), 5)
    share = np.array([(rarest[idx] == 4).sum() for idx in p.indices]) / (rarest == 4).sum()
    assert share.max() > 0.5


def test_multi_hot_iid_keeps_label_frequencies() -> None:
    p = _part("iid", MULTI, "multi_hot")
    _covers_once(p)
    freq = p.histograms / p.sizes[:, None]
    np.testing.assert_allclose(
        freq, np.broadcast_to(MULTI.mean(0), freq.shape), atol=0.11
    )  # 3σ of a 200-sample frequency


def test_real_targets_skew_by_quantile_bin() -> None:
    p = _part("dirichlet", YIELD, "real", alpha=0.05, min_samples=20, bins=4)
    _covers_once(p)
    # Histograms are over the 5 default quantile bins of the pool: 240 samples each.
    assert p.histograms.shape == (6, 5) and p.histograms.sum(0).tolist() == [240] * 5
    means = np.array([YIELD[idx].mean() for idx in p.indices])
    assert means.max() - means.min() > 3.0  # clients see different yield levels
    iid = _part("iid", YIELD, "real")
    iid_means = np.array([YIELD[idx].mean() for idx in iid.indices])
    assert iid_means.max() - iid_means.min() < 1.0  # std 3.0 / √200 = 0.21 per client


def test_dirichlet_over_a_real_metadata_attribute() -> None:
    p = _part("dirichlet", YIELD, "real", alpha=0.05, min_samples=20, by="elevation_mean")
    elev = [META["elevation_mean"][idx].mean() for idx in p.indices]
    assert max(elev) - min(elev) > 500  # IID: std 577 / √200 = 41 per client


def test_binary_targets_partition_like_two_classes() -> None:
    y = (RNG.random(N) < 0.2).astype(np.int64)
    p = _part("dirichlet", y, "binary", alpha=0.1, min_samples=20)
    _covers_once(p)
    assert p.histograms.shape == (6, 10) and p.histograms[:, 2:].sum() == 0
    pos = p.histograms[:, 1] / p.sizes
    assert pos.max() - pos.min() > 0.3


def test_group_partition_keeps_each_farm_on_one_client() -> None:
    p = _part("group", YIELD, "real", k=6, key="farm")
    _covers_once(p)
    for k, idx in enumerate(p.indices):  # 24 farms dealt round-robin: farm f -> f mod 6
        assert set(META["farm"][idx].tolist()) == {k, k + 6, k + 12, k + 18}
    few = _part("group", YIELD, "real", k=8, key="region")  # 4 regions, 2 clients each
    assert few.sizes.min() > 0
    for idx in few.indices:
        assert np.unique(META["region"][idx]).size == 1


def test_region_equals_group_on_region() -> None:
    a, b = _part("region", LABELS, "class"), _part("group", LABELS, "class", key="region")
    assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))


def test_unknown_attribute_and_group_say_what_exists() -> None:
    with pytest.raises(PartitionError, match=r"partition.params.by='soil' is neither 'label'"):
        _part("dirichlet", YIELD, "real", alpha=1.0, by="soil")
    with pytest.raises(PartitionError, match=r"key='soil' needs per-sample 'soil' metadata"):
        _part("group", YIELD, "real", key="soil")
    with pytest.raises(ConfigError, match=r"bins: Input should be greater than or equal to 2"):
        PARTITIONERS.validate("dirichlet", {"alpha": 1.0, "bins": 1})
    with pytest.raises(ConfigError, match=r"key: field required"):
        PARTITIONERS.validate("group", {})


def test_float_targets_without_their_kind_are_refused() -> None:
    fn = PARTITIONERS.build("iid", {})
    with pytest.raises(PartitionError, match=r"class targets must be \[N\] integers.*kind"):
        make_partition(fn, YIELD, META, 4, 1, np.random.default_rng(0))
    with pytest.raises(PartitionError, match=r"got \(1200, 5\) float32"):
        make_partition(fn, MULTI, META, 4, 5, np.random.default_rng(0))
