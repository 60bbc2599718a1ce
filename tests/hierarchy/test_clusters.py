"""003 Alg. 2 clusters, ρ, driver election and failover (§2.1.4–2.1.6), by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geofl.errors import HierarchyError
from geofl.hierarchy import clusters as clusters_module
from geofl.hierarchy.clusters import (
    EARTH_RADIUS_KM,
    Clusters,
    DriverMonitor,
    capability_score,
    elect,
    form_clusters,
    haversine_km,
)
from geofl.hierarchy.fleet import Fleet, synthetic_fleet
from geofl.rng import numpy_generator

# ----------------------------------------------------------------------------- haversine


def test_haversine_exact_arcs() -> None:
    deg = EARTH_RADIUS_KM * math.pi / 180.0  # 111.195 km per degree of a great circle
    assert haversine_km(0.0, 0.0, 0.0, 1.0) == pytest.approx(deg, rel=1e-12)
    assert haversine_km(0.0, 0.0, 90.0, 0.0) == pytest.approx(90 * deg, rel=1e-12)
    assert haversine_km(-90.0, 0.0, 90.0, 0.0) == pytest.approx(math.pi * EARTH_RADIUS_KM)
    assert haversine_km(0.0, 179.5, 0.0, -179.5) == pytest.approx(deg, rel=1e-9)  # date line


def test_haversine_lax_jfk_published_example() -> None:
    # Ed Williams' Aviation Formulary: LAX (33°57'N, 118°24'W) – JFK (40°38'N, 73°47'W):
    # d = 0.623585 rad (2144 nm).
    d = haversine_km(33 + 57 / 60, -(118 + 24 / 60), 40 + 38 / 60, -(73 + 47 / 60))
    assert float(d) / EARTH_RADIUS_KM == pytest.approx(0.623585, abs=2e-6)
    # broadcasts: [2] × [3, 1] → [3, 2]
    grid = haversine_km(np.zeros(2), np.array([0.0, 1.0]), np.zeros((3, 1)), np.zeros((3, 1)))
    assert grid.shape == (3, 2)


# ----------------------------------------------------------------------------- ρ


CAP = np.array([[100.0, 10.0, 50.0, 1.0], [300.0, 20.0, 150.0, 3.0], [200.0, 30.0, 100.0, 2.0]])


def test_capability_score_by_hand() -> None:
    # min–max per column; latency lower-is-better: 50 ms → 1, 150 ms → 0.
    # A (0, 0, 1, 0) → 0.25; B (1, .5, 0, 1) → 0.625; C (.5, 1, .5, .5) → 0.625
    assert capability_score(CAP).tolist() == [0.25, 0.625, 0.625]
    # other weights: w = (0, 0, 1, 0) ranks by latency alone
    assert capability_score(CAP, (0, 0, 1, 0)).tolist() == [1.0, 0.0, 0.5]
    # a constant column contributes 0; fixed bounds clip
    const = CAP.copy()
    const[:, 0] = 7.0
    assert capability_score(const, (1, 0, 0, 0)).tolist() == [0.0, 0.0, 0.0]
    fixed = capability_score(CAP, (1, 0, 0, 0), bounds=([0, 0, 0, 0], [200, 1, 1, 1]))
    assert fixed.tolist() == [0.5, 1.0, 1.0]


def test_capability_score_refuses_bad_input() -> None:
    with pytest.raises(HierarchyError, match="rho weights"):
        capability_score(CAP, (-1, 1, 1, 1))
    with pytest.raises(HierarchyError, match="capability"):
        capability_score(np.array([[1.0, np.nan, 1.0, 1.0]]))


def test_elect_argmax_with_lowest_id_tie_rule() -> None:
    rho = capability_score(CAP)
    assert elect([0, 1, 2], rho) == 1  # B and C tie at 0.625 → lowest id
    assert elect([2, 1, 0], rho) == 1  # order of members does not matter
    assert elect([0, 1, 2], rho, exclude={1}) == 2
    assert elect([0, 1, 2], rho, exclude={1, 2}) == 0
    with pytest.raises(HierarchyError, match="no eligible member"):
        elect([0, 1], rho, exclude={0, 1})
    with pytest.raises(HierarchyError, match="no eligible member"):
        elect([], rho)


# ----------------------------------------------------------------------------- Alg. 2


def _line_fleet(lon: list[float], model: list[int], rho_rank: list[float] | None = None) -> Fleet:
    """Tractors on the equator at the given longitudes (1° = 111.195 km)."""
    t = len(lon)
    cap = np.zeros((t, 4))
    cap[:, 0] = rho_rank if rho_rank is not None else np.arange(t)
    return Fleet(
        farm=np.arange(t),
        region=np.zeros(t, np.int64),
        lat=np.zeros(t),
        lon=np.array(lon),
        model_type=np.array(model),
        capability=cap,
        context_bin=np.zeros(t, np.int64),
        link_profile=np.ones(t, np.int64),
    )


def test_alg2_by_hand_first_cluster_chaining_and_model_types() -> None:
    # r = 150 km. In id order:
    # 0 @ 0°: new cluster 0.  1 @ 3°: 333 km from 0 → new cluster 1.
    # 2 @ 1.2°: 133 km from 0 → cluster 0.
    # 3 @ 2.1°: 100 km from 2 (cluster 0) AND 100 km from 1 (cluster 1) → the FIRST cluster,
    #   0 — although it is 233 km from tractor 0 (chaining: within r of ANY member). The
    #   clusters are not merged.
    # 4 @ 10°: new cluster 2.  5 @ 0° but model type 1: its own group → cluster 3.
    f = _line_fleet([0.0, 3.0, 1.2, 2.1, 10.0, 0.0], [0, 0, 0, 0, 0, 1])
    c = form_clusters(f, radius_km=150.0)
    assert c.members == ((0, 2, 3), (1,), (4,), (5,))
    assert c.cluster_of.tolist() == [0, 1, 0, 0, 2, 3]
    assert haversine_km(0.0, 0.0, 0.0, 2.1) > 150.0  # the chained member is beyond r of 0
    # drivers: ρ from the compute column (id order) → highest id in each cluster
    assert c.driver == (3, 1, 4, 5)
    # r = 0: everyone alone (distinct points); a huge r: one cluster per model type
    assert form_clusters(f, radius_km=0.0).num_clusters == 6
    assert form_clusters(f, radius_km=1e5).members == ((0, 1, 2, 3, 4), (5,))


def test_alg2_is_order_dependent_as_written() -> None:
    # 0 @ 0°, 1 @ 2° (222 km: new), 2 @ 1° (111 km from both) → joins cluster 0 only.
    c = form_clusters(_line_fleet([0.0, 2.0, 1.0], [0, 0, 0]), radius_km=120.0)
    assert c.members == ((0, 2), (1,))
    # with 2 listed before 1, the chain absorbs everyone
    c = form_clusters(_line_fleet([0.0, 1.0, 2.0], [0, 0, 0]), radius_km=120.0)
    assert c.members == ((0, 1, 2),)


def _literal_alg2(f: Fleet, r: float) -> list[int]:
    """Alg. 2 lines 1–10 word for word: a list of clusters, scanned in creation order."""
    cluster_of = [-1] * f.num_tractors
    n = 0
    for m in sorted(set(f.model_type.tolist())):
        clusters: list[list[int]] = []
        for i in [i for i in range(f.num_tractors) if f.model_type[i] == m]:
            for c, members in enumerate(clusters):
                if any(haversine_km(f.lat[i], f.lon[i], f.lat[j], f.lon[j]) <= r for j in members):
                    members.append(i)
                    cluster_of[i] = n + c
                    break
            else:
                clusters.append([i])
                cluster_of[i] = n + len(clusters) - 1
        n += len(clusters)
    return cluster_of


@pytest.mark.parametrize("max_pairs", [1 << 23, 10])  # KD-tree pairs; dense fallback
@pytest.mark.parametrize("seed", range(3))
def test_fast_neighbour_search_matches_the_literal_algorithm(
    seed: int, max_pairs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clusters_module, "MAX_NEIGHBOUR_PAIRS", max_pairs)
    rng = np.random.default_rng(seed)
    t = 150
    lat = np.concatenate([rng.uniform(-89.9, 89.9, t - 30), rng.normal(0, 0.3, 30)])
    lon = np.concatenate([rng.uniform(-180, 180, t - 30), 179.8 + rng.normal(0, 0.3, 30)])
    lon = (lon + 180) % 360 - 180  # a cluster across the date line
    f = Fleet(
        farm=np.arange(t),
        region=np.zeros(t, np.int64),
        lat=lat,
        lon=lon,
        model_type=rng.integers(0, 2, t),
        capability=rng.random((t, 4)),
        context_bin=np.zeros(t, np.int64),
        link_profile=np.ones(t, np.int64),
    )
    for r in (0.0, 50.0, 500.0, 3000.0, 30000.0):
        assert form_clusters(f, radius_km=r).cluster_of.tolist() == _literal_alg2(f, r), r


def test_driver_ties_go_to_the_lowest_id() -> None:
    c = form_clusters(_line_fleet([0.0, 0.1, 0.2], [0, 0, 0], [5.0, 9.0, 9.0]), radius_km=50.0)
    assert c.driver == (1,)


def test_synthetic_fleet_clusters_stay_within_one_model_type_and_cover_everyone() -> None:
    f = synthetic_fleet(0)
    c = form_clusters(f, radius_km=25.0)
    assert sorted(i for m in c.members for i in m) == list(range(120))
    for mem, d in zip(c.members, c.driver, strict=True):
        assert len({int(f.model_type[i]) for i in mem}) == 1
        assert d == elect(mem, capability_score(f.capability))


def test_bad_cluster_input_is_refused() -> None:
    f = _line_fleet([0.0, 1.0], [0, 0])
    with pytest.raises(HierarchyError, match="radius_km"):
        form_clusters(f, radius_km=-1.0)
    with pytest.raises(HierarchyError, match="rho"):
        form_clusters(f, radius_km=1.0, rho=np.ones(3))
    with pytest.raises(HierarchyError, match=r"clusters\.members\[1\]: empty cluster"):
        Clusters(((0, 1), ()), (0, 0), np.zeros(2, np.int64))
    with pytest.raises(HierarchyError, match=r"clusters\.driver\[0\]"):
        Clusters(((0,),), (1,), np.zeros(2, np.int64))


# ----------------------------------------------------------------------------- failover

RHO = np.array([0.9, 0.5, 0.7, 0.1, 0.3])  # cluster 0 = {0, 1, 2}, cluster 1 = {3, 4}


def _clusters() -> Clusters:
    return Clusters(((0, 1, 2), (3, 4)), (0, 4), np.array([0, 0, 0, 1, 1]))


def test_driver_failover_mid_round_loses_no_buffered_update() -> None:
    mon: DriverMonitor[str] = DriverMonitor(_clusters(), RHO, seed=0)
    assert mon.submit(1, "u1") == 0 and mon.submit(2, "u2") == 0 and mon.submit(0, "u0") == 0
    f = mon.fail(0, round_idx=3)  # the driver dies holding three updates
    assert f is not None
    assert (f.failed, f.driver, f.handed_over) == (0, 2, 3)  # re-elected by ρ: 0.7 > 0.5
    assert mon.drivers == (2, 4) and mon.down == {0}
    assert mon.submit(1, "u1b") == 2  # members re-home to the new driver
    with pytest.raises(HierarchyError, match="tractor 0 is down"):
        mon.submit(0, "late")
    assert mon.drain(0) == ["u1", "u2", "u0", "u1b"]  # nothing lost, order kept
    assert mon.pending(0) == 0


def test_all_members_down_buffer_waits_for_recovery_without_preemption() -> None:
    mon: DriverMonitor[int] = DriverMonitor(_clusters(), RHO, seed=0, down_rounds=2)
    mon.health_check(0)
    mon.submit(3, 30)
    first = mon.fail(1, round_idx=0)
    assert first is not None and (first.failed, first.driver) == (4, 3)
    second = mon.fail(1, round_idx=0)
    assert second is not None and (second.failed, second.driver, second.handed_over) == (3, None, 0)
    assert mon.fail(1, round_idx=0) is None  # no driver to fail
    assert mon.drain(1) == [] and mon.pending(1) == 1  # kept, not lost
    mon.health_check(1)
    assert mon.driver(1) is None  # down for 2 rounds: back at round 2
    mon.health_check(2)
    assert mon.driver(1) == 4 and mon.drain(1) == [30]
    # no pre-emption: cluster 0's best node recovers but the sitting driver stays
    mon.fail(0, round_idx=2)
    assert mon.driver(0) == 2
    mon.health_check(4)
    assert 0 not in mon.down and mon.driver(0) == 2


def test_health_draws_come_from_seed_round_cluster_generators() -> None:
    clusters = Clusters(tuple((i,) for i in range(40)), tuple(range(40)), np.arange(40))
    rho = np.zeros(40)
    mon: DriverMonitor[int] = DriverMonitor(clusters, rho, seed=7, p_fail=0.3)
    got = {f.cluster for f in mon.health_check(5)}
    want = {c for c in range(40) if numpy_generator(7, 5, c, "driver_health").random() < 0.3}
    assert got == want and 0 < len(got) < 40
    assert all(mon.driver(c) is None for c in got)  # singleton clusters: nobody left
    # every driver fails with p = 1; and health checks must move forward
    sure: DriverMonitor[int] = DriverMonitor(_clusters(), RHO, seed=0, p_fail=1.0)
    fails = sure.health_check(0)
    assert [(f.cluster, f.failed, f.driver) for f in fails] == [(0, 0, 2), (1, 4, 3)]
    with pytest.raises(HierarchyError, match="round_idx"):
        sure.health_check(0)


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"p_fail": 1.5}, "p_driver_fail"), ({"down_rounds": 0}, "down_rounds")]
)
def test_monitor_refuses_bad_parameters(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(HierarchyError, match=match):
        DriverMonitor(_clusters(), RHO, seed=0, **kwargs)  # type: ignore[arg-type]


def test_snapshot_and_restore_continue_identically() -> None:
    clusters = Clusters(tuple((i, i + 20) for i in range(20)), tuple(range(20)), np.arange(40) % 20)
    rho = np.linspace(1.0, 0.0, 40)
    a: DriverMonitor[int] = DriverMonitor(clusters, rho, seed=3, p_fail=0.4, down_rounds=2)
    for r in range(3):
        a.health_check(r)
        for t in range(40):
            if t not in a.down:
                a.submit(t, 100 * r + t)
    state = a.snapshot()
    b: DriverMonitor[int] = DriverMonitor(clusters, rho, seed=3, p_fail=0.4, down_rounds=2)
    b.restore(state)
    for r in range(3, 6):
        assert a.health_check(r) == b.health_check(r)
        assert a.drivers == b.drivers and a.down == b.down
    assert [a.drain(c) for c in range(20)] == [b.drain(c) for c in range(20)]
    with pytest.raises(HierarchyError, match="monitor state"):
        DriverMonitor(_clusters(), RHO, seed=0).restore(state)
