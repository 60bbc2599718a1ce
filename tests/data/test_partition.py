"""Split and partitioners: sizes, skew, guarantees, determinism, errors."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from geofl.config.schema import SplitConfig as SplitParams
from geofl.data.splitting.partition import PARTITIONERS, make_partition
from geofl.data.splitting.split import stratified_split
from geofl.errors import ConfigError, PartitionError

RNG = np.random.default_rng(0)
LABELS = RNG.integers(0, 10, 2000)
META = {"region": RNG.integers(0, 4, 2000)}


def _part(key: str, k: int = 10, seed: int = 1, **params: object):  # type: ignore[no-untyped-def]
    fn = PARTITIONERS.build(key, params)
    return make_partition(fn, LABELS, META, k, 10, np.random.default_rng(seed))


@pytest.mark.parametrize("key", ["iid", "dirichlet", "region", "pooled"])
def test_partition_covers_the_pool_exactly_once(key: str) -> None:
    params = {"alpha": 0.3} if key == "dirichlet" else {}
    p = _part(key, k=6, **params)
    allidx = np.concatenate(p.indices)
    assert np.array_equal(np.sort(allidx), np.arange(LABELS.size))
    assert p.histograms.sum() == LABELS.size
    for idx, row in zip(p.indices, p.histograms, strict=True):
        assert np.array_equal(np.bincount(LABELS[idx], minlength=10), row)


def test_iid_sizes_are_balanced() -> None:
    assert set(_part("iid").sizes.tolist()) == {200}


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    def mean_entropy(alpha: float) -> float:
        h = _part("dirichlet", alpha=alpha).histograms
        p = h / h.sum(1, keepdims=True)
        return float(np.mean(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), 1)))

    assert mean_entropy(0.1) < mean_entropy(0.5) < mean_entropy(100.0)
    assert mean_entropy(100.0) > 0.95 * np.log(10)


def test_dirichlet_guarantees_min_samples_and_is_seeded() -> None:
    p = _part("dirichlet", alpha=0.05, min_samples=40)
    assert p.sizes.min() >= 40
    q = _part("dirichlet", alpha=0.05, min_samples=40)
    assert all(np.array_equal(a, b) for a, b in zip(p.indices, q.indices, strict=True))
    r = _part("dirichlet", seed=2, alpha=0.05, min_samples=40)
    assert not np.array_equal(p.histograms, r.histograms)


def test_dirichlet_impossible_min_samples_says_what_to_do() -> None:
    with pytest.raises(PartitionError, match="lower min_samples"):
        _part("dirichlet", alpha=0.1, min_samples=300)
    with pytest.raises(PartitionError, match="lower min_samples or raise alpha"):
        _part("dirichlet", alpha=0.01, min_samples=190, max_attempts=3)


def test_dirichlet_alpha_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"alpha: Input should be greater than 0"):
        PARTITIONERS.validate("dirichlet", {"alpha": 0.0})


def test_more_clients_than_samples_is_refused() -> None:
    fn = PARTITIONERS.build("iid", {})
    with pytest.raises(PartitionError, match="num_clients=5 exceeds the 3 training samples"):
        make_partition(fn, np.array([0, 1, 2]), {}, 5, 3, np.random.default_rng(0))


def test_region_partition_follows_regions() -> None:
    p = _part("region", k=4)
    for k, idx in enumerate(p.indices):
        assert set(META["region"][idx].tolist()) == {k}
    p2 = _part("region", k=8)  # two clients per region
    assert p2.num_clients == 8 and p2.sizes.min() > 0
    with pytest.raises(PartitionError, match="needs per-sample 'region' metadata"):
        make_partition(
            PARTITIONERS.build("region", {}), LABELS, {}, 4, 10, np.random.default_rng(0)
        )


def test_stratified_split_fractions_disjoint_and_seeded() -> None:
    s = stratified_split(LABELS, SplitParams(val=0.1, test=0.2), seed=1)
    assert s.train.size + s.val.size + s.test.size == LABELS.size
    assert not set(s.train) & set(s.test) and not set(s.val) & set(s.test)
    assert abs(s.test.size - 400) <= 10 and abs(s.val.size - 200) <= 10
    for c in range(10):  # every class in every split
        assert (LABELS[s.test] == c).any() and (LABELS[s.val] == c).any()
    s2 = stratified_split(LABELS, SplitParams(val=0.1, test=0.2), seed=1)
    assert np.array_equal(s.test, s2.test)
    assert not np.array_equal(s.test, stratified_split(LABELS, SplitParams(), seed=2).test)


def test_split_params_validation() -> None:
    with pytest.raises(ValidationError, match="leaves no training data"):
        SplitParams(val=0.5, test=0.5)
    with pytest.raises(ConfigError, match="too small to split"):
        stratified_split(np.array([0]), SplitParams(), seed=0)
