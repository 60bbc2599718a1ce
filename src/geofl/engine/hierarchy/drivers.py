"""The ground stations of the space hops: every driver → LEO upload and LEO → driver
downlink of a cluster goes through the passes of the tractor driving it *now* (003 §2.3.2,
§2.1.6).

A driver aggregates its cluster, encodes and seals the upload, and waits on the ground for
its next usable pass; the GEO's model waits on board for a pass over the driver. When a
health check replaces a driver (a failure, or a member back in a cluster that had none),
what the cluster was waiting for moves to the new driver at that instant: its pending
uploads (the encoded frames, handed over like the update buffer and the codec residual,
§2.1.6) are re-sealed under the new driver's link key and take its next usable pass, and
its pending downlinks the new driver's first contact with a LEO that holds the model —
both from the new driver's own contact plan, computed at its election
(:class:`~geofl.network.stations.StationContacts`). A cluster with no driver keeps its
models on the ground until a member is back and elected; its members miss downlinks.
Every move is recorded (:attr:`HierarchyStats.driver_changes`).

A pass has a finite length (``links.pass_s``: the seconds of a contact slot in which a LEO
receives uploads, shared by the drivers sending to it then). An upload whose airtime no
longer fits is refused by the LEO; the driver keeps it and retries it at its next usable
pass (003 §2.2.9: "retransmission of stored models during subsequent contact windows"),
re-sealed for that pass's LEO and counted again on the hop — at most R_max times
(``links.max_retries``), and only while fewer than ``links.retry_queue`` of the cluster's
uploads wait for a pass; otherwise it is dropped, superseded by fresher ones (§2.3.1:
"retried up to R_max times and then superseded by fresher updates").
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from geofl.engine.hierarchy.contacts import (
    Contacts,
    downlink_contact,
    downlink_slots,
    leo_holdings,
)
from geofl.engine.hierarchy.events import (
    Downlink,
    EventQueue,
    LeoArrival,
    SpacePacket,
    TractorUpdate,
)
from geofl.engine.hierarchy.links import SpaceLinks
from geofl.engine.hierarchy.stats import HierarchyStats
from geofl.hierarchy.clusters import DriverMonitor, Failover

__all__ = ["DriverStations"]

log = logging.getLogger("geofl")


class DriverStations:
    """Uploads and downlinks through each cluster's current driver (module docstring).

    Args:
        contacts: The contact model (station = driver tractor).
        monitor: The drivers (who drives each cluster now).
        queue: The scheduler's event queue (shared).
        links: The space hops' codec and envelopes (re-sealing a handed-over upload).
        round_s: Simulated seconds per round (global model v is released at v·round_s).
        down_bytes: Bytes of one GEO → LEO transmission (hop counters).
    """

    def __init__(
        self,
        contacts: Contacts,
        monitor: DriverMonitor[TractorUpdate],
        queue: EventQueue,
        links: SpaceLinks,
        *,
        round_s: float,
        down_bytes: int,
    ) -> None:
        self.contacts, self.monitor, self.queue, self.links = contacts, monitor, queue, links
        self.round_s, self.down_bytes = round_s, down_bytes
        n_c = monitor.clusters.num_clusters
        self.ground: list[list[SpacePacket]] = [[] for _ in range(n_c)]
        self.used: dict[tuple[int, int], float] = {}  # (LEO, slot) → airtime received

    def _slot(self, now: float) -> int:
        return int(now // self.contacts.slot_s)

    def contact(self, now: float, cluster: int) -> tuple[int, int, int] | None:
        """``(driver, slot, sat)``: the current driver's next usable pass at or after
        ``now``; None when the cluster has no driver or its plan has no pass left."""
        station = self.monitor.driver(cluster)
        if station is None:
            return None
        got = self.contacts.next_contact(cluster, station, self._slot(now))
        return None if got is None else (station, got[0], got[1])

    def push_up(self, now: float, slot: int, sat: int, packet: SpacePacket, station: int) -> None:
        """``packet`` reaches LEO ``sat`` in slot ``slot``'s pass over ``station``."""
        at = max(now, slot * self.contacts.slot_s)
        self.queue.push(at, LeoArrival(sat, packet, station))

    def admit(self, now: float, sat: int, packet: SpacePacket) -> bool:
        """Whether LEO ``sat`` receives ``packet`` in the pass at ``now``: its airtime fits
        what is left of the slot's ``links.pass_s`` (always when unset); an admitted upload
        takes its share of the pass."""
        cap = self.links.cfg.pass_s
        if cap is None:
            return True
        slot = self._slot(now)
        self.used = {k: v for k, v in self.used.items() if k[1] >= slot}
        used = self.used.get((sat, slot), 0.0)
        if used + packet.airtime_s > cap:
            return False
        self.used[(sat, slot)] = used + packet.airtime_s
        return True

    def retry(self, now: float, packet: SpacePacket, stats: HierarchyStats) -> None:
        """A refused upload: re-sent in the cluster's next usable pass after this slot, or
        dropped past R_max retries or a full retry queue (module docstring)."""
        cfg, cluster = self.links.cfg, packet.meta.clusters[0]
        waiting = sum(
            isinstance(e, LeoArrival) and e.packet.meta.clusters[0] == cluster
            for _, e in self.queue.pending()
        )
        why = "retries exhausted" if packet.tries >= cfg.max_retries else "queue full"
        if packet.tries >= cfg.max_retries or waiting >= cfg.retry_queue:
            self.links.count("driver_leo", f"pass full: dropped, {why}")
            log.info("cluster %d: upload refused by a full pass and dropped (%s)", cluster, why)
            return
        self.links.count("driver_leo", "pass full: retried")
        if self.monitor.driver(cluster) is None:  # kept until a member is elected
            self.ground[cluster].append(replace(packet, tries=packet.tries + 1))
            return
        got = self.contact((self._slot(now) + 1) * self.contacts.slot_s, cluster)
        if got is None:
            stats.stranded += 1
            return
        station, slot, sat = got
        again = replace(self.links.reseal(packet, station, sat), tries=packet.tries + 1)
        stats.hop(
            "driver_leo",
            sent=1,
            nbytes=again.nbytes,
            airtime_s=again.airtime_s,
            energy=again.energy,
        )
        self.push_up(now, slot, sat, again, station)

    def _resend_up(
        self, now: float, cluster: int, packet: SpacePacket, stats: HierarchyStats
    ) -> None:
        """A handed-over upload: re-sealed by the current driver for its next usable pass
        (kept on the ground while the cluster has no driver; stranded past the plan)."""
        if self.monitor.driver(cluster) is None:
            self.ground[cluster].append(packet)
            return
        got = self.contact(now, cluster)
        if got is None:
            stats.stranded += 1
            log.info("cluster %d: no LEO contact left in its new driver's plan", cluster)
            return
        station, slot, sat = got
        self.push_up(now, slot, sat, self.links.reseal(packet, station, sat), station)

    def schedule_downlink(self, version: int, now: float, stats: HierarchyStats) -> None:
        """GEO → every LEO at its next relay slot → each driver at its first contact with a
        LEO that already holds ``version`` (:func:`downlink_slots`)."""
        n_leo, slot_s = self.contacts.n_leo, self.contacts.slot_s
        drivers = self.monitor.drivers
        slots, relayed = downlink_slots(self.contacts, drivers, now)
        stats.hop("geo_leo", sent=n_leo, delivered=relayed, nbytes=self.down_bytes * n_leo)
        for c, got in enumerate(slots):
            d = drivers[c]
            if d is None:
                stats.missed_downlink += len(self.monitor.clusters.members[c])
            elif got is not None:
                self.queue.push(max(now, got[0] * slot_s), Downlink(c, version, d, got[1]))

    def _resend_down(self, now: float, cluster: int, version: int, stats: HierarchyStats) -> None:
        station = self.monitor.driver(cluster)
        if station is None:
            stats.missed_downlink += len(self.monitor.clusters.members[cluster])
            return
        held = leo_holdings(self.contacts, version * self.round_s)
        got = downlink_contact(self.contacts, cluster, station, held, self._slot(now))
        if got is not None:
            at = max(now, got[0] * self.contacts.slot_s)
            self.queue.push(at, Downlink(cluster, version, station, got[1]))

    def follow(
        self,
        before: tuple[int | None, ...],
        failovers: tuple[Failover, ...],
        round_idx: int,
        now: float,
        stats: HierarchyStats,
    ) -> None:
        """After a health check at ``now``: record every cluster whose driver changed from
        ``before`` and move its pending uploads and downlinks to the new driver."""
        after = self.monitor.drivers
        changed = [c for c, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        if not changed:
            return
        failed = {f.cluster for f in failovers}
        which = set(changed)
        moved = self.queue.take(
            lambda e: (
                (isinstance(e, LeoArrival) and e.packet.meta.clusters[0] in which)
                or (isinstance(e, Downlink) and e.cluster in which)
            )
        )
        downs = dict.fromkeys(changed, 0)
        for _, ev in moved:
            if isinstance(ev, LeoArrival):
                self.ground[ev.packet.meta.clusters[0]].append(ev.packet)
            elif isinstance(ev, Downlink):
                downs[ev.cluster] += 1
                self._resend_down(now, ev.cluster, ev.version, stats)
        for c in changed:
            held, self.ground[c] = self.ground[c], []
            for packet in held:
                self._resend_up(now, c, packet, stats)
            stats.driver_changes.append(
                {
                    "round": round_idx,
                    "at_s": now,
                    "cluster": c,
                    "old": before[c],
                    "new": after[c],
                    "cause": "failover" if c in failed else "recovery",
                    "uplinks_moved": len(held),
                    "downlinks_moved": downs[c],
                }
            )

    def state_dict(self) -> dict[str, Any]:
        """Driver models kept on the ground by clusters without a driver; the airtime
        received in the current passes."""
        return {"ground": [list(g) for g in self.ground], "used": dict(self.used)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.ground = [list(g) for g in state["ground"]]
        self.used = dict(state.get("used", {}))
