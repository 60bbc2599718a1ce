"""A hand-traced asynchronous hierarchy: 2 clusters, 1 LEO with known contact and relay slots,
no ground delays. Slots of 10 s, rounds of 100 s, drivers aggregate 10 s into each round.

    cluster 0 contacts: slots 1, 12, 21        cluster 1 contacts: slots 13, 35
    LEO → GEO relay:    slots 3, 12, 14, 21, 25, 36

Round 1 (0–100 s): all train from v0 (t' = 1). C0's model reaches the LEO at 10 s, relayed at
30 s; C1's waits for slot 13 (130 s). GEO at 100 s: C0 only, staleness 0 → v1. Down: the LEO
holds v1 from slot 12; C0 gets it at 120 s, C1 at 130 s.
Round 2: all train from v0 again (t' = 1). C0's model: LEO at 120 s, relayed at once (slot 12);
C1's models of rounds 1 and 2: LEO at 130 s, relayed at 140 s. GEO at 200 s: two regional
models, both staleness 1; fairness (Eq. 11): C0 has 2 farms and bins {0, 1} (H = ln 2) →
2·2 = 4, C1 has 1 farm and one bin → 1: weights 0.8 / 0.2. v2 down: C0 at 210 s, C1 at 350 s.
Round 3: all hold v1 (t' = 2); C0 → LEO and relay at 210 s; C1 waits for slot 35. GEO: C0 only,
staleness 1.
Round 4: C0 holds v2 (t' = 3) but has no contact left: stranded. C1 holds v1 (t' = 2); its
round-3 and round-4 models reach the LEO at 350 s, relayed at 360 s. GEO: staleness 2 each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.hierarchy.scheduler import HierarchicalScheduler
from geofl.engine.hierarchy.topology import Topology
from geofl.hierarchy.clusters import Clusters


@dataclass(frozen=True)
class TableContacts:
    """Contacts from explicit slot tables (cluster → slots, whoever drives it; one LEO)."""

    slot_s: float
    contacts: dict[int, tuple[int, ...]]
    relays: tuple[int, ...]
    n_leo: int = 1

    def next_contact(self, cluster: int, station: int, slot: int) -> tuple[int, int] | None:
        later = [s for s in self.contacts[cluster] if s >= slot]
        return (later[0], 0) if later else None

    def next_relay(self, sat: int, slot: int) -> int | None:
        later = [s for s in self.relays if s >= slot]
        return later[0] if later else None


HIER = {
    "round_s": 100.0,
    "driver_deadline_s": 10.0,
    "kappa": 0.5,
    "clip": 1.0e6,
    "trim_fraction": 0.0,
    "redundancy_threshold": 1.0,
    "leo": {"n": 1, "planes": 1, "slot_s": 10.0, "contacts": "ideal"},
}
C0, C1 = tuple(range(6)), tuple(range(6, 12))


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], HierarchicalScheduler]:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("trace")
    cfg = config(tmp, agri_raw(HIER, rounds=4))
    run = make_run(cfg, tmp / "run")
    clusters = Clusters((C0, C1), (0, 6), np.array([0] * 6 + [1] * 6))
    topo = Topology(
        clusters,
        rho=np.arange(12.0),
        farm=np.array([0, 1] * 3 + [2] * 6),
        context_bin=np.array([0, 1] * 3 + [5] * 6),
    )
    contacts = TableContacts(10.0, {0: (1, 12, 21), 1: (13, 35)}, (3, 12, 14, 21, 25, 36))
    sch = HierarchicalScheduler(
        run.comps, HierarchyConfig.model_validate(HIER), topo, contacts, seed=2
    )
    params, records = run.init_params, []
    for r in range(1, 5):
        out = sch.round(params, r)
        run.comps.store.commit()
        params = out.params
        records.append(out.record.to_json())
    return records, sch


def test_round_1_only_the_cluster_with_a_pass_arrives(trace) -> None:  # type: ignore[no-untyped-def]
    h = trace[0][0]["hierarchy"]
    assert trace[0][0]["participants"] == list(C0)
    assert h["staleness"] == [0] * 6
    assert [(g["leo"], g["staleness"], g["weight"]) for g in h["regions"]] == [(0, 0, 1.0)]
    assert h["latency_s"]["relay_wait"] == pytest.approx(20.0)  # LEO at 10 s, relay at 30 s
    assert h["sent"]["driver_leo"] == 2 and h["delivered"]["driver_leo"] == 1


def test_round_2_two_regional_models_weighted_by_fairness(trace) -> None:  # type: ignore[no-untyped-def]
    rec = trace[0][1]
    h = rec["hierarchy"]
    assert rec["participants"] == list(C0) + list(C1) + list(C1)  # C1: rounds 1 and 2
    assert h["staleness"] == [1] * 18
    regions = h["regions"]
    assert [g["clusters"] for g in regions] == [[0], [1, 1]]
    assert [g["fair"] for g in regions] == pytest.approx([4.0, 1.0])
    assert [g["weight"] for g in regions] == pytest.approx([0.8, 0.2])
    assert [g["staleness"] for g in regions] == [1, 1]
    assert sum(rec["weights"]) == pytest.approx(1.0)
    # pass waits 10 (C0), 120 and 20 (C1's two models); relay waits 0, 10, 10; downlinks 20, 30
    assert h["latency_s"]["pass_wait"] == pytest.approx(50.0)
    assert h["latency_s"]["relay_wait"] == pytest.approx(20.0 / 3)
    assert h["latency_s"]["downlink"] == pytest.approx(25.0)


def test_rounds_3_and_4_staleness_tags_and_a_stranded_driver(trace) -> None:  # type: ignore[no-untyped-def]
    r3, r4 = trace[0][2]["hierarchy"], trace[0][3]["hierarchy"]
    assert trace[0][2]["participants"] == list(C0)
    assert r3["staleness"] == [1] * 6
    assert trace[0][3]["participants"] == list(C1) + list(C1)
    assert r4["staleness"] == [2] * 12
    assert r4["stranded"] == 1
    assert [g["staleness"] for g in r4["regions"]] == [2]


def test_versions_held_and_pruned(trace) -> None:  # type: ignore[no-untyped-def]
    sch = trace[1]
    assert sch.tractor_version.tolist() == [2] * 12
    assert sorted(sch.versions) == [2, 4]  # v3 reached nobody and is forgotten
    assert len(sch.queue) == 0
    assert torch.isfinite(sch.versions[4]).all()
