"""``data.split.group``: whole groups per split, sizes, determinism, errors, and a run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.data.splitting.split import grouped_split, make_split, stratified_split
from geofl.errors import ConfigError


def _fractions(val: float = 0.1, test: float = 0.2, group: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(val=val, test=test, group=group)


def test_groups_never_cross_splits_and_sizes_follow_the_fractions() -> None:
    groups = np.repeat(np.arange(50), 8)  # 50 groups of 8 = 400 samples
    s = grouped_split(groups, _fractions(), seed=3)
    parts = [set(groups[idx].tolist()) for idx in (s.train, s.val, s.test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert sorted(np.concatenate([s.train, s.val, s.test]).tolist()) == list(range(400))
    # test reaches round(400·0.2) = 80 = 10 groups, val 40 = 5 groups (exact multiples of 8)
    assert (s.test.size, s.val.size, s.train.size) == (80, 40, 280)
    again = grouped_split(groups, _fractions(), seed=3)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(again.__dict__.values(), s.__dict__.values(), strict=True)
    )
    assert not np.array_equal(grouped_split(groups, _fractions(), seed=4).test, s.test)


def test_unequal_groups_overshoot_by_at_most_one_group() -> None:
    sizes = [30, 1, 1, 1, 50, 2, 7, 9, 3, 3, 20, 5]
    groups = np.repeat(np.arange(len(sizes)), sizes)
    s = grouped_split(groups, _fractions(val=0.1, test=0.25), seed=0)
    n = groups.size
    assert round(n * 0.25) <= s.test.size < round(n * 0.25) + max(sizes)
    assert s.train.size > 0 and s.val.size > 0


def test_too_few_groups_and_missing_metadata_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"data\.split\.group"):
        grouped_split(np.repeat([0, 1], 10), _fractions(), seed=0)  # test, val: no train left
    with pytest.raises(ConfigError, match=r"data\.split\.group.*'source'.*region"):
        make_split(np.zeros(4), _fractions(group="source"), 0, {"region": np.zeros(4)})


def test_without_a_group_the_split_is_the_stratified_one() -> None:
    labels = np.arange(60) % 3
    a = make_split(labels, _fractions(), 5, {"region": np.zeros(60)})
    b = stratified_split(labels, _fractions(), 5)
    assert np.array_equal(a.test, b.test) and np.array_equal(a.train, b.train)


def test_config_field_is_checked_at_load(tmp_path: Path) -> None:
    raw = tiny_raw()
    raw["data"]["split"] = {"val": 0.1, "test": 0.2, "group": ""}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"data\.split\.group"):
        load_config(path)
    raw["data"]["split"]["group"] = "region"
    path.write_text(yaml.safe_dump(raw))
    assert load_config(path).data.split.group == "region"
