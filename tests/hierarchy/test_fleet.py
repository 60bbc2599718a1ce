"""The fleet: tractor ids, farms and regions of synthetic_agri; seeded locations and reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from geofl.data.agri.dataset import SyntheticAgriParams, build_synthetic_agri
from geofl.data.agri.synthetic import generate_blocks
from geofl.errors import HierarchyError
from geofl.hierarchy.clusters import haversine_km
from geofl.hierarchy.fleet import (
    LINK_LATENCY_MS,
    MODEL_TYPES,
    REGION_CENTRES,
    Fleet,
    context_bins,
    fleet_from_context,
    synthetic_fleet,
)


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return synthetic_fleet(0)


def test_synthetic_fleet_is_the_agri_datasets_tractors(fleet: Fleet, tmp_path: Path) -> None:
    blocks = generate_blocks(0)
    assert fleet.num_tractors == 120 == int(blocks.tractor.max()) + 1  # 003 Table 1
    assert np.array_equal(fleet.farm[blocks.tractor], blocks.farm)
    assert np.array_equal(fleet.region[blocks.tractor], blocks.region)
    assert np.array_equal(fleet.link_profile[blocks.tractor], blocks.link_profile)
    farms_per_region = [np.unique(fleet.farm[fleet.region == r]).size for r in range(3)]
    assert farms_per_region == [14, 13, 8]  # 003 Table 12
    # the same fleet from a loaded dataset's metadata (client = tractor)
    data = build_synthetic_agri(SyntheticAgriParams(task="stress"), cache_dir=tmp_path)
    m = data.metadata
    again = fleet_from_context(
        m["tractor"],
        m["farm"],
        m["region"],
        m["crop"],
        m["soil"],
        m["climate"],
        m["link_profile"],
        seed=0,
        task="stress",
    )
    for name in ("farm", "region", "lat", "lon", "model_type", "capability", "link_profile"):
        assert np.array_equal(getattr(again, name), getattr(fleet, name)), name


def test_locations_lie_around_the_documented_region_centres(fleet: Fleet) -> None:
    centres = np.asarray(REGION_CENTRES)[fleet.region]
    dist = haversine_km(fleet.lat, fleet.lon, centres[:, 0], centres[:, 1])
    assert dist.max() < 5 * 40.0 * 1.5  # σ = 40 km per axis: well inside 5σ·√2
    assert np.median(dist) > 10.0  # spread, not stacked on the centre
    # tractors sit near their farm: every pair of a farm's tractors within a few σ = 1.5 km
    for f in np.unique(fleet.farm):
        i = np.flatnonzero(fleet.farm == f)
        d = haversine_km(fleet.lat[i][:, None], fleet.lon[i][:, None], fleet.lat[i], fleet.lon[i])
        assert d.max() < 15.0


def test_reports_are_seeded_and_latency_follows_the_link_profile(fleet: Fleet) -> None:
    again = synthetic_fleet(0)
    other = synthetic_fleet(1)
    assert np.array_equal(again.capability, fleet.capability)
    assert np.array_equal(again.lat, fleet.lat)
    assert not np.array_equal(other.lat[:5], fleet.lat[:5])
    lo, hi = np.asarray(LINK_LATENCY_MS)[fleet.link_profile].T
    lat_ms = fleet.capability[:, 2]
    assert ((lat_ms >= lo) & (lat_ms <= hi)).all()
    conc = fleet.capability[:, 3]
    assert set(np.unique(conc)) <= set(range(1, 9))
    assert (fleet.model_type == MODEL_TYPES.index("stress")).all()
    assert (synthetic_fleet(0, task="nutrient").model_type == 0).all()


def test_context_bins_by_hand() -> None:
    # (crop · 3 textures + texture) · 3 climates + climate
    assert context_bins(np.array([0, 1, 4]), np.array([0, 2, 2]), np.array([0, 0, 2])).tolist() == [
        0,
        15,
        44,
    ]
    with pytest.raises(HierarchyError, match=r"context\.crop"):
        context_bins(np.array([5]), np.array([0]), np.array([0]))


def test_tractor_bin_is_its_most_frequent_rows_bin() -> None:
    one = np.zeros(5, dtype=np.int64)
    f = fleet_from_context(
        np.array([0, 0, 0, 1, 1]),
        one,
        one,
        np.array([1, 1, 0, 2, 0]),
        one,
        one,
        one,
    )
    # tractor 0: bins 9, 9, 0 → 9; tractor 1: 18 vs 0 once each → tie → lower bin 0
    assert f.context_bin.tolist() == [9, 0]


def _fleet(**over: np.ndarray) -> Fleet:
    cols: dict[str, np.ndarray] = {
        "farm": np.zeros(2, np.int64),
        "region": np.zeros(2, np.int64),
        "lat": np.array([10.0, 20.0]),
        "lon": np.array([0.0, 1.0]),
        "model_type": np.zeros(2, np.int64),
        "capability": np.ones((2, 4)),
        "context_bin": np.zeros(2, np.int64),
        "link_profile": np.ones(2, np.int64),
    }
    cols.update(over)
    return Fleet(**cols)


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"lat": np.array([10.0, 95.0])}, r"fleet\.lat\[1\] = 95\.0 is outside"),
        ({"lon": np.array([-180.5, 0.0])}, r"fleet\.lon\[0\]"),
        ({"lat": np.array([np.nan, 0.0])}, r"fleet\.lat\[0\]"),
        ({"capability": np.ones((2, 3))}, "fleet.capability"),
        ({"region": np.zeros(3, np.int64)}, "fleet.region"),
    ],
)
def test_bad_fleet_is_refused_naming_the_field(over: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(HierarchyError, match=match):
        _fleet(**over)


def test_bad_context_is_refused() -> None:
    one = np.zeros(3, dtype=np.int64)
    with pytest.raises(HierarchyError, match="tractor 1 has no rows"):
        fleet_from_context(np.array([0, 2, 2]), one, one, one, one, one, one)
    with pytest.raises(HierarchyError, match=r"context\.farm: tractor 0"):
        fleet_from_context(np.array([0, 0, 1]), np.array([0, 1, 1]), one, one, one, one, one)
    with pytest.raises(HierarchyError, match="task"):
        fleet_from_context(one, one, one, one, one, one, one, task="yield")
    with pytest.raises(HierarchyError, match="region_centres"):
        fleet_from_context(one, one, one, one, one, one, one, region_centres=[(91.0, 0.0)])
