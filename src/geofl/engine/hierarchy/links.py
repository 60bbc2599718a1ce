"""The space hops of the 003 hierarchy on the wire: the drivers' codec, envelopes on every
satellite link, and their energy proxy (003 §2.2.8, Table 4, §3.1.4).

* **Driver → LEO.** The driver of cluster c holds global version v_c; its upload is
  u_c = w̄_c − w^{v_c} (the GEO aggregates Δ_l = w̄_l − w^t, so the receiver rebuilds
  w̄_c = w^{v_c} + û_c — the LEOs relay every global version down, so they hold w^{v_c}).
  It is encoded with the ground uplink's own codec
  (:func:`~geofl.network.pipelines.encode_with_feedback`: top-k + 4-bit for ``compress``,
  raw float32 otherwise), the residual e_c ← u_c + e_c − û_c kept per cluster — the
  driver's state, which a re-elected driver takes over with the buffer (§2.1.6) — and cut
  into staleness-tagged frames (:func:`~geofl.network.chunking.tag_frames`, tag t').
  The LEO decodes: its regional FedAvg runs over the decoded models w^{v_c} + û_c.
* **LEO → GEO.** The regional model w̄_l as raw float32 (plus Δ̄_l with
  ``geo_delta: update``, which the GEO then aggregates); the GEO decodes it.
* **GEO → driver.** The global model as raw float32, sealed end to end under the GEO →
  driver key and relayed by a LEO (counted on ``geo_leo`` and ``leo_driver``); a refused
  one leaves the driver and its tractors with their last model.
* **Envelopes** (§2.2.8). Every payload is sealed with :class:`~geofl.security.envelope.Sealer`
  under the hop-specific key K_{i→x}^{(e)} of Eq. 6 (sender = the driver's tractor id or
  ``LEO_ID0 + l``, receiver = ``LEO_ID0 + l`` or ``GEO_ID``; long-term secrets
  :func:`~geofl.engine.uplink.ground.sim_secret`), epochs rotating every ``epoch_rounds``, and
  opened by the receiver's :class:`~geofl.security.envelope.Opener` (replay window). A
  simulated on-path adversary flips one bit (``tamper_prob``) or replays the sender's last
  envelope (``replay_prob``) per transmission, drawn from (seed, hop, sender, receiver,
  epoch, counter); a refused payload is logged with its reason, counted, and lost.
* **Energy.** E = P_tx · 8 · bytes / rate per transmission (:func:`hop_energy`).

* **Bookkeeping** (§2.1.8: confidentiality of "model updates and metadata in transit"). What
  the tiers above need besides the tensors — the aggregate's tractors, farms, context bins,
  sample counts, staleness inputs t', attempts and NQI losses, shares and times
  (:class:`~geofl.engine.hierarchy.events.TierModel` less its tensors) — is packed
  (:func:`pack_meta`) into the first frame of every driver → LEO and LEO → GEO payload,
  sealed with it and counted in its bytes; the receiver aggregates with what it opened
  (:func:`unpack_meta`), not with the sender's copy.
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from geofl.config.uplink import UplinkConfig
from geofl.engine.hierarchy.events import SpacePacket, TierModel
from geofl.engine.uplink.ground import sim_secret
from geofl.network.chunking import join_tagged, tag_frames
from geofl.network.payload import PayloadError, decode_raw, encode_raw
from geofl.network.pipelines import Pipeline, decode_update, encode_with_feedback
from geofl.network.spacelink import SpaceLinkParams, hop_energy
from geofl.rng import numpy_generator
from geofl.security.envelope import Opener, Sealer, parse_header, rotate_all

__all__ = [
    "GEO_ID",
    "LEO_ID0",
    "Chi",
    "SpaceLinks",
    "SpacePacket",
    "driver_compresses",
    "pack_meta",
    "unpack_meta",
]

log = logging.getLogger("geofl")

#: Node id of LEO l is ``LEO_ID0 + l`` (tractors take ids from 0).
LEO_ID0 = 2**31
#: Node id of the GEO (``2**32 − 1`` is the terrestrial server's).
GEO_ID = 2**32 - 2
_EMPTY = torch.zeros(0)
#: The bookkeeping of a payload that is not an aggregate (the global model going down).
_NO_META = TierModel(_EMPTY, _EMPTY, 0, 0, (), frozenset(), (), 0, 0, (), 0.0, (), (), ())


#: t' of the oldest update, Σ n, attempts, NQI losses, created_s; then the lengths of the
#: per-tractor columns, of the farms and of the clusters.
_META_HEAD = struct.Struct("<iqiidIII")


def pack_meta(m: TierModel) -> bytes:
    """The bookkeeping of ``m`` (everything but its tensors) as bytes: a fixed head, then
    int32 tractors, farms, context bins, clusters and t' of each tractor, then float64
    shares and creation times (little-endian; a 40-byte head, 28 bytes per tractor, 4 per
    farm and per cluster).

    Raises:
        ValueError: when the per-tractor columns differ in length.
    """
    n = len(m.clients)
    columns = (m.bins, m.tractor_weights, m.client_rounds, m.client_created)
    if any(len(c) != n for c in columns):
        raise ValueError(f"tier model bookkeeping: per-tractor columns are not all {n} long")
    head = _META_HEAD.pack(
        m.produced_round,
        m.num_samples,
        m.attempts,
        m.nqi_lost,
        m.created_s,
        n,
        len(m.farms),
        len(m.clusters),
    )
    ints = [*m.clients, *sorted(m.farms), *m.bins, *m.clusters, *m.client_rounds]
    floats = [*m.tractor_weights, *m.client_created]
    return head + np.asarray(ints, "<i4").tobytes() + np.asarray(floats, "<f8").tobytes()


def unpack_meta(raw: bytes) -> TierModel:
    """Inverse of :func:`pack_meta` (empty tensors).

    Raises:
        PayloadError: when ``raw`` is not one packed bookkeeping.
    """
    size = _META_HEAD.size
    if len(raw) < size:
        raise PayloadError(f"bookkeeping: {len(raw)} bytes, shorter than its {size}-byte head")
    produced, samples, attempts, lost, created, n, nf, nc = _META_HEAD.unpack_from(raw)
    n_int = 3 * n + nf + nc
    if len(raw) != size + 4 * n_int + 16 * n:
        raise PayloadError(f"bookkeeping: {len(raw)} bytes do not hold {n} tractors")
    ints = np.frombuffer(raw, "<i4", n_int, size).tolist()
    floats = np.frombuffer(raw, "<f8", 2 * n, size + 4 * n_int).tolist()
    cut = np.cumsum([n, nf, n, nc]).tolist()
    clients, farms, bins, clusters = (ints[a:b] for a, b in zip([0, *cut[:-1]], cut, strict=True))
    return TierModel(
        _EMPTY,
        _EMPTY,
        produced,
        samples,
        tuple(clients),
        frozenset(farms),
        tuple(bins),
        attempts,
        lost,
        tuple(clusters),
        created,
        tuple(floats[:n]),
        tuple(ints[cut[-1] :]),
        tuple(floats[n:]),
    )


#: χ's fields beside θ (003 Alg. 1 l. 6): ρ, M, λ (lat, lon), and t'.
_CHI = struct.Struct("<dIddi")


@dataclass(frozen=True)
class Chi:
    """What a tractor sends its driver beside θ (003 Alg. 1 l. 6, χ = [ρ, M, λ, θ]), plus
    the staleness input of its update.

    Attributes:
        rho: ρ_i, its capability score (re-election, §2.1.6).
        model_type: M_i, its model/sensor schema score.
        lat: λ_i's latitude (degrees).
        lon: λ_i's longitude (degrees).
        produced_round: t', 1 + the global version it trained from (Eq. 8).
    """

    rho: float
    model_type: int
    lat: float
    lon: float
    produced_round: int

    def pack(self) -> bytes:
        """32 little-endian bytes (the first frame of the tractor's sealed upload)."""
        return _CHI.pack(self.rho, self.model_type, self.lat, self.lon, self.produced_round)

    @classmethod
    def unpack(cls, raw: bytes) -> Chi:
        """Inverse of :meth:`pack`.

        Raises:
            PayloadError: when ``raw`` is not one packed χ.
        """
        if len(raw) != _CHI.size:
            raise PayloadError(f"chi: {len(raw)} bytes, expected {_CHI.size}")
        return cls(*_CHI.unpack(raw))


def driver_compresses(links: SpaceLinkParams, uplink: UplinkConfig | None) -> bool:
    """Whether drivers send top-k + 4-bit: ``links.compress``, or when unset as the
    tractors upload (off for ``uplink.compress: false`` or ``fixed_pipeline: raw``)."""
    if links.compress is not None:
        return links.compress
    return uplink is None or (uplink.compress and uplink.fixed_pipeline is not Pipeline.RAW)


class SpaceLinks:
    """Codec state, sealers, openers and the adversary of the space hops (module docstring).

    Args:
        cfg: ``method.hierarchy.links``.
        compress: Drivers send top-k + 4-bit (:func:`driver_compresses`).
        dim: D, the model's parameter count.
        n_tractors: Tractors (the drivers' possible ids 0 … T − 1).
        n_leo: LEO satellites.
        seed: Experiment seed.
        send_delta: LEO → GEO also carries Δ̄_l (``geo_delta: update``).
    """

    def __init__(
        self,
        cfg: SpaceLinkParams,
        *,
        compress: bool,
        dim: int,
        n_tractors: int,
        n_leo: int,
        seed: int,
        send_delta: bool = False,
    ) -> None:
        self.cfg, self.compress, self.dim, self.seed = cfg, compress, dim, seed
        self.n_tractors, self.n_leo, self.send_delta = n_tractors, n_leo, send_delta
        self.residual: dict[int, torch.Tensor] = {}
        self.sealers: dict[tuple[int, int], Sealer] = {}
        self.openers: dict[int, Opener] = {}
        self.last_wire: dict[tuple[int, int], bytes] = {}
        self.rejected: Counter[tuple[str, str]] = Counter()
        self.replays_accepted = 0
        self._round = 1

    # -- keys and epochs -------------------------------------------------------------------
    def begin_round(self, round_idx: int) -> None:
        """Rotate every sealer and opener to ``round_idx``'s key epoch (§2.1.8)."""
        self._round = round_idx
        rotate_all(self._epoch(), self.sealers.values(), self.openers.values())

    def _epoch(self) -> int:
        return (self._round - 1) // self.cfg.security.epoch_rounds

    def _sealer(self, sender: int, receiver: int) -> Sealer:
        if (sender, receiver) not in self.sealers:
            secret = sim_secret(self.seed, sender)
            self.sealers[(sender, receiver)] = Sealer(secret, sender, receiver, self._epoch())
        return self.sealers[(sender, receiver)]

    def _opener(self, receiver: int) -> Opener:
        """The receiver's opener, provisioned with its possible senders' secrets (a LEO:
        every tractor, which may be elected driver; the GEO: every LEO; a driver: the GEO)."""
        if receiver not in self.openers:
            if receiver == GEO_ID:
                senders: range | list[int] = range(LEO_ID0, LEO_ID0 + self.n_leo)
            elif receiver >= LEO_ID0:
                senders = range(self.n_tractors)
            else:
                senders = [GEO_ID]
            sec = self.cfg.security
            self.openers[receiver] = Opener(
                receiver,
                {s: sim_secret(self.seed, s) for s in senders},
                self._epoch(),
                window=sec.window,
                epoch_grace=sec.epoch_grace,
            )
        return self.openers[receiver]

    # -- one hop ---------------------------------------------------------------------------
    def _packet(
        self,
        hop: str,
        frames: list[bytes],
        sender: int,
        receiver: int,
        meta: TierModel,
        base_version: int,
    ) -> SpacePacket:
        """Seal ``frames`` (when envelopes are on) and price them on ``hop``."""
        wires = frames
        if self.cfg.security.enabled:
            sealer = self._sealer(sender, receiver)
            wires = [sealer.seal(f, self._round) for f in frames]
        nbytes = sum(len(w) for w in wires)
        rate, watts = (
            (self.cfg.driver_leo_mbps, self.cfg.driver_leo_w)
            if hop == "driver_leo"
            else (self.cfg.leo_geo_mbps, self.cfg.leo_geo_w)
        )
        airtime, energy = hop_energy(nbytes, rate, watts)
        bare = replace(meta, model=_EMPTY, delta=_EMPTY)
        return SpacePacket(
            hop,
            sender,
            receiver,
            tuple(wires),
            bare,
            base_version,
            nbytes,
            airtime,
            energy,
            tuple(frames),
        )

    def reseal(self, p: SpacePacket, driver: int, sat: int) -> SpacePacket:
        """A pending driver upload ``p`` as ``driver`` sends it again in a pass to LEO
        ``sat`` (a re-elected driver, or a retry after a refusal): the same encoded frames,
        sealed under the link key to that LEO with fresh counters (the encoding and the
        residual are the cluster's, handed over with its buffer)."""
        out = self._packet(p.hop, list(p.frames), driver, LEO_ID0 + sat, p.meta, p.base_version)
        return replace(out, tries=p.tries)

    def _attacked(self, p: SpacePacket, opener: Opener) -> list[bytes]:
        """The wires as they reach the receiver after the simulated adversary: one bit of
        one frame flipped w.p. ``tamper_prob``; the sender's previous envelope replayed
        first w.p. ``replay_prob`` (it must be refused)."""
        sec, wires = self.cfg.security, list(p.wires)
        if not (sec.tamper_prob or sec.replay_prob):
            return wires
        head = parse_header(wires[0])  # the transmission's (epoch, counter) key its draws
        epoch, ctr = (-1, -1) if isinstance(head, str) else (head.epoch, head.counter)
        rng = numpy_generator(self.seed, "space", p.hop, p.sender, p.receiver, epoch, ctr)
        old = self.last_wire.get((p.sender, p.receiver))
        if sec.replay_prob and rng.random() < sec.replay_prob and old is not None:
            replay = opener.open(old)
            if replay.reason is None:
                self.replays_accepted += 1  # must stay 0
            else:
                self._refuse(p, str(replay.reason), lost=False)
        if sec.tamper_prob and rng.random() < sec.tamper_prob:
            j = int(rng.integers(len(wires)))
            bad = bytearray(wires[j])
            bad[int(rng.integers(len(bad)))] ^= 1 << int(rng.integers(8))
            wires[j] = bytes(bad)
        self.last_wire[(p.sender, p.receiver)] = p.wires[-1]
        return wires

    def count(self, hop: str, reason: str) -> None:
        """Count a refusal that is the protocol working, not an attack (a full pass, a
        dropped retry): in the round's rejections, logged at INFO by the caller."""
        self.rejected[(hop, reason)] += 1

    def _refuse(self, p: SpacePacket, reason: str, *, lost: bool = True) -> None:
        self.rejected[(p.hop, reason)] += 1
        what = "its payload is lost" if lost else "a replay"
        log.warning(
            "round %d: %s envelope from %d to %d refused (%s); %s",
            self._round,
            p.hop,
            p.sender,
            p.receiver,
            reason,
            what,
        )

    def _open(self, p: SpacePacket) -> list[bytes] | None:
        """The payloads of ``p`` as its receiver opens them, or None (refused, logged)."""
        if not self.cfg.security.enabled:
            return list(p.wires)
        opener = self._opener(p.receiver)
        out = []
        for wire in self._attacked(p, opener):
            res = opener.open(wire)
            if res.payload is None:
                self._refuse(p, str(res.reason))
                return None
            out.append(res.payload)
        return out

    # -- driver → LEO ----------------------------------------------------------------------
    def driver_send(
        self,
        cluster: int,
        driver: int,
        model: TierModel,
        base: torch.Tensor,
        base_version: int,
        sat: int,
        now_s: float,
        *,
        from_updates: bool = False,
    ) -> SpacePacket:
        """The driver's upload u_c = w̄_c − w^{v_c} (``base`` = w^{v_c}), encoded with
        error feedback (residual per cluster), tagged (t', ``now_s``) and sealed for LEO
        ``sat``.

        ``from_updates``: u_c is taken as the driver's average of its tractors' updates
        (``model.delta``), which equals w̄_c − w^{v_c} in exact arithmetic when every
        tractor trained from w^{v_c} and the driver averages; sent raw, it then carries no
        rounding of subtracting two nearly equal models (what makes the degenerate
        hierarchy — one cluster, one LEO, no delay — equal flat FedAvg bit for bit)."""
        pipe = Pipeline.COMPRESSED if self.compress else Pipeline.RAW
        u = model.delta if from_updates else model.model - base
        enc, residual = encode_with_feedback(
            u, self.residual.get(cluster), pipe, self.cfg.pipelines
        )
        if self.compress and residual is not None:
            self.residual[cluster] = residual
        (payload,) = enc.frames
        frames = tag_frames(
            payload,
            round_idx=model.produced_round,
            timestamp=now_s,
            frame_bytes=self.cfg.frame_bytes,
        )
        frames.insert(0, pack_meta(model))
        return self._packet("driver_leo", frames, driver, LEO_ID0 + sat, model, base_version)

    def leo_receive(self, p: SpacePacket, base: torch.Tensor) -> TierModel | None:
        """The cluster model the LEO aggregates, w^{v_c} + û_c (``base`` = w^{v_c}), with
        Δ = û_c, t' from the frames' tag and the bookkeeping it opened; None when refused
        (logged, counted)."""
        frames = self._open(p)
        if frames is None:
            return None
        try:
            meta = unpack_meta(frames[0])
            tagged = join_tagged(frames[1:])
            u = decode_update([tagged.payload], self.dim).values
        except PayloadError as err:
            self._refuse(p, f"payload: {err}")
            return None
        return replace(meta, model=base + u, delta=u, produced_round=tagged.round)

    # -- LEO → GEO -------------------------------------------------------------------------
    def leo_send(self, sat: int, regional: TierModel) -> SpacePacket:
        """LEO ``sat``'s bookkeeping and regional model (and Δ̄_l with ``send_delta``), raw
        float32, sealed for the GEO."""
        payloads = [pack_meta(regional), encode_raw(regional.model)[0]]
        if self.send_delta:
            payloads.append(encode_raw(regional.delta)[0])
        return self._packet("leo_geo", payloads, LEO_ID0 + sat, GEO_ID, regional, -1)

    def geo_receive(self, p: SpacePacket) -> TierModel | None:
        """The regional model and bookkeeping as the GEO opens them (Δ̄_l only with
        ``send_delta``: the GEO reads it for ``geo_delta: update`` alone), or None when
        refused."""
        payloads = self._open(p)
        if payloads is None:
            return None
        try:
            meta = unpack_meta(payloads[0])
            values = [decode_raw(x, self.dim) for x in payloads[1:]]
        except PayloadError as err:
            self._refuse(p, f"payload: {err}")
            return None
        return replace(meta, model=values[0], delta=values[-1] if self.send_delta else _EMPTY)

    # -- GEO → driver -----------------------------------------------------------------------
    def downlink(self, driver: int, params: torch.Tensor) -> bool:
        """Whether the global model ``params`` (``[D]``), sealed by the GEO for ``driver``
        as raw float32 and relayed by a LEO, opens and decodes there (§2.2.8: the envelope
        is end to end, GEO → driver, so the relaying LEO needs no key of its own). Without
        envelopes: always."""
        if not self.cfg.security.enabled:
            return True
        wire = self._sealer(GEO_ID, driver).seal(encode_raw(params)[0], self._round)
        p = SpacePacket("geo_driver", GEO_ID, driver, (wire,), _NO_META, -1, len(wire), 0.0, 0.0)
        payloads = self._open(p)
        if payloads is None:
            return False
        try:
            decode_raw(payloads[0], self.dim)
        except PayloadError as err:
            self._refuse(p, f"payload: {err}")
            return False
        return True

    # -- records and checkpoints -----------------------------------------------------------
    def take_rejections(self) -> dict[str, dict[str, int]]:
        """Refused envelopes per hop and reason since the last call (then reset)."""
        out: dict[str, dict[str, int]] = {}
        for (hop, reason), n in sorted(self.rejected.items()):
            out.setdefault(hop, {})[reason] = n
        self.rejected.clear()
        return out

    def state_dict(self) -> dict[str, Any]:
        """Residuals, sealer counters, receiver windows (for a checkpoint)."""
        return {
            "residual": dict(self.residual),
            "sealers": self.sealers,
            "openers": self.openers,
            "last_wire": dict(self.last_wire),
            "rejected": Counter(self.rejected),
            "replays_accepted": self.replays_accepted,
            "round": self._round,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.residual = dict(state["residual"])
        self.sealers, self.openers = state["sealers"], state["openers"]
        self.last_wire = dict(state["last_wire"])
        self.rejected = Counter(state["rejected"])
        self.replays_accepted = int(state["replays_accepted"])
        self._round = int(state["round"])
