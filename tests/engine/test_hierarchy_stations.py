"""Contact stations follow the drivers (003 §2.3.2, §2.1.6): when a driver fails and a
far-away member is elected, the cluster's passes from then on are the new driver's — those
a contact plan computed directly for its location gives — and what the cluster was waiting
for (a driver model on the ground, encoded and sealed; a global model on board) moves to the
new driver's passes at the re-election, the upload re-sealed under the new driver's key.

Scenario: 12 tractors, cluster 0 = tractors 0–5 driven by tractor 0 at (45° N, 93° W),
cluster 1 = tractors 6–11 driven by tractor 6 at (52° N, 5° E); tractor 1, next in ρ, sits
60° of longitude east of tractor 0 at (45° N, 33° W). Rounds of 1,800 s, drivers aggregate
900 s into each round; the config's 8 Walker LEOs + GEO (sgp4), 5 % of passes dropped.
Tractor 0 fails at the health check of round 2 (t = 1,800 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.hierarchy.build import _tles, leo_contacts
from geofl.engine.hierarchy.contacts import DriverContacts, IdealContacts
from geofl.engine.hierarchy.scheduler import HierarchicalScheduler
from geofl.engine.hierarchy.topology import Topology
from geofl.hierarchy.clusters import Clusters
from geofl.network.contacts import contact_plan, pass_uniform

HIER: dict[str, Any] = {
    "round_s": 1800.0,
    "driver_deadline_s": 900.0,
    "kappa": 0.5,
    "staleness_metric": False,
}
ROUNDS, SEED = 4, 2
A, B, FAR = (45.0, -93.0), (45.0, -33.0), (52.0, 5.0)
LOCATIONS = np.array([A, B, *[(45.0 + 0.01 * i, -93.0) for i in range(4)], *[FAR] * 6])
C0, C1 = tuple(range(6)), tuple(range(6, 12))


def _scheduler(tmp: Path, contacts: Any, fail_round: int | None) -> tuple[Any, Any]:
    cfg = HierarchyConfig.model_validate(HIER)
    run = make_run(config(tmp, agri_raw(HIER, rounds=ROUNDS)), tmp / "run")
    topo = Topology(
        Clusters((C0, C1), (0, 6), np.array([0] * 6 + [1] * 6)),
        rho=np.arange(12.0)[::-1],
        farm=np.array([0, 1] * 3 + [2] * 6),
        context_bin=np.array([0, 1] * 3 + [5] * 6),
    )
    sch = HierarchicalScheduler(run.comps, cfg, topo, contacts, seed=SEED)
    check = sch.monitor.health_check

    def health_check(r: int) -> tuple[Any, ...]:
        out = check(r)
        f = sch.monitor.fail(0, r) if r == fail_round else None
        return out if f is None else (*out, f)

    sch.monitor.health_check = health_check  # type: ignore[method-assign]
    return run, sch


def _run(tmp: Path, contacts: Any, fail_round: int | None = 2) -> list[dict[str, Any]]:
    run, sch = _scheduler(tmp, contacts, fail_round)
    params, out = run.init_params, []
    for r in range(1, ROUNDS + 1):
        res = sch.round(params, r)
        run.comps.store.commit()
        params = res.params
        out.append(res.record.to_json()["hierarchy"])
    return out


def _plans() -> Any:
    return leo_contacts(HierarchyConfig.model_validate(HIER), LOCATIONS, rounds=ROUNDS, seed=SEED)


def _direct(lat_lon: tuple[float, float], station: int) -> Any:
    """The plan of one location computed directly (not through the scheduler's cache)."""
    cfg = HierarchyConfig.model_validate(HIER)
    n_slots = int((ROUNDS + 1) * cfg.round_s / cfg.leo.slot_s)
    return contact_plan(
        _tles(cfg.leo),
        np.array([lat_lon]),
        start=cfg.leo.epoch,
        n_slots=n_slots,
        seed=SEED,
        station_ids=[station],
    )


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Any]:
    plans = _plans()
    return _run(tmp_path_factory.mktemp("failed"), DriverContacts(plans)), plans


