"""The 003 ground-layer uplink of a run: gate → pipeline → envelope → rural link → open →
decode (003 Alg. 1, §2.1.2(3), §2.1.8, §2.3.1), opt-in through ``method.uplink``.

Per tractor and round: the new Δw is coalesced with any buffered update (one held back or
lost earlier, dropped once it has waited ``max_retries`` rounds: "superseded by fresher
updates"); the cosine checkpointer may hold it back; below τ_NQI it is buffered; in an
outage it is forwarded through the group neighbour with the highest NQI (groups of
``neighbour_group`` consecutive ids; the cluster layer is not built yet) or buffered;
otherwise the NQI picks a pipeline (or ``fixed_pipeline`` is used, without the NQI gate;
``compress: false`` sends what passes the gate as raw float32), with ``aircomp`` a deep
fade silences the tractor (dropped), the update is really encoded (with error feedback;
FedPAQ's ``paq`` pipeline rounds stochastically from (seed, round, client, "paq")),
every frame is sealed per hop, sent over the sampled link (transfer time from its byte
size, B and L; frames past the deadline ℓ_max are lost), opened and decoded by the
server. Anything not delivered is buffered for a later round; error-feedback residuals
move only on delivery. Simulation keys: tractor k's long-term secret is
BLAKE2b(seed, k) — provisioning, not security.

In the 003 hierarchy the receiver is the tractor's cluster driver, not the server
(:attr:`Uplink.receivers`: the envelope's key is K_{i→driver}^{(e)} of Eq. 6, so the driver
can open it and re-seal its aggregate for the LEO), and the payload is Alg. 1's
χ = [ρ, M, λ, θ]: the hierarchy's :attr:`Uplink.header` packs the fields beside θ into a
first frame, sealed and counted with the update, which the receiver opens
(:attr:`Transmission.header`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import torch

from geofl.client.checkpointer import cosine_gate
from geofl.config.uplink import UplinkConfig
from geofl.network.aircomp import Superposition, channel_gain, superpose
from geofl.network.nqi import nqi, ranges_for
from geofl.network.payload import PayloadError
from geofl.network.pipelines import (
    EncodedUpdate,
    Pipeline,
    choose_pipeline,
    decode_update,
    encode_rows,
    encode_with_feedback,
)
from geofl.network.rural import (
    LinkStates,
    assign_profiles,
    frames_delivered,
    sample_link_states,
)
from geofl.rng import numpy_generator
from geofl.security.envelope import OVERHEAD_BYTES, Opener, Sealer, rotate_all

__all__ = [
    "ROUTINE",
    "SERVER_ID",
    "Transmission",
    "TransmitStatus",
    "Uplink",
    "link_bytes",
    "sim_secret",
]

log = logging.getLogger("geofl")

#: Receiver id of the terrestrial server.
SERVER_ID = 2**32 - 1


class TransmitStatus(StrEnum):
    """What became of one tractor's update this round."""

    DELIVERED = "delivered"
    HELD = "held"  # checkpointer: redundant, coalesced into a later update
    SKIPPED = "skipped"  # NQI < τ_NQI: buffered
    OUTAGE = "outage"  # link down, no neighbour: buffered
    DEADLINE = "deadline"  # not (fully) delivered by ℓ_max: buffered
    REJECTED = "rejected"  # an envelope or the payload refused by a receiver: buffered
    TRUNCATED = "truncated"  # AirComp: deep fade below g_th, silent; dropped (not buffered)


#: Outcomes that are the method working on the simulated links, not something to act on:
#: the checkpointer's holds and the NQI gate (003 Alg. 1), outages, the deadline ℓ_max,
#: AirComp's truncation. They are counted in the round record (``uplink.status``) and in a
#: one-line INFO summary per round; each tractor's is logged at DEBUG only. A refused
#: envelope or payload (``REJECTED``) is not routine: a receiver saw an attack or a fault.
ROUTINE = frozenset(
    {
        TransmitStatus.HELD,
        TransmitStatus.SKIPPED,
        TransmitStatus.OUTAGE,
        TransmitStatus.DEADLINE,
        TransmitStatus.TRUNCATED,
    }
)


