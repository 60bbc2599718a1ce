"""Where and when the space hops can happen: the contact model the hierarchy reads.

:class:`~geofl.network.contacts.ContactPlan` (sgp4-propagated passes, 003 §2.3.2) satisfies
:class:`Contacts`; :class:`IdealContacts` is the zero-delay model of the synchronous
reference — every cluster reaches its LEO and every LEO the GEO in every slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Contacts", "IdealContacts", "downlink_slots"]


class Contacts(Protocol):
    """Slot-level contact windows: station (cluster driver) ↔ LEO, LEO ↔ GEO.

    Attributes:
        slot_s: Slot length δ in seconds; slot ``s`` covers ``[s·δ, (s+1)·δ)``.
        n_leo: LEO satellites (0 … n_leo − 1).
    """

    @property
    def slot_s(self) -> float: ...

    @property
    def n_leo(self) -> int: ...

    def next_contact(self, station: int, slot: int) -> tuple[int, int] | None:
        """The first ``(slot, sat)`` at or after ``slot`` in which ``station`` can transmit
        to a LEO (the Proximity Driver's pick), or None within the plan."""
        ...

    def next_relay(self, sat: int, slot: int) -> int | None:
        """The first slot at or after ``slot`` in which LEO ``sat`` reaches the GEO."""
        ...


@dataclass(frozen=True)
class IdealContacts:
    """Zero delay, full delivery: cluster c transmits to LEO ``c mod n_leo`` in every slot,
    and every LEO reaches the GEO in every slot.

    Attributes:
        slot_s: Slot length (s).
        n_leo: LEO satellites.
    """

    slot_s: float
    n_leo: int

    def leo_of(self, station: int) -> int:
        """The LEO a cluster always reaches."""
        return station % self.n_leo

    def next_contact(self, station: int, slot: int) -> tuple[int, int] | None:
        """``(slot, station mod n_leo)``: always now."""
        return slot, self.leo_of(station)

    def next_relay(self, sat: int, slot: int) -> int | None:
        """``slot``: always now."""
        return slot


def downlink_slots(
    contacts: Contacts, n_stations: int, now_s: float
) -> tuple[list[int | None], int]:
    """When a model the GEO releases at ``now_s`` reaches each station (003 §2.2.6: GEO →
    LEO, then LEO → driver during a later pass).

    Every LEO receives it at its first relay slot at or after ``now_s``; a station gets it
    in its first contact slot whose LEO already holds it.

    Returns:
        The slot of each station (None: not within the plan) and how many LEOs receive it.
    """
    slot0 = int(now_s // contacts.slot_s)
    relay = [contacts.next_relay(sat, slot0) for sat in range(contacts.n_leo)]
    out: list[int | None] = []
    for station in range(n_stations):
        slot, got = slot0, None
        while (contact := contacts.next_contact(station, slot)) is not None:
            s, sat = contact
            held_from = relay[sat]
            if held_from is not None and held_from <= s:
                got = s
                break
            slot = s + 1
        out.append(got)
    return out, sum(r is not None for r in relay)