def test_the_re_elected_driver_transmits_in_its_own_passes(failed: Any) -> None:
    """Slots of 30 s. Tractor 0's usable passes after the deadlines at slots 30 and 90:
    slot 94 (LEO 3) both times; tractor 1's from slot 60: 65 (LEO 5), from 90 and 150: 160
    (LEO 4). Round 1's model of cluster 0 waits on the ground for slot 94 when tractor 0
    fails at 1,800 s (slot 60): it leaves in tractor 1's pass at slot 65 (1,950 s); the
    models of rounds 2 and 3 in tractor 1's pass at slot 160 (4,800 s)."""
    blocks, plans = failed
    a, b = _direct(A, 0), _direct(B, 1)
    assert [a.next_contact(0, s) for s in (30, 90)] == [(94, 3), (94, 3)]
    assert [b.next_contact(0, s) for s in (60, 90, 150)] == [(65, 5), (160, 4), (160, 4)]
    ups = [
        (e[0], e[2], e[4])
        for blk in blocks
        for e in blk["events"]
        if e[1] == "uplink" and e[3] == 0
    ]
    assert ups == [(1950.0, 5, 1), (4800.0, 4, 1), (4800.0, 4, 1)]
    # the handed-over upload, sealed by tractor 0 for LEO 3, was re-sealed by tractor 1 for
    # LEO 5 and opened there (an uplink event is recorded only for an accepted envelope)
    assert all(not blk["envelope_rejections"] for blk in blocks)
    assert blocks[1]["driver_changes"] == [
        {
            "round": 2,
            "at_s": 1800.0,
            "cluster": 0,
            "old": 0,
            "new": 1,
            "cause": "failover",
            "uplinks_moved": 1,
            "downlinks_moved": 1,
        }
    ]
    assert [blk["driver_changes"] for blk in (blocks[0], *blocks[2:])] == [[], [], []]
    assert plans.computed == (0, 1, 6)  # tractor 1's plan was computed at its election
    assert plans.plan(1).passes == b.passes  # the cached plan is the direct one
    np.testing.assert_array_equal(plans.plan(1).proximity, b.proximity)
    assert all(p.station == 1 for p in b.passes)
    # cluster 1 is untouched: its driver's own passes
    far = _direct(FAR, 6)
    for t, _, leo, c, station in (e for blk in blocks for e in blk["events"]):
        if c == 1 and station >= 0:
            assert station == 6 and far.usable(0, int(t // 30.0)) == leo


def test_downlinks_after_the_failure_reach_the_new_driver(failed: Any) -> None:
    """v1 (released at 1,800 s) was on its way to tractor 0; it reaches tractor 1 in its
    pass at slot 65 (LEO 5), as does every later downlink of cluster 0 in its passes."""
    blocks, _ = failed
    downs = [e for blk in blocks for e in blk["events"] if e[1] == "downlink" and e[3] == 0]
    assert downs[0][:3] == [1950.0, "downlink", 5] and {e[4] for e in downs} == {1}
    b = _direct(B, 1)
    for t, _, leo, _, _ in downs:
        assert b.usable(0, int(t // 30.0)) == leo


def test_pass_drops_are_keyed_by_tractor_whatever_its_role() -> None:
    """A pass is dropped iff pass_uniform(seed, tractor, sat, start slot) < p_LEO-fail: the
    same for tractor 1 as a driver (the scheduler's plan) or computed directly; another
    tractor at the same place sees the same passes with its own fates."""
    p, other = _plans().plan(1), _direct(B, 7)
    assert p.passes and [(x.sat, x.start_slot) for x in p.passes] == [
        (x.sat, x.start_slot) for x in other.passes
    ]
    for plan, tractor in ((p, 1), (other, 7)):
        for x in plan.passes:
            assert x.station == tractor
            assert x.dropped == (pass_uniform(SEED, tractor, x.sat, x.start_slot) < 0.05)


def test_without_failure_the_passes_stay_the_initial_drivers(tmp_path: Path) -> None:
    plans = _plans()
    blocks = _run(tmp_path, DriverContacts(plans), fail_round=None)
    assert plans.computed == (0, 6)
    stations = {(e[3], e[4]) for blk in blocks for e in blk["events"] if e[1] == "uplink"}
    assert stations <= {(0, 0), (1, 6)}
    assert all(not blk["driver_changes"] for blk in blocks)


def test_ideal_contacts_keep_the_clusters_leo_after_a_failover(tmp_path: Path) -> None:
    blocks = _run(tmp_path, IdealContacts(30.0, 8))
    ups = [e for blk in blocks for e in blk["events"] if e[1] == "uplink"]
    assert {(e[2], e[3]) for e in ups} == {(0, 0), (1, 1)}  # LEO = cluster mod 8
    assert {e[4] for e in ups if e[3] == 0 and e[0] >= 1800.0} == {1}
