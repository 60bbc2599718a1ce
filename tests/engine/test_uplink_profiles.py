"""Tractor link profiles of the 003 uplink: drawn in fixed shares, or each tractor's own
nominal uplink from the data (per-region connectivity, 003 Table 12)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.conftest import tiny_raw

from geofl.config.schema import ExperimentConfig
from geofl.config.uplink import UplinkConfig
from geofl.data.agri.dataset import SyntheticAgriParams, build_synthetic_agri
from geofl.data.base import ArrayDataset
from geofl.engine.uplink.build import build_uplink, check_uplink_inputs
from geofl.errors import ConfigError
from geofl.network.rural import profiles_from_data


def test_profile_of_a_client_is_its_most_common_one_ties_to_the_slower() -> None:
    link = np.array([0, 1, 1, 2, 2, 0, 2])
    got = profiles_from_data(link, [np.array([0, 1, 2]), np.array([3, 4]), np.array([0, 3])])
    assert got.tolist() == [1, 2, 0]  # client 2: one 3G, one 5G → the slower (3G)


@pytest.mark.parametrize(
    ("link", "idx", "match"),
    [
        (np.array([0, -1]), [np.array([0, 1])], "unknown"),
        (np.array([0]), [np.array([], int)], "no sample"),
    ],
)
def test_unusable_profiles_are_refused(link: np.ndarray, idx: list[np.ndarray], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        profiles_from_data(link, idx)


def _agri() -> ArrayDataset:
    params = SyntheticAgriParams(task="stress", num_blocks=300, num_tractors=50, weeks=12)
    return build_synthetic_agri(params, cache_dir=None)  # type: ignore[arg-type]


def test_profiles_from_data_follow_each_tractors_region() -> None:
    ds = _agri()
    tractor = np.asarray(ds.metadata["tractor"])
    indices = [np.flatnonzero(tractor == t) for t in range(int(tractor.max()) + 1)]
    cfg = UplinkConfig.model_validate({"network": {"profile_source": "data"}})
    uplink = build_uplink(cfg, ds.metadata, indices, seed=1)
    link = np.asarray(ds.metadata["link_profile"])
    assert uplink.profiles.tolist() == [int(link[i[0]]) for i in indices]
    region = np.asarray(ds.metadata["region"])
    mean = [uplink.profiles[[region[i[0]] == r for i in indices]].mean() for r in range(3)]
    assert mean[0] > mean[1] > mean[2]  # high-, medium-, low-connectivity regions (Table 12)
    shared = build_uplink(UplinkConfig(), ds.metadata, indices, seed=1)
    assert shared.profiles.tolist() != uplink.profiles.tolist()  # shares ignore the regions


def _tabular(metadata: dict[str, np.ndarray]) -> ArrayDataset:
    inputs = torch.zeros(2, 3)
    targets = torch.tensor([0, 1])
    return ArrayDataset(
        inputs, targets, ("no", "yes"), ("a", "b", "c"), metadata, "tiny", target_kind="binary"
    )


def test_profile_source_data_needs_link_profiles_in_the_dataset() -> None:
    raw = tiny_raw()
    raw["methods"] = [{"name": "ground", "uplink": {"network": {"profile_source": "data"}}}]
    cfg = ExperimentConfig.model_validate(raw)
    with pytest.raises(ConfigError, match=r"methods\.0\.uplink\.network\.profile_source"):
        check_uplink_inputs(cfg, _tabular({}))
    with pytest.raises(ConfigError, match="unknown link profiles"):
        check_uplink_inputs(cfg, _tabular({"link_profile": np.array([0, -1])}))
    check_uplink_inputs(cfg, _tabular({"link_profile": np.array([0, 2])}))