@dataclass(frozen=True)
class Transmission:
    """One tractor's uplink in one round (003 §3.1.4's per-update figures).

    Attributes:
        client: The tractor.
        status: What became of its update.
        nqi: NQI of the link used (the neighbour's when forwarded).
        pipeline: The pipeline that encoded it (None when not sent).
        via: The neighbour it was forwarded through, or None.
        bytes_by_hop: Sealed bytes per hop (``tractor_server``, ``tractor_neighbour``,
            ``neighbour_server``), as transmitted (late frames are not sent).
        airtime_s: Σ transmission seconds over its hops.
        energy: Σ P_tx · airtime (the energy proxy E_comm).
        latency_s: Creation → arrival at the server (local hop + L + bytes / B).
        local_s: The tractor → neighbour part of ``latency_s``.
        buffered_rounds: Rounds its oldest content waited in the buffer before delivery.
        detail: Why it was not delivered.
        values: ``[D]`` the server's decoded update (delivered only).
        header: The χ fields beside θ as the receiver opened them (delivered with an
            :attr:`Uplink.header` only).
    """

    client: int
    status: TransmitStatus
    nqi: float
    pipeline: Pipeline | None = None
    via: int | None = None
    bytes_by_hop: dict[str, int] = field(default_factory=dict)
    airtime_s: float = 0.0
    energy: float = 0.0
    latency_s: float = 0.0
    local_s: float = 0.0
    buffered_rounds: int = 0
    detail: str = ""
    values: torch.Tensor | None = None
    header: bytes | None = None


@dataclass
class _Tractor:
    residual: torch.Tensor | None = None
    last_sent: torch.Tensor | None = None
    pending: torch.Tensor | None = None
    pending_age: int = 0
    dot_prev: float = 0.0  # s_dot of the last checkpointer test (Alg. 1 line 3)


@dataclass(frozen=True)
class _Route:
    """Where one tractor's update goes once past the checkpointer (outage forwarding, NQI
    gate, AirComp): the pipeline, the neighbour it is forwarded through and whose link
    carries it (``origin``), the NQI it is scored by, and the rounds it waited."""

    pipe: Pipeline
    via: int | None
    origin: int
    score: float
    age: int


#: Values per slice of a cohort the uplink encodes at once (``[rows, D]`` float32 ≈ 64 MB):
#: bounds the copies of a cohort of large models; slices are taken in cohort order.
_SLICE_VALUES = 1 << 24
#: From this row length on, the cohort's checkpointer tests run one row at a time: torch
#: reduces a lone row this long in two passes across threads (its ``GRAIN_SIZE``), a
#: summation order a row of a batch does not get, so one row at a time keeps the
#: per-client bits — and a row this long costs more than the call.
_GATE_ROW_ALONE = 32_768


def link_bytes(tx: Transmission) -> int:
    """The bytes ``tx`` put on the links: geofl's one counting basis for uploaded bytes by
    hop, used by the ground uplink's ``bytes_by_hop`` and the hierarchy's tractor → driver
    hop alike.

    Every hop's sealed frames (payload, frame tags, envelope) as the sender transmitted
    them, every transmission counted whether or not it was delivered — the cost of the
    link (003 §3.1.4's bytes and energy are spent either way). Frames refused by a
    receiver were transmitted and count; frames past the deadline ℓ_max are not
    transmitted and do not; an update held, skipped or in an outage puts nothing on a
    link. The bytes of the delivered updates alone are ``uplink.pipeline_bytes``.
    """
    return sum(tx.bytes_by_hop.values())


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def sim_secret(seed: int, client: int) -> bytes:
    """Node ``client``'s simulated long-term secret K_i = BLAKE2b(seed, id) (provisioning
    for the simulation, not security)."""
    return hashlib.blake2b(f"geofl-sim-secret/{seed}/{client}".encode(), digest_size=32).digest()


