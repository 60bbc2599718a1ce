"""Issue 32 item 8, the rest of paper 003 §2: (a) a pass that refuses a driver's upload (too
short, or full) leaves it with the driver, which retries it at its next pass under a
bounded retry policy (§2.2.9, §2.3.1); (b) the tractor → driver envelope is keyed to the
driver (Eq. 6, x = driver), not the server; (c) the tiers' bookkeeping and the tractors'
ρ, M, λ are sealed with the payloads and counted in their bytes. Checked by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.config.uplink import UplinkConfig
from geofl.engine.hierarchy import links as wire
from geofl.engine.hierarchy.contacts import IdealContacts
from geofl.engine.hierarchy.drivers import DriverStations
from geofl.engine.hierarchy.events import EventQueue, LeoArrival, SpacePacket, TierModel
from geofl.engine.hierarchy.links import SpaceLinks
from geofl.engine.hierarchy.stats import HierarchyStats
from geofl.engine.uplink.ground import SERVER_ID, Uplink, link_bytes
from geofl.hierarchy.clusters import Clusters, DriverMonitor
from geofl.network.spacelink import SpaceLinkParams
from geofl.security.envelope import OVERHEAD_BYTES

DIM = 4


def _model(cluster: int, clients: tuple[int, ...]) -> TierModel:
    n = len(clients)
    return TierModel(
        torch.arange(DIM, dtype=torch.float32) + cluster,
        torch.ones(DIM),
        1,
        10 * n,
        clients,
        frozenset({0}),
        (3,) * n,
        n,
        0,
        (cluster,),
        0.0,
        (1.0 / n,) * n,
        (1,) * n,
        (0.0,) * n,
    )


def _links(**cfg: object) -> SpaceLinks:
    params = SpaceLinkParams(compress=False, **cfg)  # type: ignore[arg-type]
    return SpaceLinks(params, compress=False, dim=DIM, n_tractors=2, n_leo=1, seed=1)


def _send(links: SpaceLinks, cluster: int, clients: tuple[int, ...] = (0,)) -> SpacePacket:
    base = torch.zeros(DIM)
    return links.driver_send(cluster, cluster, _model(cluster, clients), base, 0, 0, 0.0)


# -- (c) the space hops' bookkeeping is sealed, counted and what the receiver uses ----------
def test_driver_bookkeeping_is_sealed_and_counted_per_tractor() -> None:
    links = _links()
    one, three = _send(links, 0, (0,)), _send(links, 0, (0, 1, 2))
    assert one.frames[0] == wire.pack_meta(_model(0, (0,)))  # the first frame, sealed
    assert one.nbytes == sum(len(w) for w in one.wires)
    assert len(one.frames[0]) == 40 + 28 + 4 + 4  # head, 1 tractor, 1 farm, 1 cluster
    assert three.nbytes - one.nbytes == 2 * 28  # 28 bytes per further tractor


def test_the_leo_and_geo_aggregate_the_bookkeeping_they_opened() -> None:
    links = _links()
    p = _send(links, 0, (0, 1))
    forged = replace(p, meta=replace(p.meta, clients=(7,), num_samples=1))  # the clear copy
    got = links.leo_receive(forged, torch.zeros(DIM))
    assert got is not None and got.clients == (0, 1) and got.num_samples == 20
    up = links.leo_send(0, replace(_model(0, (0, 1)), created_s=5.0))
    at_geo = links.geo_receive(replace(up, meta=replace(up.meta, farms=frozenset({9}))))
    assert at_geo is not None and at_geo.farms == frozenset({0}) and at_geo.created_s == 5.0
    assert up.nbytes == (len(up.frames[0]) + OVERHEAD_BYTES) + len(up.wires[1])


# -- (a) a full pass: retried at the next pass, bounded by R_max and the retry queue --------
def _stations(links: SpaceLinks) -> DriverStations:
    clusters = Clusters(((0,), (1,)), (0, 1), np.array([0, 1]))
    monitor: DriverMonitor[object] = DriverMonitor(clusters, np.ones(2), seed=1)
    return DriverStations(
        IdealContacts(30.0, 1), monitor, EventQueue(), links, round_s=3600.0, down_bytes=0
    )


def _full_pass(**cfg: object) -> tuple[DriverStations, SpacePacket, SpacePacket]:
    airtime = _send(_links(), 0).airtime_s  # both uploads have this airtime
    links = _links(pass_s=1.5 * airtime, **cfg)  # the pass holds one upload, not two
    return _stations(links), _send(links, 0), _send(links, 1)


def test_a_full_pass_refuses_the_second_upload_which_is_retried_next_pass() -> None:
    st, first, second = _full_pass()
    stats = HierarchyStats()
    assert st.admit(0.0, 0, first) and not st.admit(0.0, 0, second)
    st.retry(0.0, second, stats)
    [(at, ev)] = st.queue.pending()
    assert at == 30.0 and isinstance(ev, LeoArrival)  # the next slot's pass
    assert ev.packet.tries == 1 and ev.packet.frames == second.frames
    assert stats.sent["driver_leo"] == 1 and stats.bytes["driver_leo"] == ev.packet.nbytes
    assert st.links.take_rejections() == {"driver_leo": {"pass full: retried": 1}}
    assert st.admit(30.0, 0, ev.packet)  # a fresh pass has room


def test_a_refused_upload_is_dropped_after_r_max_retries() -> None:
    st, _, second = _full_pass(max_retries=2)
    st.retry(0.0, replace(second, tries=2), HierarchyStats())
    assert st.queue.pending() == []
    assert st.links.take_rejections() == {
        "driver_leo": {"pass full: dropped, retries exhausted": 1}
    }


def test_a_refused_upload_is_dropped_when_the_retry_queue_is_full() -> None:
    st, _, second = _full_pass(retry_queue=1)
    st.queue.push(60.0, LeoArrival(0, _send(st.links, 1)))  # a fresher one waits already
    st.retry(0.0, second, HierarchyStats())
    assert len(st.queue.pending()) == 1
    assert st.links.take_rejections() == {"driver_leo": {"pass full: dropped, queue full": 1}}


# -- (b) tractor → driver keyed to the driver; (c) χ sealed and counted ----------------------
def _uplink() -> Uplink:
    cfg = UplinkConfig(
        fixed_pipeline="raw",  # type: ignore[arg-type]
        network={"p_fail": 0.0},  # type: ignore[arg-type]
        checkpoint={"tau_cos": 0.0},  # type: ignore[arg-type]
    )
    up = Uplink(cfg, 2, seed=1)
    up.begin_round(1)
    return up


def test_the_uplink_seals_for_the_receiver_it_is_given() -> None:
    up = _uplink()
    up.receivers = {0: 1}  # tractor 0's driver is tractor 1
    assert up.transmit(torch.ones(DIM), 0).values is not None
    assert up.transmit(torch.ones(DIM), 1).values is not None  # no receiver given: the server
    assert set(up.sealers) == {(0, 1), (1, SERVER_ID)} and set(up.openers) == {1, SERVER_ID}


def test_chi_rides_sealed_in_the_tractors_upload_and_is_counted() -> None:
    plain, with_chi = _uplink(), _uplink()
    chi = wire.Chi(0.7, 2, 42.0, -93.6, 5)
    with_chi.header = lambda k: chi.pack()
    a, b = plain.transmit(torch.ones(DIM), 0), with_chi.transmit(torch.ones(DIM), 0)
    assert b.header is not None and wire.Chi.unpack(b.header) == chi
    assert link_bytes(b) - link_bytes(a) == 32 + OVERHEAD_BYTES
    assert torch.equal(a.values, b.values)  # type: ignore[arg-type]


def test_the_hierarchy_keys_every_tractor_upload_to_its_driver(tmp_path: Path) -> None:
    uplink = {"network": {"p_fail": 0.0}, "checkpoint": {"tau_cos": 0.0}}
    raw = agri_raw({"mode": "sync", "staleness_metric": False}, rounds=1, uplink=uplink)
    run = make_run(config(tmp_path, raw), tmp_path / "out")
    run.scheduler.round(run.init_params, 1)
    up, drivers = run.comps.uplink, run.scheduler.topo.clusters.driver  # type: ignore[union-attr]
    assert up is not None and SERVER_ID not in up.openers
    assert up.openers and set(up.openers) <= set(drivers)  # opened by drivers only
    cluster_of = run.scheduler.topo.clusters.cluster_of  # type: ignore[union-attr]
    assert all(r == drivers[int(cluster_of[k])] for k, r in up.sealers)


@pytest.mark.slow
def test_a_pass_too_short_for_any_upload_retries_each_once_then_drops_it(tmp_path: Path) -> None:
    """Async, ideal contacts (every cluster reaches LEO 0 in every 30 s slot), passes of
    1 µs: every driver upload is refused, retried once at the next slot, refused again and
    dropped (R_max = 1); nothing reaches the GEO."""
    links = {"compress": False, "pass_s": 1e-6, "max_retries": 1}
    hier = {
        "staleness_metric": False,
        "leo": {"contacts": "ideal", "n": 1, "planes": 1},
        "links": links,
    }
    run = make_run(config(tmp_path, agri_raw(hier, rounds=1)), tmp_path / "out")
    out = run.scheduler.round(run.init_params, 1)
    h = out.record.hierarchy
    assert h is not None and out.record.status.value == "no_updates"
    n_c = run.scheduler.topo.clusters.num_clusters  # type: ignore[union-attr]
    assert h["sent"]["driver_leo"] == 2 * n_c and "driver_leo" not in h["delivered"]
    assert h["envelope_rejections"]["driver_leo"] == {
        "pass full: retried": n_c,
        "pass full: dropped, retries exhausted": n_c,
    }
