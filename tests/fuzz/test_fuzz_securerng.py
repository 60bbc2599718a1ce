"""Hostile ``privacy.randomness`` values (config file, ``randomness`` run/node config key):
each is one line naming the field, never a crash — and a secret source never derives the
seeded derivation's seeds, whatever the keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.deploy.setup import deploy_randomness
from geofl.errors import ConfigError
from geofl.rng import SEEDED, SecretSource

BASE = {"name": "x", "data": {"dataset": "synthetic"}, "methods": [{"name": "fedavg"}]}


@pytest.mark.parametrize(
    "value", ["SECURE", "seeded ", "", "random", 1, 0.5, True, [], {"mode": "secure"}, "null"]
)
def test_bad_config_value_is_one_line(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({**BASE, "privacy": {"randomness": value}}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith("privacy.randomness: ")


@pytest.mark.parametrize("value", ["SECURE", "seeded ", "none", "1", "secure\nseeded", "é"])
def test_bad_override_is_one_line(value: str) -> None:
    cfg = ExperimentConfig.model_validate(BASE)
    with pytest.raises(ConfigError) as err:
        deploy_randomness(cfg, value)
    assert str(err.value).startswith("randomness: ") and "\n" not in str(err.value)


@settings(deadline=None, derandomize=True, database=None, max_examples=200)
@given(
    key=st.binary(min_size=32, max_size=64),
    keys=st.lists(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=8)), max_size=6),
)
def test_secret_seeds_are_in_range_and_not_the_public_ones(key: bytes, keys: list[Any]) -> None:
    seed = SecretSource(key).seed(*keys)
    assert 0 <= seed < 2**63
    assert seed != SEEDED.seed(*keys)  # a 2^-63 coincidence would need a broken HMAC
