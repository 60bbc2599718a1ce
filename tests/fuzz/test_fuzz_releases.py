"""Hostile site replies and release parameters for the issue-33 release checks (< 20 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import tiny_raw

from geofl.client.release import noisy_count
from geofl.config.load import load_config
from geofl.deploy.wire import check_reply
from geofl.errors import ConfigError
from geofl.rng import torch_generator

_ARRAYS = st.sampled_from(
    [
        np.zeros(0),
        np.array([10, 10, 10, 9, 1]),
        np.array([[1, 2], [3, 4]]),
        np.array([np.nan, -1.0]),
        np.array(["a", "b"]),
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.sampled_from(["delta", "label_histogram", "upload.x", "junk"]), max_size=4),
    value=_ARRAYS,
    with_update=st.booleans(),
    allowed=st.booleans(),
)
def test_check_reply_never_raises_and_refuses_exactly_a_forbidden_histogram(
    keys: list[str], value: np.ndarray, with_update: bool, allowed: bool
) -> None:
    records: dict[str, Any] = {"site": ConfigRecord({"client": 0, "round": 1})}
    if with_update:
        records["update"] = ArrayRecord({k: Array(value) for k in keys})
    records["meta"] = MetricRecord({"num_samples": 1})
    why = check_reply(RecordDict(records), histogram_allowed=allowed)
    forbidden = with_update and not allowed and "label_histogram" in keys
    assert (why is not None) == forbidden
    assert why is None or "\n" not in why


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 10**9), z=st.floats(1e-6, 1e6), seed=st.integers(0, 2**31))
def test_noisy_count_is_a_positive_whole_number(n: int, z: float, seed: int) -> None:
    out = noisy_count(n, z, torch_generator(seed))
    assert isinstance(out, int) and out >= 1


@pytest.mark.parametrize(
    "release",
    [
        [{"name": "noisy_size", "noise_multiplier": 0.0}],
        [{"name": "noisy_size", "noise_multiplier": float("nan")}],
        [{"name": "noisy_size"}],
        [{"name": "noisy_size", "noise_multiplier": 1.0}, {"name": "conceal_size"}],
        [{"name": "spatial_alpha", "noise_multiplier": -1.0}],
    ],
)
def test_bad_release_settings_are_one_line(tmp_path: Path, release: list[dict[str, Any]]) -> None:
    raw = tiny_raw()
    raw["methods"][1]["release"] = release
    raw["methods"][1]["weighting"] = {"name": "uniform"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith("methods.1.release.") and "\n" not in str(err.value)


def test_the_noisy_count_draw_is_the_generator_s(tmp_path: Path) -> None:
    draw = float(torch.randn((), generator=torch_generator(4), dtype=torch.float64))
    assert noisy_count(50, 2.0, torch_generator(4)) == max(1, round(50 + 2.0 * draw))
