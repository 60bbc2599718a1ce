"""The hierarchy's events, the records they carry, and a deterministic event queue (the
simulated clock; 003 §2.2, §2.3.2).

The asynchronous satellite hierarchy (:mod:`geofl.engine.hierarchy.scheduler`) is driven by
events at simulated times: a tractor's update reaching its cluster driver, a driver's
deadline, a driver model reaching a LEO in a contact slot, a LEO relaying to the GEO, a
global model reaching a driver on the way down. Events are ordered by ``(time_s, kind,
seq)``: time first, then a fixed precedence of kinds at the same instant (a model arriving
at a driver is handled before that driver's deadline at the same second), then insertion
order — so the order never depends on hashing, memory addresses or anything but what was
scheduled, and a queue saved in a checkpoint pops the same sequence after a resume.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import torch

__all__ = [
    "Downlink",
    "DriverDeadline",
    "Event",
    "EventKind",
    "EventQueue",
    "LeoArrival",
    "Relay",
    "SpacePacket",
    "TierModel",
    "TractorArrival",
    "TractorArrivals",
    "TractorUpdate",
]


class EventKind(IntEnum):
    """Event kinds in their precedence at the same simulated instant."""

    DOWNLINK = 0  # a global model version reaches a cluster driver (and its tractors)
    TRACTOR_ARRIVAL = 1  # a tractor's update reaches its cluster driver
    DRIVER_DEADLINE = 2  # the driver aggregates its cluster's arrived updates
    LEO_ARRIVAL = 3  # a driver model reaches a LEO in a contact slot
    RELAY = 4  # a LEO aggregates its buffer and forwards the regional model to the GEO


@dataclass(frozen=True)
class TractorUpdate:
    """One tractor's update as its driver receives it.

    Attributes:
        client: The tractor.
        produced_round: t', the round the update started from: 1 + the global model
            version the tractor held when it trained (staleness at the GEO is t − t').
        model: ``[D]`` the tractor's model w_i = w^{version} + Δw_i.
        delta: ``[D]`` its update Δw_i.
        num_samples: n_i, its FedAvg weight at the driver.
        created_s: Simulated time the update was created (end of local training).
    """

    client: int
    produced_round: int
    model: torch.Tensor
    delta: torch.Tensor
    num_samples: int
    created_s: float


@dataclass(frozen=True)
class TierModel:
    """An aggregate travelling up the hierarchy (a driver's cluster model or a LEO's
    regional model) with what the tiers above need (003 §2.2.4, Alg. 3).

    Attributes:
        model: ``[D]`` the aggregated model w̄.
        delta: ``[D]`` the same aggregation applied to the members' updates Δw.
        produced_round: t' of the oldest update it contains (Eq. 8's staleness source).
        num_samples: Σ n_i of its tractors.
        clients: The tractors whose updates it contains (sorted).
        farms: Their farms (UniqueFarmCount, Eq. 11).
        bins: Their context bins, one per tractor update (H_l, §2.3.4).
        attempts: Uplink transmissions attempted in its clusters since their last
            driver aggregation.
        nqi_lost: Of those, not delivered because of NQI < τ_NQI or an outage (NQI_loss).
        clusters: The clusters it covers (sorted).
        created_s: Simulated time it was produced (for per-hop latencies).
        tractor_weights: Each tractor's share of it (aligned with ``clients``, sum 1).
        client_rounds: t' of each tractor's update (aligned with ``clients``).
        client_created: Creation time of each tractor's update (aligned with ``clients``).
    """

    model: torch.Tensor
    delta: torch.Tensor
    produced_round: int
    num_samples: int
    clients: tuple[int, ...]
    farms: frozenset[int]
    bins: tuple[int, ...]
    attempts: int
    nqi_lost: int
    clusters: tuple[int, ...]
    created_s: float
    tractor_weights: tuple[float, ...]
    client_rounds: tuple[int, ...]
    client_created: tuple[float, ...]


@dataclass(frozen=True)
class TractorArrival:
    """``update`` reaches the driver of ``cluster``."""

    cluster: int
    update: TractorUpdate
    kind: EventKind = EventKind.TRACTOR_ARRIVAL


@dataclass(frozen=True)
class TractorArrivals:
    """``updates`` reach the drivers of ``clusters`` (aligned with them) at one instant, in
    upload order: the uploads of a round that land together as one event instead of one
    each (issue 36: at 10,000 tractors the per-upload events were a tenth of the clock).
    Handled as that many :class:`TractorArrival` in a row, which is how they would pop."""

    clusters: tuple[int, ...]
    updates: tuple[TractorUpdate, ...]
    kind: EventKind = EventKind.TRACTOR_ARRIVAL


@dataclass(frozen=True)
class DriverDeadline:
    """The driver of ``cluster`` aggregates what arrived for round ``round``."""

    cluster: int
    round: int
    kind: EventKind = EventKind.DRIVER_DEADLINE


@dataclass(frozen=True)
class SpacePacket:
    """One space-hop transmission as it left its sender (:mod:`geofl.engine.hierarchy.links`).

    Attributes:
        hop: ``driver_leo`` or ``leo_geo``.
        sender: Node id of the sender (a driver's tractor id, or a LEO's).
        receiver: Node id of the receiver (a LEO's or the GEO's).
        wires: The sealed frames (the bare frames when envelopes are off).
        meta: The aggregate's bookkeeping, with empty ``model`` and ``delta``.
        base_version: The global version a driver's update is relative to (−1: none).
        nbytes: Bytes on the wire (frames, tags, envelope headers and tags).
        airtime_s: 8 · nbytes / rate.
        energy: P_tx · airtime_s (the energy proxy).
        frames: The frames before sealing (a re-elected driver re-seals them for its own
            pass: :meth:`~geofl.engine.hierarchy.links.SpaceLinks.reseal`).
        tries: Times a pass refused it so far (its retries, bounded by R_max:
            :meth:`~geofl.engine.hierarchy.drivers.DriverStations.retry`).
    """

    hop: str
    sender: int
    receiver: int
    wires: tuple[bytes, ...]
    meta: TierModel
    base_version: int
    nbytes: int
    airtime_s: float
    energy: float
    frames: tuple[bytes, ...] = ()
    tries: int = 0


@dataclass(frozen=True)
class LeoArrival:
    """A driver's sealed, encoded cluster model reaches LEO ``sat`` in a pass over
    ``station`` (the tractor driving the cluster when the pass was scheduled; −1: not a
    located station)."""

    sat: int
    packet: SpacePacket
    station: int = -1
    kind: EventKind = EventKind.LEO_ARRIVAL


@dataclass(frozen=True)
class Relay:
    """LEO ``sat`` can reach the GEO: regional FedAvg of its buffer, forward."""

    sat: int
    kind: EventKind = EventKind.RELAY


@dataclass(frozen=True)
class Downlink:
    """Global model ``version`` reaches the driver of ``cluster`` (and its tractors) from
    LEO ``sat`` in a pass over ``station`` (the driving tractor; −1: not recorded)."""

    cluster: int
    version: int
    station: int = -1
    sat: int = -1
    kind: EventKind = EventKind.DOWNLINK


Event = TractorArrival | TractorArrivals | DriverDeadline | LeoArrival | Relay | Downlink


class EventQueue:
    """A heap of ``(time_s, kind, seq, event)``; equal keys pop in insertion order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time_s: float, event: Event) -> None:
        """Schedule ``event`` at simulated time ``time_s`` (seconds)."""
        heapq.heappush(self._heap, (float(time_s), int(event.kind), self._seq, event))
        self._seq += 1

    def peek_time(self) -> float | None:
        """Time of the next event, or None when the queue is empty."""
        return self._heap[0][0] if self._heap else None

    def pop_until(self, end_s: float, *, inclusive: bool = False) -> Iterator[tuple[float, Event]]:
        """Pop events with time < ``end_s`` (≤ when ``inclusive``) in order, including any
        pushed while iterating that fall in the window."""
        while self._heap and (
            self._heap[0][0] < end_s or (inclusive and self._heap[0][0] == end_s)
        ):
            time_s, _, _, event = heapq.heappop(self._heap)
            yield time_s, event

    def pending(self) -> list[tuple[float, Event]]:
        """Every scheduled event in pop order (a copy; for records and tests)."""
        return [(t, e) for t, _, _, e in sorted(self._heap)]

    def take(self, which: Callable[[Event], bool]) -> list[tuple[float, Event]]:
        """Remove the scheduled events for which ``which`` holds; returns them in pop order
        (to reschedule them: a driver's pending transmissions after a re-election)."""
        out = sorted(item for item in self._heap if which(item[3]))
        if out:
            taken = {item[2] for item in out}
            self._heap = [item for item in self._heap if item[2] not in taken]
            heapq.heapify(self._heap)
        return [(t, e) for t, _, _, e in out]

    def state_dict(self) -> dict[str, Any]:
        """The heap and the sequence counter (for a checkpoint)."""
        return {"heap": list(self._heap), "seq": self._seq}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self._heap = [(t, k, q, e) for t, k, q, e in state["heap"]]
        heapq.heapify(self._heap)
        self._seq = int(state["seq"])
