"""Region geography (issue 32, deliverable 5): the LEO footprint, the spacing of the world
regions, that one pass never carries two regions, and the count of what a GEO step saw."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from geofl.data.agri.catalog import GEOGRAPHIES, geography_regions
from geofl.data.agri.dataset import SyntheticAgriParams, build_synthetic_agri
from geofl.data.agri.synthetic import generate_blocks
from geofl.errors import HierarchyError
from geofl.hierarchy.clusters import haversine_km
from geofl.hierarchy.fleet import REGION_CENTRES, Fleet, synthetic_fleet
from geofl.hierarchy.geography import (
    footprint_radius_km,
    geo_coverage,
    min_separation_km,
    region_centres_of,
)
from geofl.network.contacts import contact_plan
from geofl.network.orbits import walker_constellation

#: sha256 of a small paper3 draw by the code before geographies (base 93b5a72063).
GOLDEN = "f9de22f392f2df846d81b4e77efceb3ee3c06f8831e356fa01e7dfae4f1363f1"
#: 003's constellation: 550 km, 10° mask (hierarchy.leo defaults).
RHO = footprint_radius_km(550.0, 10.0)


def _centres(name: str) -> tuple[np.ndarray, np.ndarray]:
    regions = GEOGRAPHIES[name]
    return np.array([r.lat for r in regions]), np.array([r.lon for r in regions])


def test_footprint_radius_by_hand() -> None:
    # cos(10°) = 0.984808; 6371.0088 · 0.984808 / 6921.0088 = 0.906546; arccos = 24.968°;
    # minus the 10° mask: 14.968° of arc = 14.968 · 111.195 km = 1,664.3 km
    assert pytest.approx(1664.3, abs=0.5) == RHO
    # no mask: the horizon, R · arccos(R / (R + h)) = 6371.0088 · arccos(0.920531) = 2,557.0 km
    assert footprint_radius_km(550.0, 0.0) == pytest.approx(2557.0, abs=0.5)
    assert footprint_radius_km(1200.0, 10.0) > RHO  # higher sees farther
    with pytest.raises(HierarchyError, match="elevation"):
        footprint_radius_km(550.0, 90.0)


def test_world_regions_are_farther_apart_than_one_pass_reaches() -> None:
    lat, lon = _centres("world")
    d = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    np.fill_diagonal(d, np.inf)
    assert len(GEOGRAPHIES["world"]) == 13
    # closest pair: North China Plain – Punjab, 3,605 km > 2ρ + 6σ_farm = 3,329 + 240
    assert d.min() == pytest.approx(3605, abs=1)
    assert d.min() > 2 * RHO + 6 * 40.0


def test_paper3_regions_fit_in_one_footprint() -> None:
    # the defect issue 32 names: Ames–Salina 490 km, Salina–Limon 527, Ames–Limon 903, all
    # far below 2ρ, so one LEO pass can carry drivers of all three regions
    lat, lon = _centres("paper3")
    d = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    assert d.max() == pytest.approx(903, abs=1) and d.max() < 2 * RHO
    assert tuple(zip(lat, lon, strict=True)) == REGION_CENTRES


@pytest.fixture(scope="module")
def world() -> Fleet:
    return synthetic_fleet(
        0, geography="world", farms_per_region=[2] * 13, num_tractors=39, num_blocks=195
    )


def test_world_fleet_farms_keep_the_spacing(world: Fleet) -> None:
    assert sorted(set(world.region.tolist())) == list(range(13))
    assert min_separation_km(world.lat, world.lon, world.region) > 2 * RHO
    centre = np.array([(r.lat, r.lon) for r in GEOGRAPHIES["world"]])[world.region]
    off = haversine_km(world.lat, world.lon, centre[:, 0], centre[:, 1])
    assert off.max() < 3 * 40.0 * math.sqrt(2) + 10  # within ~3σ of its centre


def _regions_per_sat_slot(fleet: Fleet, hours: float = 6.0) -> list[int]:
    """For every (LEO, slot) with a station in view: how many regions are in view."""
    epoch = datetime(2026, 1, 1, tzinfo=UTC)
    tles = walker_constellation(
        n_leo=8,
        planes=4,
        altitude_km=550.0,
        inclination_deg=97.6,
        epoch=epoch,
        geo_longitude_deg=-98.0,
    )
    n_slots = int(hours * 3600 / 30)
    plan = contact_plan(
        tles, np.stack([fleet.lat, fleet.lon], 1), start=epoch, n_slots=n_slots, p_leo_fail=0.0
    )
    seen: dict[tuple[int, int], set[int]] = {}
    for p in plan.passes:
        for slot in range(p.start_slot, p.end_slot):
            seen.setdefault((p.sat, slot), set()).add(int(fleet.region[p.station]))
    return [len(v) for v in seen.values()]


def test_each_leo_pass_covers_farms_of_one_world_region(world: Fleet) -> None:
    counts = _regions_per_sat_slot(world)
    assert len(counts) > 100 and max(counts) == 1


def test_paper3_passes_cover_several_regions() -> None:
    fleet = synthetic_fleet(0, farms_per_region=[2, 2, 2], num_tractors=12, num_blocks=60)
    assert max(_regions_per_sat_slot(fleet)) == 3  # the geography the issue complains about


def test_geo_coverage_counts_by_hand() -> None:
    region = np.array([0, 0, 1, 2, 2, 3])
    farm = np.array([0, 1, 2, 3, 3, 4])
    got = geo_coverage([(0, 1), (2,), (3, 4)], region, farm, trim_fraction=0.1)
    assert (got.models, got.regions, got.farms) == (3, 3, 4)
    assert got.regions_per_model == (1, 1, 1) and got.trimmed == 0  # ⌊0.1 · 3⌋ = 0
    mixed = geo_coverage([(0, 2), (5,)], region, farm, trim_fraction=0.1)
    assert mixed.regions_per_model == (2, 1) and mixed.regions == 3 and mixed.farms == 3
    ten = geo_coverage([(k % 6,) for k in range(10)], region, farm, trim_fraction=0.1)
    assert ten.trimmed == 1 and ten.models == 10  # ⌊0.1 · 10⌋ = 1: RobustAvg trims
    assert ten.to_json()["regions"] == 4
    empty = geo_coverage([], region, farm, trim_fraction=0.1)
    assert (empty.models, empty.regions, empty.farms, empty.trimmed) == (0, 0, 0, 0)


def test_region_centres_of_rows() -> None:
    got = region_centres_of(np.array([1, 0, 1]), np.array([5.0, 1.0, 5.0]), np.array([6, 2, 6]))
    assert got == ((1.0, 2.0), (5.0, 6.0))
    with pytest.raises(HierarchyError, match="one centre"):
        region_centres_of(np.array([0, 0]), np.array([1.0, 2.0]), np.array([0.0, 0.0]))
    with pytest.raises(HierarchyError, match="one centre"):  # region 1 has no row
        region_centres_of(np.array([0, 2]), np.array([1.0, 2.0]), np.array([0.0, 0.0]))


def test_dataset_geography_parameter(tmp_path: Path) -> None:
    SyntheticAgriParams(task="stress", geography="world", farms_per_region=[1] * 13)
    with pytest.raises(ValidationError, match="at most 13"):
        SyntheticAgriParams(task="stress", geography="world", farms_per_region=[1] * 14)
    with pytest.raises(ValidationError, match="has 3 regions but 4"):
        SyntheticAgriParams(task="stress", farms_per_region=[1, 1, 1, 1])
    with pytest.raises(ValidationError, match="≥ 1 farm"):
        SyntheticAgriParams(task="stress", farms_per_region=[2, 0, 1])
    with pytest.raises(ValueError, match="not one of"):
        geography_regions("mars", 1)
    p = SyntheticAgriParams(
        task="stress",
        geography="world",
        farms_per_region=[1] * 12,
        num_tractors=24,
        num_blocks=120,
    )
    data = build_synthetic_agri(p, cache_dir=tmp_path)
    region = np.asarray(data.metadata["region"])
    assert set(region.tolist()) == set(range(12))
    lat, lon = np.asarray(data.metadata["region_lat"]), np.asarray(data.metadata["region_lon"])
    want = region_centres_of(region, lat, lon)
    assert list(want) == [(r.lat, r.lon) for r in GEOGRAPHIES["world"][:12]]
    default = build_synthetic_agri(
        SyntheticAgriParams(task="stress", num_blocks=200), cache_dir=tmp_path
    )
    assert "region_lat" not in default.metadata  # paper3 rows carry no centres


def test_world_regions_get_their_climate_and_links() -> None:
    blocks = generate_blocks(
        0, num_blocks=260, num_tractors=26, farms_per_region=(2,) * 13, geography="world"
    )
    zones = np.array([r.climate for r in GEOGRAPHIES["world"]])
    # a farm lies in its region's zone w.p. 0.75, else a neighbouring one
    moved = blocks.climate != zones[blocks.region]
    assert moved.mean() < 0.5
    assert np.all(np.abs(blocks.climate - zones[blocks.region]) <= 1)
    # the low-NQI regions (link class 2: no 5G) have no 5G tractor
    links = np.array([r.link for r in GEOGRAPHIES["world"]])
    assert not np.any(blocks.link_profile[links[blocks.region] == 2] == 2)


def test_paper3_blocks_unchanged_by_geographies() -> None:
    """Golden digest of a small paper3 draw, taken with the code before geographies
    existed (base 93b5a72063): the default geography keeps every draw."""
    blocks = generate_blocks(0, num_blocks=120, num_tractors=12, farms_per_region=(2, 2, 1))
    h = hashlib.sha256()
    for a in (
        blocks.region,
        blocks.climate,
        blocks.link_profile,
        blocks.tractor,
        blocks.crop,
        blocks.weekly["ndvi"],
        blocks.static["yield_t_ha"],
    ):
        h.update(np.ascontiguousarray(a).tobytes())
    assert h.hexdigest() == GOLDEN
