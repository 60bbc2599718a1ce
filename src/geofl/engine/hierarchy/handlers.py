"""What each event of the hierarchy's simulated clock does (paper 003 §2.2, Alg. 2–3).

:class:`HierarchyEvents` holds the handlers of
:class:`~geofl.engine.hierarchy.scheduler.HierarchicalScheduler` for tractor arrivals,
driver deadlines (driver FedAvg, then on to the next LEO contact), LEO arrivals and relays
(regional FedAvg, LEO → GEO), downlinks (LEO → driver → tractors), and the synchronous
reference that runs every tier at once. The scheduler owns the state (declared here) and the
round; this mixin only reads and updates it.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.components import RunComponents
from geofl.engine.hierarchy.contacts import Contacts, IdealContacts
from geofl.engine.hierarchy.drivers import DriverStations
from geofl.engine.hierarchy.events import (
    Downlink,
    DriverDeadline,
    Event,
    EventQueue,
    LeoArrival,
    Relay,
    SpacePacket,
    TierModel,
    TractorArrival,
    TractorArrivals,
    TractorUpdate,
)
from geofl.engine.hierarchy.links import Chi, SpaceLinks
from geofl.engine.hierarchy.personal import Personalization
from geofl.engine.hierarchy.stats import HierarchyStats
from geofl.engine.hierarchy.tiers import DriverMean, driver_fedavg, leo_regional
from geofl.engine.hierarchy.topology import Topology
from geofl.hierarchy.clusters import DriverMonitor
from geofl.server.tier import FlatTier, Tier

__all__ = ["HierarchyEvents"]

log = logging.getLogger("geofl")


class HierarchyEvents:
    """The clock's event handlers, mixed into the hierarchical scheduler (module docstring).

    The attributes are the scheduler's (set in its ``__init__``, restored from its
    checkpoint).
    """

    c: RunComponents
    cfg: HierarchyConfig
    topo: Topology
    contacts: Contacts
    seed: int
    links: SpaceLinks
    driver_tier: Tier
    leo_tier: Tier
    queue: EventQueue
    monitor: DriverMonitor[TractorUpdate]
    stations: DriverStations
    personal: Personalization | None
    versions: dict[int, torch.Tensor]
    tractor_version: np.ndarray
    cluster_version: np.ndarray
    attempts: np.ndarray
    nqi_lost: np.ndarray
    leo_buffer: list[list[tuple[float, TierModel]]]
    relay_pending: np.ndarray
    geo_inbox: list[tuple[int, TierModel]]
    model_bytes: int
    down_bytes: int
    _stats: HierarchyStats
    _outages: dict[int, np.ndarray]

    def _downlink_opens(self, cluster: int, version: int) -> bool:
        """Whether ``version`` sealed by the GEO for ``cluster``'s driver opens there (the
        LEO relays the envelope; refusals are logged and counted by the links)."""
        return self.links.downlink(self._driver_id(cluster), self.versions[version])

    def _key_uplink(self) -> None:
        """The ground uplink as the tractor → driver hop: each tractor's update sealed for
        its cluster's current driver (003 Eq. 6 with x = driver: the driver opens it and
        re-seals its aggregate for the LEO) with χ's ρ, M, λ beside θ (Alg. 1 l. 6)."""
        up = self.c.uplink
        if up is None:
            return
        n_c = self.topo.clusters.num_clusters
        drivers = [self._driver_id(c) for c in range(n_c)]
        cluster_of = self.topo.clusters.cluster_of
        up.receivers = {k: drivers[int(c)] for k, c in enumerate(cluster_of)}
        up.header = self._chi

    def _chi(self, client: int) -> bytes:
        """Tractor ``client``'s χ fields, packed (:class:`Chi`; 0 where the topology has no
        schema or location)."""
        topo = self.topo
        m = 0 if topo.model_type is None else int(topo.model_type[client])
        lat, lon = (0.0, 0.0) if topo.location is None else topo.location[client].tolist()
        t = int(self.tractor_version[client]) + 1
        return Chi(float(topo.rho[client]), m, lat, lon, t).pack()

    def _driver_id(self, cluster: int) -> int:
        """The node id of ``cluster``'s driver (its tractor; the initial one while every
        member is down)."""
        driver = self.monitor.driver(cluster)
        return int(self.topo.clusters.driver[cluster]) if driver is None else driver

    def _advance(self, until: float, *, inclusive: bool = False) -> None:
        for now, event in self.queue.pop_until(until, inclusive=inclusive):
            self._handle(now, event)

    def _handle(self, now: float, event: Event) -> None:
        if isinstance(event, TractorArrivals):
            self._arrive_all(now, event)
        elif isinstance(event, TractorArrival):
            self._arrive(now, event)
        elif isinstance(event, DriverDeadline):
            self._driver(now, event.cluster)
        elif isinstance(event, LeoArrival):
            self._leo(now, event)
        elif isinstance(event, Relay):
            self._relay(now, event.sat)
        else:
            self._downlink(now, event)

    def _arrive(self, now: float, ev: TractorArrival) -> None:
        self._arrive_all(now, TractorArrivals((ev.cluster,), (ev.update,)))

    def _arrive_all(self, now: float, ev: TractorArrivals) -> None:
        """Each update in order reaches its driver's buffer, unless its tractor went down
        while it was in flight (then it is lost)."""
        down, monitor, stats = self.monitor.down, self.monitor, self._stats
        delivered = 0
        for u in ev.updates:
            if u.client in down:
                log.warning("tractor %d is down; its in-flight update is lost", u.client)
                continue
            monitor.submit(u.client, u)
            delivered += 1
            stats.latency("terrestrial", now - u.created_s)
        stats.hop("tractor_driver", delivered=delivered)

    def _slot(self, now: float) -> int:
        return int(now // self.contacts.slot_s)

    def _round_idx(self, now: float) -> int:
        """The global round whose simulated time holds ``now`` (round t covers
        [(t−1)·round_s, t·round_s))."""
        return int(now // self.cfg.round_s) + 1

    def _cluster_model(self, now: float, cluster: int) -> TierModel | None:
        """Driver FedAvg over the cluster's buffer (None when it is empty or the cluster
        has no driver up; the buffer then waits)."""
        items = self.monitor.drain(cluster)
        if not items:
            return None
        model = driver_fedavg(
            self.driver_tier,
            items,
            cluster=cluster,
            farm=self.topo.farm,
            context_bin=self.topo.context_bin,
            attempts=int(self.attempts[cluster]),
            nqi_lost=int(self.nqi_lost[cluster]),
            now_s=now,
            round_idx=self._round_idx(now),
        )
        self.attempts[cluster] = self.nqi_lost[cluster] = 0
        return model

    def _driver(self, now: float, cluster: int) -> None:
        """Driver FedAvg, then on to the next LEO contact (buffered on the ground until)."""
        model = self._cluster_model(now, cluster)
        if model is None:
            return
        contact = self.stations.contact(now, cluster)
        if contact is None:
            self._stats.hop("driver_leo", sent=1)
            self._stats.stranded += 1
            log.info("cluster %d: no LEO contact left in the plan; model stays buffered", cluster)
            return
        station, slot, sat = contact
        packet = self._send_driver(now, cluster, model, sat)
        self.stations.push_up(now, slot, sat, packet, station)

    def _send_driver(self, now: float, cluster: int, model: TierModel, sat: int) -> SpacePacket:
        """The driver's encoded, sealed upload to LEO ``sat`` (relative to the global version
        the cluster holds), counted on the driver → LEO hop."""
        version = int(self.cluster_version[cluster])
        sender = self._driver_id(cluster)
        p = self.links.driver_send(
            cluster,
            sender,
            model,
            self.versions[version],
            version,
            sat,
            now,
            from_updates=self._averages_updates(model, version),
        )
        self._stats.hop(
            "driver_leo", sent=1, nbytes=p.nbytes, airtime_s=p.airtime_s, energy=p.energy
        )
        return p

    def _averages_updates(self, model: TierModel, version: int) -> bool:
        """Whether the driver sends its average of the tractors' updates as u_c: it sends
        raw float32, and w̄_c − w^{v_c} is exactly that average — a FedAvg driver (no
        robust combiner: a median of models is not the median of updates plus the base)
        whose tractors all trained from w^{v_c} itself (none from a personalized model or
        another global version). A compressing driver keeps u_c = w̄_c − w^{v_c} as 003
        writes it: its 4-bit codec's error dwarfs the subtraction's rounding, and its runs
        stay as they were."""
        return (
            not self.links.compress
            and isinstance(self.driver_tier, FlatTier)
            and isinstance(self.driver_tier.aggregator, DriverMean)
            and self.personal is None
            and all(r == version + 1 for r in model.client_rounds)
        )

    def _leo(self, now: float, ev: LeoArrival) -> None:
        p = ev.packet
        if not self.stations.admit(now, ev.sat, p):  # the pass is full: the driver retries
            self.stations.retry(now, p, self._stats)
            return
        model = self.links.leo_receive(p, self.versions[p.base_version])
        if model is None:  # refused (logged and counted by the links)
            return
        self.leo_buffer[ev.sat].append((now, model))
        self._stats.hop("driver_leo", delivered=1)
        self._stats.event(now, "uplink", leo=ev.sat, cluster=model.clusters[0], station=ev.station)
        self._stats.latency("pass_wait", now - model.created_s)
        if self.relay_pending[ev.sat]:
            return
        slot = self.contacts.next_relay(ev.sat, self._slot(now))
        if slot is not None:
            self.relay_pending[ev.sat] = True
            self.queue.push(max(now, slot * self.contacts.slot_s), Relay(ev.sat))

    def _relay(self, now: float, sat: int) -> None:
        self.relay_pending[sat] = False
        items, self.leo_buffer[sat] = self.leo_buffer[sat], []
        if not items:
            return
        for arrived, _ in items:
            self._stats.latency("relay_wait", now - arrived)
        regional = leo_regional(
            self.leo_tier, [m for _, m in items], now_s=now, round_idx=self._round_idx(now)
        )
        self._stats.event(now, "relay", leo=sat)
        received = self._forward(sat, regional)
        if received is not None:
            self.geo_inbox.append((sat, received))

    def _forward(self, sat: int, regional: TierModel) -> TierModel | None:
        """LEO ``sat`` → GEO: the sealed regional model as the GEO decodes it (None when
        refused), counted on the LEO → GEO hop."""
        p = self.links.leo_send(sat, regional)
        received = self.links.geo_receive(p)
        self._stats.hop(
            "leo_geo",
            sent=1,
            delivered=int(received is not None),
            nbytes=p.nbytes,
            airtime_s=p.airtime_s,
            energy=p.energy,
        )
        return received

    def _sync_tiers(self, now: float) -> list[tuple[int, TierModel]]:
        """The synchronous reference: every arrival, every driver, then the LEOs (cluster
        c → LEO c mod n, as :class:`IdealContacts`), all at ``now``."""
        ideal = IdealContacts(self.contacts.slot_s, self.contacts.n_leo)
        for arrived, ev in self.queue.pop_until(math.inf):
            if isinstance(ev, TractorArrivals):
                self._arrive_all(arrived, ev)
            elif isinstance(ev, TractorArrival):
                self._arrive(arrived, ev)
        by_leo: dict[int, list[TierModel]] = {}
        for c in range(self.topo.clusters.num_clusters):
            m = self._cluster_model(now, c)
            if m is None:
                continue
            sat = ideal.leo_of(c)
            p = self._send_driver(now, c, m, sat)
            got = self.links.leo_receive(p, self.versions[p.base_version])
            if got is not None:
                by_leo.setdefault(sat, []).append(got)
                self._stats.hop("driver_leo", delivered=1)
        stats, n_t, nd = self._stats, len(self.c.clients), self.down_bytes
        out = []
        for sat, ms in sorted(by_leo.items()):
            regional = leo_regional(self.leo_tier, ms, now_s=now, round_idx=self._round_idx(now))
            received = self._forward(sat, regional)
            if received is not None:
                out.append((sat, received))
        stats.hop("geo_leo", sent=len(by_leo), delivered=len(by_leo), nbytes=nd * len(by_leo))
        n_c = self.topo.clusters.num_clusters
        stats.hop("leo_driver", sent=n_c, delivered=n_c, nbytes=nd * n_c)
        stats.hop("driver_tractor", sent=n_t, delivered=n_t, nbytes=self.model_bytes * n_t)
        return out

    def _downlink(self, now: float, ev: Downlink) -> None:
        """``ev.version`` reaches a driver and, over the ground, its members that are up
        and not in an outage; the others keep their last model (§2.1.2(4))."""
        stats = self._stats
        stats.hop("leo_driver", sent=1, nbytes=self.down_bytes)
        stats.event(now, "downlink", leo=ev.sat, cluster=ev.cluster, station=ev.station)
        if not self._downlink_opens(ev.cluster, ev.version):
            return  # refused: the driver keeps its last model
        stats.hop("leo_driver", delivered=1)
        stats.latency("downlink", now - ev.version * self.cfg.round_s)
        if ev.version <= self.cluster_version[ev.cluster]:
            return  # an older model overtaken by a newer one
        self.cluster_version[ev.cluster] = ev.version
        outage = self._outage(int(now // self.cfg.round_s) + 1)
        down = self.monitor.down
        for k in self.topo.clusters.members[ev.cluster]:
            stats.hop("driver_tractor", sent=1)
            if k in down or outage[k]:
                stats.missed_downlink += 1
                continue
            stats.hop("driver_tractor", delivered=1, nbytes=self.model_bytes)
            if ev.version > self.tractor_version[k]:
                self.tractor_version[k] = ev.version
                if self.personal is not None:
                    self.personal.adopt(k, ev.version, self.versions[ev.version])

    def _outage(self, round_idx: int) -> np.ndarray:
        """``[T]`` terrestrial outages of ``round_idx``: the uplink's link states (the same
        draw its ``begin_round`` makes), none without an uplink."""
        if round_idx not in self._outages:
            up = self.c.uplink
            n = len(self.c.clients)
            self._outages = {
                round_idx: np.zeros(n, dtype=bool)
                if up is None
                else up.drawn_links(round_idx, self.seed).outage
            }
        return self._outages[round_idx]
