"""Where and when the space hops can happen: the contact model the hierarchy reads.

A cluster transmits from where its *current* driver is (003 §2.3.2: each driver keeps the
ephemeris-derived schedule of its location; §2.1.6: a failed driver is replaced by another
member). :class:`DriverContacts` answers from per-tractor plans
(:class:`~geofl.network.stations.StationContacts`: sgp4-propagated passes, a new driver's
plan computed at its election); :class:`IdealContacts` is the zero-delay model of the
synchronous reference — every cluster reaches its LEO and every LEO the GEO in every slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from geofl.network.stations import StationContacts

__all__ = [
    "Contacts",
    "DriverContacts",
    "IdealContacts",
    "downlink_contact",
    "downlink_slots",
    "leo_holdings",
]


class Contacts(Protocol):
    """Slot-level contact windows: station (a cluster's driver) ↔ LEO, LEO ↔ GEO.

    Attributes:
        slot_s: Slot length δ in seconds; slot ``s`` covers ``[s·δ, (s+1)·δ)``.
        n_leo: LEO satellites (0 … n_leo − 1).
    """

    @property
    def slot_s(self) -> float: ...

    @property
    def n_leo(self) -> int: ...

    def next_contact(self, cluster: int, station: int, slot: int) -> tuple[int, int] | None:
        """The first ``(slot, sat)`` at or after ``slot`` in which ``cluster``'s driver, the
        tractor ``station``, can transmit to a LEO (the Proximity Driver's pick), or None
        within the plan."""
        ...

    def next_relay(self, sat: int, slot: int) -> int | None:
        """The first slot at or after ``slot`` in which LEO ``sat`` reaches the GEO."""
        ...


@dataclass(frozen=True)
class IdealContacts:
    """Zero delay, full delivery: cluster c transmits to LEO ``c mod n_leo`` in every slot
    whoever drives it, and every LEO reaches the GEO in every slot.

    Attributes:
        slot_s: Slot length (s).
        n_leo: LEO satellites.
    """

    slot_s: float
    n_leo: int

    def leo_of(self, cluster: int) -> int:
        """The LEO a cluster always reaches."""
        return cluster % self.n_leo

    def next_contact(self, cluster: int, station: int, slot: int) -> tuple[int, int] | None:
        """``(slot, cluster mod n_leo)``: always now."""
        return slot, self.leo_of(cluster)

    def next_relay(self, sat: int, slot: int) -> int | None:
        """``slot``: always now."""
        return slot


@dataclass(frozen=True)
class DriverContacts:
    """Orbit contacts that follow the drivers: a cluster's passes are those of the tractor
    driving it (``station``), from that tractor's own plan.

    Attributes:
        plans: Per-tractor plans (station i = tractor i), computed on first use.
    """

    plans: StationContacts

    @property
    def slot_s(self) -> float:
        """Slot length δ (s)."""
        return self.plans.slot_s

    @property
    def n_leo(self) -> int:
        """LEO satellites."""
        return self.plans.n_leo

    def next_contact(self, cluster: int, station: int, slot: int) -> tuple[int, int] | None:
        """The first usable pass over tractor ``station`` at or after ``slot``."""
        return self.plans.next_contact(station, slot)

    def next_relay(self, sat: int, slot: int) -> int | None:
        """The first relay slot of LEO ``sat`` at or after ``slot``."""
        return self.plans.next_relay(sat, slot)


def leo_holdings(contacts: Contacts, release_s: float) -> list[int | None]:
    """The slot from which each LEO holds a model the GEO releases at ``release_s`` (its
    first relay slot at or after then; None: not within the plan)."""
    slot0 = int(release_s // contacts.slot_s)
    return [contacts.next_relay(sat, slot0) for sat in range(contacts.n_leo)]


def downlink_contact(
    contacts: Contacts, cluster: int, station: int, held: Sequence[int | None], slot: int
) -> tuple[int, int] | None:
    """The first ``(slot, sat)`` at or after ``slot`` in which the driver ``station`` of
    ``cluster`` is in contact with a LEO that already holds the model (``held``:
    :func:`leo_holdings`), or None within the plan."""
    while (contact := contacts.next_contact(cluster, station, slot)) is not None:
        s, sat = contact
        held_from = held[sat]
        if held_from is not None and held_from <= s:
            return s, sat
        slot = s + 1
    return None


def downlink_slots(
    contacts: Contacts, drivers: Sequence[int | None], now_s: float
) -> tuple[list[tuple[int, int] | None], int]:
    """When a model the GEO releases at ``now_s`` reaches each cluster's driver (003 §2.2.6:
    GEO → LEO, then LEO → driver during a later pass).

    Every LEO receives it at its first relay slot at or after ``now_s``; cluster c's driver
    ``drivers[c]`` (None: the cluster has none) gets it in its first contact slot whose LEO
    already holds it.

    Returns:
        ``(slot, sat)`` of each cluster (None: no driver, or not within the plan) and how
        many LEOs receive it.
    """
    held = leo_holdings(contacts, now_s)
    slot0 = int(now_s // contacts.slot_s)
    out = [
        None if d is None else downlink_contact(contacts, c, d, held, slot0)
        for c, d in enumerate(drivers)
    ]
    return out, sum(r is not None for r in held)
