"""The event-driven space-assisted hierarchy of paper 003 (§2.2, Alg. 2–3, §2.3.1–2.3.4).

Global round t covers simulated time [(t−1)·round_s, t·round_s). At its start the sampled
tractors train — the same :func:`~geofl.client.step.client_step` through the same store,
program, uplink and validation as :class:`~geofl.engine.scheduler.SyncScheduler` — each
from the global model version it holds, so its update is tagged t' = version + 1 (staleness
at the GEO is t − t'). Then a simulated clock (:mod:`geofl.engine.hierarchy.events`) carries:

* tractor → driver over the ground uplink when the method has one (its latency, outages and
  NQI gate; what is not delivered stays buffered on the tractor), else at once;
* driver FedAvg ``driver_deadline_s`` into the round over what arrived (drivers' health,
  failures and re-election with the buffer handed over: §2.1.6);
* driver → LEO in the next usable contact slot of the cluster's current driver (buffered on
  the ground until then; after a re-election, re-sealed for the new driver's passes:
  :mod:`geofl.engine.hierarchy.drivers`): the driver's update relative to the global
  version it holds, top-k + 4-bit with error feedback, in staleness-tagged frames, sealed
  (:mod:`geofl.engine.hierarchy.links`);
* LEO → GEO at the LEO's next relay slot, where the LEO opens and decodes its buffer and
  aggregates it (redundancy filter + regional FedAvg, Alg. 3 l. 2–5; buffered on board
  until then) and sends the regional model sealed;
* GEO aggregation at the end of the round over the regional models received since the last
  one (Eq. 8 × Eq. 11, normalised Eq. 12; RobustAvg §2.2.5);
* downlink GEO → LEO (next relay slot) → driver (next contact with a LEO that holds it) →
  tractors; a tractor in an outage keeps its last model (§2.1.2(4)); the model goes down
  as raw float32 sealed end to end for the driver (a refused one is not adopted).

``mode: sync`` is the synchronous reference: every tier in one round from the current model,
staleness 0; the asynchronous mode with :class:`IdealContacts` reproduces it bit for bit.
Every random draw comes from generators keyed by (seed, round, tractor/cluster, purpose).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from geofl.client.batched import collections_paused
from geofl.config.hierarchy import HierarchyConfig
from geofl.engine.components import RunComponents
from geofl.engine.hierarchy.contacts import Contacts
from geofl.engine.hierarchy.drivers import DriverStations
from geofl.engine.hierarchy.events import (
    Downlink,
    DriverDeadline,
    EventQueue,
    LeoArrival,
    TierModel,
    TractorArrivals,
    TractorUpdate,
)
from geofl.engine.hierarchy.geo import (
    GeoResult,
    GeoStrategy,
    RobustAvgGeo,
    geo_batch,
    tractor_side,
)
from geofl.engine.hierarchy.handlers import HierarchyEvents
from geofl.engine.hierarchy.links import Chi, SpaceLinks, driver_compresses
from geofl.engine.hierarchy.personal import Personalization
from geofl.engine.hierarchy.stats import HierarchyStats, credit_regionals, parking_suggestion
from geofl.engine.hierarchy.tiers import driver_tier, leo_tier
from geofl.engine.hierarchy.topology import Topology
from geofl.engine.records.round import build_record
from geofl.engine.scheduler import ClientRunner, Collected, RoundOutcome, SyncScheduler
from geofl.engine.uplink.ground import Transmission, TransmitStatus, link_bytes
from geofl.errors import AggregationError
from geofl.hashing import params_sha256, update_set_sha256
from geofl.hierarchy.clusters import DriverMonitor
from geofl.hierarchy.geography import geo_coverage
from geofl.network.payload import encode_raw
from geofl.records import RoundRecord, RoundStatus
from geofl.security.envelope import OVERHEAD_BYTES
from geofl.server.sampling import Cohort

__all__ = ["HierarchicalScheduler"]


log = logging.getLogger("geofl")

_NQI_LOST = (TransmitStatus.SKIPPED, TransmitStatus.OUTAGE)


class HierarchicalScheduler(HierarchyEvents):
    """Tractor → driver → LEO → GEO on a simulated clock (module docstring).

    Args:
        comps: The run's components (client step, store, uplink, sampler).
        cfg: ``method.hierarchy``.
        topology: Clusters, drivers' ρ, farms and context bins of the tractors.
        contacts: Contact windows (a cluster's station is its current driver tractor) and
            relay slots.
        seed: Experiment seed.
        allowed: The permission gate ``allowed(client, round)``.
        probe: ``(name, fn)``: ``fn(params)`` is the test-split value of metric ``name``
            of a flat parameter vector; every regional model the GEO incorporates is
            evaluated with it for Table 10's metric per staleness bucket (reporting only:
            nothing feeds back into training). None: not measured.
        geo: The GEO step (:mod:`geofl.engine.hierarchy.geo`); None: the paper's
            RobustAvg GEO with ``cfg``'s κ, C, β and fairness.
    """

    def __init__(
        self,
        comps: RunComponents,
        cfg: HierarchyConfig,
        topology: Topology,
        contacts: Contacts,
        *,
        seed: int,
        allowed: Callable[[int, int], bool] = lambda c, r: True,
        probe: tuple[str, Callable[[torch.Tensor], float]] | None = None,
        geo: GeoStrategy | None = None,
    ) -> None:
        self.probe = probe
        self.driver_tier, self.leo_tier = driver_tier(cfg), leo_tier(cfg)
        self.geo: GeoStrategy = geo or RobustAvgGeo(
            kappa=cfg.kappa,
            clip=cfg.clip,
            trim_fraction=cfg.trim_fraction,
            fairness=cfg.fairness,
        )
        self.sync = SyncScheduler(tractor_side(comps, self.geo), seed=seed, allowed=allowed)
        self.c, self.cfg, self.topo, self.contacts = comps, cfg, topology, contacts
        self.seed = seed
        self.previous_aggregate: torch.Tensor | None = None
        self._geo_error: str | None = None  # why this round's GEO step failed
        n_t, n_c = len(comps.clients), topology.clusters.num_clusters
        dim = comps.workspace.spec.numel
        self.model_bytes = dim * 4  # driver → tractor (the ground downlink)
        sealed = cfg.links.security.enabled
        # GEO → LEO → driver: raw float32 in an envelope
        self.down_bytes = len(encode_raw(torch.zeros(dim))[0]) + (OVERHEAD_BYTES if sealed else 0)
        uplink_cfg = None if comps.uplink is None else comps.uplink.cfg
        self.links = SpaceLinks(
            cfg.links,
            compress=driver_compresses(cfg.links, uplink_cfg),
            dim=dim,
            n_tractors=n_t,
            n_leo=contacts.n_leo,
            seed=seed,
            send_delta=cfg.geo_delta == "update",
        )
        self.queue = EventQueue()
        self.versions: dict[int, torch.Tensor] = {}
        self.tractor_version = np.zeros(n_t, dtype=np.int64)
        self.cluster_version = np.zeros(n_c, dtype=np.int64)
        self.monitor: DriverMonitor[TractorUpdate] = DriverMonitor(
            topology.clusters, topology.rho, seed=seed, p_fail=cfg.p_driver_fail
        )
        self.stations = DriverStations(
            contacts,
            self.monitor,
            self.queue,
            self.links,
            round_s=cfg.round_s,
            down_bytes=self.down_bytes,
        )
        self.attempts = np.zeros(n_c, dtype=np.int64)
        self.nqi_lost = np.zeros(n_c, dtype=np.int64)
        # simulated time of each tractor's last delivery (0: the run's start)
        self.last_ok_s = np.zeros(n_t)
        n_leo = contacts.n_leo
        self.leo_buffer: list[list[tuple[float, TierModel]]] = [[] for _ in range(n_leo)]
        self.relay_pending = np.zeros(n_leo, dtype=bool)
        self.geo_inbox: list[tuple[int, TierModel]] = []
        self._stats = HierarchyStats()
        self._outages: dict[int, np.ndarray] = {}
        self.personal: Personalization | None = None
        if cfg.personalization is not None:
            if topology.region is None:
                raise ValueError("personalization needs the tractors' regions (topology.region)")
            self.personal = Personalization(cfg.personalization, topology.region)

    @property
    def runner(self) -> ClientRunner | None:
        """Where the tractors' client steps run (``federation.workers`` worker processes,
        :class:`~geofl.engine.workers.ClientWorkers`); None: in this process. It is the
        synchronous scheduler's, whose :meth:`~SyncScheduler.collect` runs them: each job
        carries the model version its tractor holds, so the run is bit-identical to one
        worker whichever process trains which tractor."""
        return self.sync.runner

    @runner.setter
    def runner(self, runner: ClientRunner | None) -> None:
        self.sync.runner = runner

    # ---------------------------------------------------------------- one round
    def round(self, global_params: torch.Tensor, round_idx: int) -> RoundOutcome:
        """Round ``round_idx`` from the GEO's model ``global_params`` (``[D]``), with the
        cyclic garbage collector held off (:func:`collections_paused`)."""
        with collections_paused():
            return self._round(global_params, round_idx)

    def _round(self, global_params: torch.Tensor, round_idx: int) -> RoundOutcome:
        t0_wall = time.perf_counter()
        start, end = self._begin_round(global_params, round_idx)
        stats = self._stats
        cohort = self.sync.cohort(round_idx)
        excluded = [k for k in cohort.clients if not self.sync.allowed(k, round_idx)]
        down = self.monitor.down
        trained = [k for k in cohort.clients if k not in excluded and k not in down]
        stats.down = len(down)
        t_train0 = time.perf_counter()
        got = self.sync.collect(global_params, trained, round_idx, held=self._held)
        t_train = time.perf_counter()
        self._upload(got, round_idx, start)
        regionals = self._run_tiers(round_idx, start, end)
        t_agg = time.perf_counter()
        params, geo = self._geo_step(global_params, regionals, round_idx, end)
        self._prune()
        stats.rejections = self.links.take_rejections()
        regional_metric = None
        if self.probe is not None and geo is not None:
            stats.metric = self.probe[0]
            regional_metric = [self.probe[1](m.model) for _, m in regionals]
        record = self._record(
            round_idx, cohort, excluded, got, regionals, geo, params, end, regional_metric
        )
        t1 = time.perf_counter()
        record.time_s.update(
            train=t_train - t_train0,  # client steps and the ground uplink
            clock=t_agg - t_train,  # events: drivers, passes, relays
            aggregate=t1 - t_agg,  # GEO, downlink scheduling, record
            total=t1 - t0_wall,
        )
        return RoundOutcome(params, record)

    def _record(
        self,
        round_idx: int,
        cohort: Cohort,
        excluded: list[int],
        got: Collected,
        regionals: list[tuple[int, TierModel]],
        geo: GeoResult | None,
        params: torch.Tensor,
        end_s: float,
        regional_metric: list[float] | None,
    ) -> RoundRecord:
        """The round's record (:func:`~geofl.engine.records.round.build_record`):
        participants are the tractors whose updates the GEO incorporated this round, each
        with its share of the GEO update (GEO weight × regional share); training figures
        are those of the updates sent this round; the ``hierarchy`` block holds
        :class:`HierarchyStats` (``end_s``: simulated time of the GEO aggregation;
        ``regional_metric``: the test metric of every regional model, which each of its
        updates carries into ``update_metric`` for Table 10); ``strategy`` holds what the
        GEO strategy reported (e.g. DUAL-SHIELD's CGF scores)."""
        stats = self._stats
        participants: list[int] = []
        weights: list[float] = []
        if geo is not None:
            participants, weights = credit_regionals(
                geo, regionals, stats, round_idx, end_s, regional_metric
            )
        deltas = torch.stack([m.model for _, m in regionals]) if regionals else torch.zeros(0, 1)
        return build_record(
            round_idx,
            cohort,
            excluded,
            got,
            status=self._status(geo),
            aggregation_error=self._geo_error,
            participants=participants,
            weights=weights,
            primary=self.c.task.primary_metric,
            lr=self.sync.lr(round_idx),
            uplink=self.c.uplink,
            bytes_down=int(stats.bytes["driver_tractor"]),
            strategy={} if geo is None else dict(geo.info),
            hierarchy=stats.to_json(),
            model_sha256=params_sha256(params),
            update_set_sha256=update_set_sha256([s for s, _ in regionals], deltas),
        )

    def _status(self, geo: GeoResult | None) -> RoundStatus:
        if geo is not None:
            return RoundStatus.AGGREGATED
        failed = self._geo_error is not None
        return RoundStatus.AGGREGATION_FAILED if failed else RoundStatus.NO_UPDATES

    def _begin_round(self, global_params: torch.Tensor, round_idx: int) -> tuple[float, float]:
        """Fresh round statistics, the drivers' health check and failovers (§2.1.6), and in
        the asynchronous mode the downlinks arriving at the round's start; returns the
        round's simulated ``(start, end)`` in seconds."""
        self._stats = stats = HierarchyStats()
        if self.cfg.suggest_after_s is not None:
            stats.parking = []
        self.versions.setdefault(round_idx - 1, global_params.clone())
        self.links.begin_round(round_idx)
        start, end = (round_idx - 1) * self.cfg.round_s, round_idx * self.cfg.round_s
        before = self.monitor.drivers
        failovers = self.monitor.health_check(round_idx)
        for f in failovers:
            stats.failovers.append(
                {
                    "cluster": f.cluster,
                    "failed": f.failed,
                    "driver": f.driver,
                    "handed_over": f.handed_over,
                    "residual_handed_over": f.cluster in self.links.residual,
                }
            )
        self.stations.follow(before, failovers, round_idx, start, stats)
        self._key_uplink()  # tractors seal for the drivers of this round
        if self.cfg.mode == "async":
            self._advance(start, inclusive=True)  # downlinks arriving at the boundary
        return start, end

    def _run_tiers(self, round_idx: int, start: float, end: float) -> list[tuple[int, TierModel]]:
        """The ``(LEO, regional model)`` pairs the GEO received this round: every tier at
        the driver deadline in the synchronous reference, else the clock run to ``end``."""
        if self.cfg.mode == "sync":
            return self._sync_tiers(start + self.cfg.driver_deadline_s)
        for c in range(self.topo.clusters.num_clusters):
            self.queue.push(start + self.cfg.driver_deadline_s, DriverDeadline(c, round_idx))
        self._advance(end)
        regionals, self.geo_inbox = self.geo_inbox, []
        return regionals

    def _geo_step(
        self,
        global_params: torch.Tensor,
        regionals: list[tuple[int, TierModel]],
        round_idx: int,
        end: float,
    ) -> tuple[torch.Tensor, GeoResult | None]:
        """GEO aggregation over ``regionals`` (sorted here in place by LEO, then creation
        time) by the GEO strategy (:attr:`geo`: Eq. 8 × Eq. 11, normalised Eq. 12, then
        RobustAvg or the method's server side), the new version published,
        and its way down: adopted at once in the synchronous reference, else scheduled."""
        params, geo = global_params, None
        self._geo_error = None
        if regionals:
            regionals.sort(key=lambda item: (item[0], item[1].created_s))
            batch = geo_batch(global_params, regionals, geo_delta=self.cfg.geo_delta)
            try:
                geo = self.geo.step(round_idx, global_params, batch)
            except AggregationError as err:  # e.g. fewer regional models than Krum needs
                log.warning("round %d: GEO: %s; global model unchanged", round_idx, err)
                self._geo_error = str(err)
                geo = None
        if geo is not None:
            params = geo.params
            self._stats.event(end, "geo")
            self._stats.geo = self._coverage([m.clients for _, m in regionals])
        self.versions[round_idx] = params
        if self.personal is not None and geo is not None:
            self.personal.publish(round_idx, params, [m for _, m in regionals])
        if self.cfg.mode == "sync":
            self._adopt_all(round_idx, params if geo is not None else None)
        elif geo is not None:
            self.stations.schedule_downlink(round_idx, end, self._stats)
        return params, geo

    def _coverage(self, clients: list[tuple[int, ...]]) -> dict[str, Any]:
        """The GEO step's regional models, regions, farms and trim (the record's ``geo``)."""
        region = self.topo.region if self.topo.region is not None else np.zeros_like(self.topo.farm)
        return geo_coverage(
            clients, region, self.topo.farm, trim_fraction=self.cfg.trim_fraction
        ).to_json()

    def _held(self, client: int) -> torch.Tensor:
        """The model tractor ``client`` trains from: its personalized model, or the global
        model version it holds."""
        own = None if self.personal is None else self.personal.held(client)
        return own if own is not None else self.versions[int(self.tractor_version[client])]

    def _adopt_all(self, version: int, params: torch.Tensor | None) -> None:
        """The synchronous reference's downlink: every tractor holds ``version`` now
        (personalized when the method personalizes and the GEO updated the model) — per
        cluster whose driver opens the sealed model (all of them without an adversary)."""
        if params is None:  # nothing new went down
            self.tractor_version[:] = version
            self.cluster_version[:] = version
            return
        for c, members in enumerate(self.topo.clusters.members):
            if not self._downlink_opens(c, version):
                continue  # refused: the cluster keeps its last model
            self.cluster_version[c] = version
            for k in members:
                self.tractor_version[k] = version
                if self.personal is not None:
                    self.personal.adopt(k, version, params)

    def _upload(self, got: Collected, round_idx: int, start: float) -> None:
        """Each accepted update leaves for its driver; attempts and NQI losses counted per
        cluster (§2.3.4's NQI_loss: not delivered for NQI < τ or an outage).

        The tractor → driver bytes are the ground uplink's own (:func:`link_bytes`: every
        transmission, delivered or not); without an uplink, the ``bytes_sent`` of the
        uploads that arrived."""
        cluster_of = self.topo.clusters.cluster_of
        sent_at = start + self.cfg.train_s
        tx_of = {tx.client: tx for tx in got.transmissions}
        stats = self._stats
        for tx in got.transmissions:
            nbytes = link_bytes(tx)
            stats.hop("tractor_driver", nbytes=nbytes, airtime_s=tx.airtime_s, energy=tx.energy)
            if tx.status is not TransmitStatus.HELD:
                self.attempts[cluster_of[tx.client]] += 1
                self.nqi_lost[cluster_of[tx.client]] += tx.status in _NQI_LOST
            self._park(tx, sent_at)
        if self.c.uplink is None:
            for u in got.accepted:
                self.attempts[cluster_of[u.meta.client_id]] += 1
                stats.bytes["tractor_driver"] += u.meta.bytes_sent
        stats.hop("tractor_driver", sent=len(got.accepted) + len(got.rejected))
        landing: dict[float, list[tuple[int, TractorUpdate]]] = {}
        for u in got.accepted:
            k = u.meta.client_id
            version = int(self.tractor_version[k])
            delta = u.delta.detach().clone()
            model = self._held(k) + delta
            if self.personal is not None:
                self.personal.trained(k, model)
            sent = tx_of.get(k)
            opened = None if sent is None or sent.header is None else Chi.unpack(sent.header)
            t_prime = version + 1 if opened is None else opened.produced_round  # χ's t'
            upd = TractorUpdate(k, t_prime, model, delta, u.meta.num_samples, sent_at)
            latency = 0.0 if sent is None else sent.latency_s
            landing.setdefault(sent_at + latency, []).append((int(cluster_of[k]), upd))
        for at, group in landing.items():  # one event per instant, in upload order
            arrivals = TractorArrivals(tuple(c for c, _ in group), tuple(u for _, u in group))
            self.queue.push(at, arrivals)

    def _park(self, tx: Transmission, now: float) -> None:
        """Note a delivery's time, or a skip's parking suggestion (003 §2.1.2:
        T_suggestion = max(0, T_threshold − T_last); :func:`parking_suggestion`)."""
        k, threshold = tx.client, self.cfg.suggest_after_s
        if tx.status is TransmitStatus.DELIVERED:
            self.last_ok_s[k] = now
        elif tx.status is TransmitStatus.SKIPPED and self._stats.parking is not None:
            assert threshold is not None  # parking is on only with a threshold
            t_last = now - float(self.last_ok_s[k])
            self._stats.parking.append(
                {
                    "tractor": k,
                    "t_last_s": t_last,
                    "t_suggestion_s": parking_suggestion(threshold, t_last),
                }
            )

    def _prune(self) -> None:
        """Forget model versions no tractor holds and no downlink in flight carries."""
        live = set(self.tractor_version.tolist()) | {max(self.versions)}
        live |= set(self.cluster_version.tolist())  # drivers encode relative to these
        for _, e in self.queue.pending():
            if isinstance(e, Downlink):
                live.add(e.version)
            elif isinstance(e, LeoArrival):  # in flight, relative to its base version
                live.add(e.packet.base_version)
        for v in [v for v in self.versions if v not in live]:
            del self.versions[v]
        if self.personal is not None:
            self.personal.prune(live)

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Queue, buffers, model versions, driver states (for a checkpoint)."""
        return {
            "queue": self.queue.state_dict(),
            "versions": dict(self.versions),
            "tractor_version": self.tractor_version.copy(),
            "cluster_version": self.cluster_version.copy(),
            "monitor": self.monitor.snapshot(),
            "attempts": self.attempts.copy(),
            "nqi_lost": self.nqi_lost.copy(),
            "last_ok_s": self.last_ok_s.copy(),
            "leo_buffer": [list(b) for b in self.leo_buffer],
            "relay_pending": self.relay_pending.copy(),
            "geo_inbox": list(self.geo_inbox),
            "personal": None if self.personal is None else self.personal.state_dict(),
            "stations": self.stations.state_dict(),
            "links": self.links.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.queue.load_state_dict(state["queue"])
        self.versions = dict(state["versions"])
        self.tractor_version = np.asarray(state["tractor_version"]).copy()
        self.cluster_version = np.asarray(state["cluster_version"]).copy()
        self.monitor.restore(state["monitor"])
        self.attempts = np.asarray(state["attempts"]).copy()
        self.nqi_lost = np.asarray(state["nqi_lost"]).copy()
        if "last_ok_s" in state:
            self.last_ok_s = np.asarray(state["last_ok_s"]).copy()
        self.leo_buffer = [list(b) for b in state["leo_buffer"]]
        self.relay_pending = np.asarray(state["relay_pending"]).copy()
        self.geo_inbox = list(state["geo_inbox"])
        if "stations" in state:
            self.stations.load_state_dict(state["stations"])
        if self.personal is not None and state.get("personal") is not None:
            self.personal.load_state_dict(state["personal"])
        if "links" in state:
            self.links.load_state_dict(state["links"])