class Uplink:
    """Per-run uplink state: tractors' buffers and residuals, sealers, receivers' openers."""

    def __init__(
        self,
        cfg: UplinkConfig,
        num_clients: int,
        seed: int,
        profiles: np.ndarray | None = None,
    ) -> None:
        """Args:
        cfg: The method's uplink.
        num_clients: K tractors.
        seed: Experiment seed.
        profiles: ``[K]`` nominal profile per tractor (``network.profile_source: data``);
            None: drawn in ``network.shares``.
        """
        self.cfg, self.seed, self.k = cfg, seed, num_clients
        if profiles is None:
            profiles = assign_profiles(num_clients, cfg.network.shares, seed)
        elif len(profiles) != num_clients:
            raise ValueError(f"{len(profiles)} link profiles for {num_clients} tractors")
        self.profiles = np.asarray(profiles, dtype=np.int64)
        self.ranges = ranges_for(self.profiles, cfg.nqi.normalisation)
        self.tractors = [_Tractor() for _ in range(num_clients)]
        self.secrets = {k: sim_secret(seed, k) for k in range(num_clients)}
        self.sealers: dict[tuple[int, int], Sealer] = {}
        self.openers: dict[int, Opener] = {}
        self.last_wire: dict[tuple[int, int], bytes] = {}
        self.envelope_rejections: Counter[str] = Counter()
        self.replays_accepted = 0
        #: tractor → the node its update is sealed for and opened by (absent: the server)
        self.receivers: dict[int, int] = {}
        #: tractor → the χ fields it sends beside θ (003 Alg. 1 l. 6); None: θ alone
        self.header: Callable[[int], bytes] | None = None
        self._round = 0
        self._links = LinkStates(np.zeros((0, 3)), np.zeros(0, bool))
        self._drawn: tuple[tuple[int, int], LinkStates] | None = None
        self._nqi = np.zeros(0)
        self._air: Superposition | None = None

    # -- per round -------------------------------------------------------------------------
    def begin_round(self, round_idx: int, links: LinkStates | None = None) -> None:
        """Draw every tractor's link state and NQI for ``round_idx``; rotate key epochs.

        Args:
            round_idx: 1-based round.
            links: Use these link states instead of drawing them (replayed traces, tests).
        """
        self._round, self._air = round_idx, None
        self._links = self.drawn_links(round_idx) if links is None else links
        self._nqi = nqi(self._links.values, self.ranges, np.array(self.cfg.nqi.weights))
        epoch = (round_idx - 1) // self.cfg.security.epoch_rounds
        rotate_all(epoch, self.sealers.values(), self.openers.values())

    def drawn_links(self, round_idx: int, seed: int | None = None) -> LinkStates:
        """The link states drawn for ``round_idx`` (003 §2.3.1; generator (seed, round,
        client, "link")): the draw of the last round asked for is kept, so a scheduler
        that needs the same round's outages again (the hierarchy's downlink) gets them
        without drawing them per tractor a second time. ``seed``: another run seed's
        draw (default: the uplink's)."""
        seed = self.seed if seed is None else seed
        if self._drawn is None or self._drawn[0] != (seed, round_idx):
            links = sample_link_states(self.profiles, self.cfg.network, seed, round_idx)
            self._drawn = ((seed, round_idx), links)
        return self._drawn[1]

    def _sealer(self, sender: int, receiver: int) -> Sealer:
        key = (sender, receiver)
        if key not in self.sealers:
            epoch = (self._round - 1) // self.cfg.security.epoch_rounds
            self.sealers[key] = Sealer(self.secrets[sender], sender, receiver, epoch)
        return self.sealers[key]

    def _opener(self, receiver: int) -> Opener:
        if receiver not in self.openers:
            sec = self.cfg.security
            epoch = (self._round - 1) // sec.epoch_rounds
            self.openers[receiver] = Opener(
                receiver, self.secrets, epoch, window=sec.window, epoch_grace=sec.epoch_grace
            )
        return self.openers[receiver]

    # -- one hop ---------------------------------------------------------------------------
    def _hop(
        self, frames: list[tuple[int, bytes]], sender: int, receiver: int, owner: int
    ) -> tuple[list[tuple[int, bytes]], str]:
        """Seal, let the simulated adversary act, open: the ``(index, payload)`` pairs that
        got through, in order, and the reason of the last refused envelope ("" if none).

        Frames carry their index in the encoded update because the ones that survive a hop
        need not be a prefix of those sent (a tampered middle frame is refused, the later
        ones open): the next hop's bytes and deadline are priced on the frames it really
        carries. ``owner`` is the tractor whose update this is (the adversary's generator
        is per owner and hop)."""
        sec = self.cfg.security
        if not sec.enabled or not frames:
            return list(frames), ""
        sealer, opener = self._sealer(sender, receiver), self._opener(receiver)
        wires = [sealer.seal(f, self._round) for _, f in frames]
        if sec.replay_prob or sec.tamper_prob:
            self._adversary(wires, opener, sender, receiver, owner)
        self.last_wire[(sender, receiver)] = wires[-1]
        out, reason = [], ""
        for (i, _), w in zip(frames, wires, strict=True):
            res = opener.open(w)
            if res.payload is not None:
                out.append((i, res.payload))
            else:
                reason = str(res.reason)
                self.envelope_rejections[reason] += 1
        return out, reason

    def _adversary(
        self, wires: list[bytes], opener: Opener, sender: int, receiver: int, owner: int
    ) -> None:
        """The simulated §2.1.8 adversary on one hop: it may replay the hop's last envelope
        and flip one bit of one of ``wires`` (in place). Its generator is (seed, round,
        owner, hop), drawn only when an attack probability is set."""
        sec = self.cfg.security
        rng = numpy_generator(
            self.seed, "round", self._round, "client", owner, "adversary", sender, receiver
        )
        old = self.last_wire.get((sender, receiver))
        if sec.replay_prob and rng.random() < sec.replay_prob and old is not None:
            replay = opener.open(old)
            if replay.reason is None:
                self.replays_accepted += 1  # must stay 0
            else:
                self.envelope_rejections[str(replay.reason)] += 1
        if sec.tamper_prob and rng.random() < sec.tamper_prob:
            j = int(rng.integers(len(wires)))
            bad = bytearray(wires[j])
            bad[int(rng.integers(len(bad)))] ^= 1 << int(rng.integers(8))
            wires[j] = bytes(bad)

    def _take_pending(self, client: int) -> tuple[torch.Tensor, int] | None:
        """Empty ``client``'s buffer; its buffered update and age to coalesce with this
        round's Δw, or None (nothing buffered, or superseded past ``max_retries``)."""
        st = self.tractors[client]
        pending, age = st.pending, st.pending_age
        st.pending, st.pending_age = None, 0
        if pending is None:
            return None
        if age >= self.cfg.network.max_retries:
            log.info("client %d: buffered update superseded after %d rounds", client, age)
            return None
        return pending, age

    # -- one tractor -----------------------------------------------------------------------
    def transmit(self, delta: torch.Tensor, client: int) -> Transmission:
        """Carry ``client``'s Δw of this round to the server, or buffer it."""
        st, x, age = self.tractors[client], delta, 0
        pending = self._take_pending(client)
        if pending is not None:
            x, age = delta + pending[0], pending[1]
        score = float(self._nqi[client])
        ck = self.cfg.checkpoint
        if ck.tau_cos > 0 and st.last_sent is not None:
            gate = cosine_gate(
                x[None],
                st.last_sent[None],
                torch.ones(1, dtype=torch.bool),
                ck.tau_cos,
                tau_dot=ck.tau_dot,
                dot_prev=torch.tensor([st.dot_prev]),
            )
            st.dot_prev = float(gate.dot[0])
            if not bool(gate.send[0]):
                cos = float(gate.cosine[0])
                held = Transmission(client, TransmitStatus.HELD, score, detail=f"cos {cos:.4f}")
                return self._buffer(st, x, age, held)
        route = self._route(st, x, client, age, score)
        if isinstance(route, Transmission):
            return route
        pipe, via, origin, score = route.pipe, route.via, route.origin, route.score
        rng = None
        if pipe is Pipeline.PAQ:
            rng = numpy_generator(self.seed, "round", self._round, "client", client, "paq")
        enc, residual = encode_with_feedback(
            x, st.residual, pipe, self.cfg.pipelines, round_idx=self._round, rng=rng
        )
        tx = self._send(enc, x.numel(), client, via, origin, score, age)
        if tx.status is not TransmitStatus.DELIVERED:
            return self._buffer(st, x, age, tx)
        st.residual, st.last_sent = residual, enc.recon
        return tx

    # -- a cohort --------------------------------------------------------------------------
    def transmit_cohort(
        self, deltas: torch.Tensor | Sequence[torch.Tensor], clients: Sequence[int]
    ) -> list[Transmission]:
        """:meth:`transmit` for every row of ``deltas`` (``[K, D]``, or K ``[D]`` tensors:
        client ``clients[i]``'s Δw), with the per-row arithmetic batched over the cohort
        (issue 36).

        The result and every tractor's state are those of ``[transmit(deltas[i],
        clients[i]) for i in range(K)]``, bit for bit: coalescing, the checkpointer's row
        reductions, top-k (one tie rule, :func:`~geofl.network.sparse.topk_rows`),
        quantisation and error feedback are the same element-wise operations on rows of
        a ``[K, D]`` batch, grouped by pipeline. Envelopes stay per hop and message, sealed
        and opened in cohort order: a forwarding neighbour's sealer counter and the
        receivers' replay windows see the per-client order. The receiver's decoding is
        the encoder's reconstruction when it opened exactly the encoder's bytes (what
        decoding them gives: the same dequantisation), else a real decode. Large cohorts
        run in slices of about 2^24 values, in order; a list of rows is stacked one
        slice at a time, so a cohort of large models is never copied whole.

        Raises:
            ValueError: ``deltas`` is not K rows of one length D or a client repeats.
        """
        if isinstance(deltas, torch.Tensor):
            shapes = {tuple(deltas.shape[1:])} if deltas.dim() == 2 else {(-1, -1)}
        else:
            shapes = {tuple(row.shape) for row in deltas}
        if len(deltas) != len(clients) or len(shapes) > 1 or any(len(s) != 1 for s in shapes):
            raise ValueError(
                f"deltas of row shapes {sorted(shapes)} for {len(clients)} clients; pass [K, D]"
            )
        if len(set(clients)) != len(clients):
            raise ValueError("a client appears twice in the cohort; pass each one once")
        width = next(iter(shapes), (1,))[0]
        step = max(1, _SLICE_VALUES // max(1, width))
        out: list[Transmission] = []
        for lo in range(0, len(clients), step):
            block = deltas[lo : lo + step]
            rows = block if isinstance(block, torch.Tensor) else torch.stack(list(block))
            out += self._transmit_slice(rows, clients[lo : lo + step])
        return out

    def _transmit_slice(self, deltas: torch.Tensor, clients: Sequence[int]) -> list[Transmission]:
        """:meth:`transmit_cohort` of one slice: coalesce, gate and route every row, encode
        the routed rows by pipeline, then send them in cohort order."""
        xs, ages = self._coalesce(deltas, clients)
        send, cosine = self._gate(xs, clients)
        done: list[Transmission | None] = [None] * len(clients)
        routes: dict[int, _Route] = {}
        for i, client in enumerate(clients):
            st, score = self.tractors[client], float(self._nqi[client])
            if not send[i]:
                held = Transmission(
                    client, TransmitStatus.HELD, score, detail=f"cos {cosine[i]:.4f}"
                )
                done[i] = self._buffer(st, xs[i].clone(), ages[i], held)
                continue
            route = self._route(st, xs[i], client, ages[i], score)
            if isinstance(route, Transmission):
                if st.pending is not None:  # buffered: a copy, not a view of the batch
                    st.pending = st.pending.clone()
                done[i] = route
            else:
                routes[i] = route
        for i, tx in self._encode_and_send(xs, clients, routes):
            done[i] = tx
        return [tx for tx in done if tx is not None]

    def _coalesce(
        self, deltas: torch.Tensor, clients: Sequence[int]
    ) -> tuple[torch.Tensor, list[int]]:
        """Each row coalesced with its tractor's buffered update (dropped past
        ``max_retries``) as :meth:`transmit` does; the rows ``[K, D]`` and their ages."""
        xs = deltas.clone()
        ages, rows, pending = [0] * len(clients), [], []
        for i, client in enumerate(clients):
            held = self._take_pending(client)
            if held is not None:
                rows.append(i)
                pending.append(held[0])
                ages[i] = held[1]
        if rows:
            xs[rows] = deltas[rows] + torch.stack(pending)
        return xs, ages

    def _gate(self, xs: torch.Tensor, clients: Sequence[int]) -> tuple[list[bool], list[float]]:
        """The checkpointer (003 Alg. 1 l. 2–5) for every row with a last-sent reference,
        batched (:data:`_GATE_ROW_ALONE`): send or hold, and the cosine; moves s_dot."""
        ck, n = self.cfg.checkpoint, len(clients)
        send, cosine = [True] * n, [0.0] * n
        if ck.tau_cos <= 0:
            return send, cosine
        rows = [i for i, c in enumerate(clients) if self.tractors[c].last_sent is not None]
        parts = [rows] if rows and xs.shape[1] < _GATE_ROW_ALONE else [[i] for i in rows]
        for part in parts:
            states = [self.tractors[clients[i]] for i in part]
            gate = cosine_gate(
                xs[part],
                torch.stack([st.last_sent for st in states if st.last_sent is not None]),
                torch.ones(len(part), dtype=torch.bool),
                ck.tau_cos,
                tau_dot=ck.tau_dot,
                dot_prev=torch.tensor([st.dot_prev for st in states]),
            )
            rows_out = zip(part, states, gate.send.tolist(), gate.cosine.tolist(), strict=True)
            for (i, st, ok, cos), dot in zip(rows_out, gate.dot.tolist(), strict=True):
                st.dot_prev, send[i], cosine[i] = dot, ok, cos
        return send, cosine

    def _encode_and_send(
        self, xs: torch.Tensor, clients: Sequence[int], routes: dict[int, _Route]
    ) -> list[tuple[int, Transmission]]:
        """Encode the routed rows, one batch per pipeline (with error feedback), then send
        each in cohort order (:meth:`_deliver`)."""
        by_pipe: dict[Pipeline, list[int]] = {}
        for i, route in routes.items():
            by_pipe.setdefault(route.pipe, []).append(i)
        encoded: dict[int, tuple[EncodedUpdate, torch.Tensor | None, bool]] = {}
        for pipe, rows in by_pipe.items():
            frames, recon, residual = self._encode_rows(xs, clients, rows, pipe)
            finite = torch.isfinite(recon).all(dim=1).tolist()
            for j, i in enumerate(rows):
                res = None if residual is None else residual[j]
                encoded[i] = (EncodedUpdate(pipe, frames[j], recon[j]), res, finite[j])
        return [(i, self._deliver(xs[i], clients[i], routes[i], *encoded[i])) for i in routes]

    def _encode_rows(
        self, xs: torch.Tensor, clients: Sequence[int], rows: list[int], pipe: Pipeline
    ) -> tuple[list[tuple[bytes, ...]], torch.Tensor, torch.Tensor | None]:
        """:func:`~geofl.network.pipelines.encode_with_feedback` of rows ``rows`` of ``xs``
        with one pipeline: frames per row, reconstructions and new residuals ``[n, D]``
        (None without error feedback)."""
        params = self.cfg.pipelines
        targets = xs[rows]
        if params.error_feedback:
            have = [j for j, i in enumerate(rows) if self.tractors[clients[i]].residual is not None]
            if have:
                res = [self.tractors[clients[rows[j]]].residual for j in have]
                targets[have] = targets[have] + torch.stack([r for r in res if r is not None])
        rngs = None
        if pipe is Pipeline.PAQ:
            rngs = [
                numpy_generator(self.seed, "round", self._round, "client", clients[i], "paq")
                for i in rows
            ]
        frames, recon = encode_rows(targets, pipe, params, round_idx=self._round, rngs=rngs)
        return frames, recon, (targets - recon if params.error_feedback else None)

    def _deliver(
        self,
        x: torch.Tensor,
        client: int,
        route: _Route,
        enc: EncodedUpdate,
        residual: torch.Tensor | None,
        finite: bool,
    ) -> Transmission:
        """Send one encoded row (:meth:`_send`); on delivery its residual and reference
        move (copies, so no tractor holds a cohort's batch alive), else it is buffered."""
        known = enc.recon if finite else None
        st = self.tractors[client]
        r = route
        tx = self._send(enc, x.numel(), client, r.via, r.origin, r.score, r.age, known)
        if tx.status is not TransmitStatus.DELIVERED:
            return self._buffer(st, x.clone(), r.age, tx)
        st.residual = None if residual is None else residual.clone()
        st.last_sent = enc.recon.clone()
        return tx

    def _route(
        self, st: _Tractor, x: torch.Tensor, client: int, age: int, score: float
    ) -> _Route | Transmission:
        """After the checkpointer: forward in an outage, gate by NQI, AirComp's deep fade
        (003 Alg. 1 l. 7–8, §2.1.2(3)) — the route of ``x``, or the transmission it ends
        as (buffered, or AirComp's drop). Shared by :meth:`transmit` and
        :meth:`transmit_cohort`, so both route alike."""
        via, origin = None, client
        if self._links.outage[client]:
            via = self._neighbour(client) if self.cfg.network.forward else None
            if via is None:
                return self._buffer(st, x, age, Transmission(client, TransmitStatus.OUTAGE, score))
            origin, score = via, float(self._nqi[via])
        p = self.cfg.nqi
        pipe = self.cfg.fixed_pipeline or choose_pipeline(score, p.tau, p.t_chunked, p.t_fallback)
        if pipe is None:
            skip = Transmission(client, TransmitStatus.SKIPPED, score, detail=f"NQI {score:.3f}")
            return self._buffer(st, x, age, skip)
        air = self.cfg.aircomp
        if air is not None and (g := channel_gain(self.seed, self._round, client)) < air.g_th:
            log.debug("round %d: client %d silent (AirComp |h|² %.4f)", self._round, client, g)
            return Transmission(client, TransmitStatus.TRUNCATED, score, detail=f"|h|² {g:.4f}")
        return _Route(pipe if self.cfg.compress else Pipeline.RAW, via, origin, score, age)

    def _neighbour(self, client: int) -> int | None:
        """The up, above-τ group member with the highest NQI (ties: lowest id), or None."""
        g = self.cfg.neighbour_group
        first = client - client % g
        up = [
            j
            for j in range(first, min(self.k, first + g))
            if j != client and not self._links.outage[j] and self._nqi[j] >= self.cfg.nqi.tau
        ]
        return max(up, key=lambda j: (self._nqi[j], -j)) if up else None

    def _buffer(self, st: _Tractor, x: torch.Tensor, age: int, tx: Transmission) -> Transmission:
        st.pending, st.pending_age = x, age + 1
        why = f"{tx.status.value}: {tx.detail}" if tx.detail else tx.status.value
        log.debug("round %d: client %d update buffered (%s)", self._round, tx.client, why)
        return tx

    def _send(
        self,
        enc: EncodedUpdate,
        dim: int,
        client: int,
        via: int | None,
        origin: int,
        score: float,
        age: int = 0,
        known: torch.Tensor | None = None,
    ) -> Transmission:
        """Hops of one encoded update: [tractor → neighbour →] server; decode on arrival.
        ``age``: the rounds its oldest content waited (recorded when delivered).

        ``known``: the decoding of ``enc.frames`` when the cohort path already has it (the
        encoder's finite reconstruction): used only if the receiver opened exactly those
        bytes, so the values are what decoding them gives; else they are decoded."""
        net = self.cfg.network
        overhead = OVERHEAD_BYTES if self.cfg.security.enabled else 0
        head = [] if self.header is None else [self.header(client)]
        payloads = [*head, *enc.frames]
        sizes = [len(f) + overhead for f in payloads]
        frames, hops = list(enumerate(payloads)), {}
        airtime = energy = elapsed = 0.0
        reason = ""
        if via is not None:  # local link to the neighbour, then its uplink (re-sealed)
            elapsed = 8.0 * sum(sizes) / (net.neighbour_mbps * 1e6)
            hops["tractor_neighbour"] = sum(sizes)
            airtime, energy = elapsed, net.tx_power_w[int(self.profiles[client])] * elapsed
            frames, reason = self._hop(frames, client, via, client)
        carried = [sizes[i] for i, _ in frames]  # not a prefix of ``sizes`` after a refusal
        _, b, l_ms = (float(v) for v in self._links.values[origin])
        done, t_air = frames_delivered(carried, b, l_ms, net.deadline_s - elapsed)
        hops["neighbour_server" if via is not None else "tractor_server"] = sum(carried[:done])
        airtime += t_air
        energy += net.tx_power_w[int(self.profiles[origin])] * t_air
        receiver = self.receivers.get(client, SERVER_ID)
        opened, why = self._hop(frames[:done], origin, receiver, client)
        arrived = [payload for _, payload in opened]
        latency = elapsed + l_ms / 1e3 + 8.0 * sum(carried) / (b * 1e6)
        status, detail = TransmitStatus.DELIVERED, ""
        values = header = None
        if reason or why or len(frames) < len(payloads):
            status, detail = TransmitStatus.REJECTED, f"envelope {reason or why}"
        elif done < len(frames):
            late = f"{len(frames) - done} of {len(frames)} frames past the deadline"
            status, detail = TransmitStatus.DEADLINE, late
        else:
            try:
                values = self._decoded(arrived[len(head) :], enc, dim, known)
                header = arrived[0] if head else None
            except PayloadError as err:
                status, detail = TransmitStatus.REJECTED, f"payload: {err}"
        delivered = status is TransmitStatus.DELIVERED
        return Transmission(
            client,
            status,
            score,
            enc.pipeline,
            via,
            hops,
            airtime,
            energy,
            latency,
            local_s=elapsed,
            buffered_rounds=age if delivered else 0,
            detail=detail,
            values=values,
            header=header,
        )

    @staticmethod
    def _decoded(
        got: list[bytes], enc: EncodedUpdate, dim: int, known: torch.Tensor | None
    ) -> torch.Tensor:
        """The receiver's ``[D]`` update from the payloads it opened: ``known`` (a copy)
        when they are exactly the encoder's bytes, else decoded.

        Raises:
            PayloadError: Malformed payloads.
        """
        if known is not None and tuple(got) == enc.frames:
            return known.clone()
        return decode_update(got, dim).values

    def superpose(self, deltas: torch.Tensor) -> None:
        """AirComp-FL (``aircomp`` set): the round's delivered updates ``[n, D]`` become one
        noisy analog sum — the common receiver noise is added to every row in place
        (:func:`geofl.network.aircomp.superpose`); otherwise nothing."""
        if self.cfg.aircomp is not None:
            self._air = superpose(deltas, self.cfg.aircomp, self.seed, self._round)

    # -- records and checkpoints -----------------------------------------------------------
    def summary(self, sent: list[Transmission]) -> dict[str, Any]:
        """The round's uplink figures for :attr:`RoundRecord.uplink` (003 §3.1.4); logs the
        round's outcomes by status in one INFO line (the per-tractor lines are DEBUG).

        ``bytes_by_hop`` counts every transmission (:func:`link_bytes`), ``status`` the
        tractors by outcome (the counts of :data:`ROUTINE` events by reason)."""
        hops: Counter[str] = Counter()
        for tx in sent:
            hops.update(tx.bytes_by_hop)
        delivered = [tx for tx in sent if tx.status is TransmitStatus.DELIVERED]
        pipe_bytes: Counter[str] = Counter()
        for tx in delivered:
            if tx.pipeline is not None:
                pipe_bytes[tx.pipeline.value] += link_bytes(tx)
        status = dict(sorted(Counter(tx.status.value for tx in sent).items()))
        if status:
            counts = ", ".join(f"{n} {s}" for s, n in status.items())
            log.info("round %d: uplink %s", self._round, counts)
        return {
            "bytes_by_hop": dict(sorted(hops.items())),
            "status": status,
            "pipeline": dict(
                sorted(Counter(tx.pipeline.value for tx in delivered if tx.pipeline).items())
            ),
            "pipeline_bytes": dict(sorted(pipe_bytes.items())),  # Table 8: bytes per update
            "forwarded": sum(tx.via is not None for tx in delivered),
            "airtime_s": sum(tx.airtime_s for tx in sent),
            "energy": sum(tx.energy for tx in sent),
            "latency_s": _mean([tx.latency_s for tx in delivered]),
            "latency_local_s": _mean([tx.local_s for tx in delivered]),
            "buffered_rounds": _mean([float(tx.buffered_rounds) for tx in delivered]),
            "nqi_mean": _mean([tx.nqi for tx in sent]),
            "envelope_rejections": dict(sorted(self.envelope_rejections.items())),
            "replays_accepted": self.replays_accepted,
        } | ({} if self._air is None else {"aircomp": vars(self._air).copy()})

    def state_dict(self) -> dict[str, Any]:
        """Tractor buffers/residuals, sealer counters, receiver windows (for resume)."""
        return {
            "tractors": [vars(t).copy() for t in self.tractors],
            "sealers": self.sealers,
            "openers": self.openers,
            "last_wire": self.last_wire,
            "envelope_rejections": dict(self.envelope_rejections),
            "replays_accepted": self.replays_accepted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.tractors = [_Tractor(**t) for t in state["tractors"]]
        self.sealers, self.openers = state["sealers"], state["openers"]
        self.last_wire = state["last_wire"]
        self.envelope_rejections = Counter(state["envelope_rejections"])
        self.replays_accepted = int(state["replays_accepted"])
