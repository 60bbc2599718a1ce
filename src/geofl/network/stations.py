"""Contact plans that follow the stations in use: one plan per ground station, derived from
one shared ephemeris the first time the station is asked for (003 §2.3.2, §2.1.6).

003 §2.3.2 has each cluster driver keep "an ephemeris-derived schedule of LEO visibility";
when a driver fails, §2.1.6 re-elects another member, whose schedule is that of *its*
location. :class:`StationContacts` holds the satellites' :class:`~geofl.network.contacts.
Ephemeris` (propagated once) and every candidate station's location, and computes a
station's plan (:func:`~geofl.network.contacts.station_plan`) when it is first needed —
at a re-election, for the new driver — then caches it.

Deterministic and resumable by construction: a station's plan is always computed alone
(G = 1, so its elevations do not depend on which other stations share a matrix product),
its pass drops are keyed by the station's id (the tractor id in the hierarchy, so a tractor
has the same passes whichever role it holds and whenever its plan is computed), and the
ephemeris does not depend on the stations. The cache is therefore a pure function of
(ephemeris, location, id, mask, p_LEO-fail, seed) and needs no checkpointing: a resumed run
recomputes exactly the plans it needs.

Why lazily rather than precomputing every tractor (measured in ``benchmarks/
bench_contacts.py``): a plan costs ~0.6 µs per (station · slot) in a batch and ~3 µs
alone, so precomputing all 10,000 tractors of the scale benchmark over 12,000 slots
would take over a minute and ~120 MB of Proximity rows plus ~1.6 M pass records, while a
run only ever uses its drivers (one per cluster plus one per re-election).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from geofl.errors import OrbitError
from geofl.network.contacts import ContactPlan, Ephemeris, check_stations, station_plan

__all__ = ["StationContacts"]


class StationContacts:
    """Per-station contact plans over one ephemeris, computed on first use (module docstring).

    Args:
        eph: The satellites' ephemeris and relay mask.
        locations: ``[N, 2]`` latitude, longitude (degrees) of every station that may be
            asked for; station ``i`` (its id, the pass-drop key) is row ``i``.
        elevation_mask_deg: Minimum elevation for a contact.
        p_leo_fail: Probability a pass is dropped (003 §3.1.3).
        seed: Seed of the pass drops.

    Raises:
        OrbitError: naming ``stations[i]`` for a location outside [−90, 90] × [−180, 180].
    """

    def __init__(
        self,
        eph: Ephemeris,
        locations: np.ndarray,
        *,
        elevation_mask_deg: float = 10.0,
        p_leo_fail: float = 0.05,
        seed: int = 0,
    ) -> None:
        self.eph = eph
        self.locations = check_stations(locations)
        self.mask, self.p_fail, self.seed = elevation_mask_deg, p_leo_fail, seed
        self._plans: dict[int, ContactPlan] = {}

    @property
    def slot_s(self) -> float:
        """Slot length δ (s)."""
        return self.eph.slot_s

    @property
    def n_leo(self) -> int:
        """LEO satellites."""
        return self.eph.n_leo

    @property
    def computed(self) -> tuple[int, ...]:
        """Stations whose plan has been computed so far, ascending."""
        return tuple(sorted(self._plans))

    def plan(self, station: int) -> ContactPlan:
        """The one-station plan of ``station`` (computed on first use, then cached).

        Raises:
            OrbitError: when ``station`` is not a row of ``locations``.
        """
        got = self._plans.get(station)
        if got is None:
            if not 0 <= station < len(self.locations):
                raise OrbitError(
                    f"station {station}: outside the {len(self.locations)} known locations"
                )
            got = station_plan(
                self.eph,
                self.locations[station : station + 1],
                station_ids=(station,),
                elevation_mask_deg=self.mask,
                p_leo_fail=self.p_fail,
                seed=self.seed,
            )
            self._plans[station] = got
        return got

    def prepare(self, stations: Iterable[int]) -> None:
        """Compute the plans of ``stations`` now (e.g. the initial drivers, before a run)."""
        for s in stations:
            self.plan(int(s))

    def next_contact(self, station: int, slot: int) -> tuple[int, int] | None:
        """First ``(slot, sat)`` at or after ``slot`` in which ``station`` can transmit."""
        return self.plan(station).next_contact(0, slot)

    def next_relay(self, sat: int, slot: int) -> int | None:
        """First slot at or after ``slot`` in which LEO ``sat`` can reach the GEO, or None."""
        if not 0 <= sat < self.eph.n_leo:
            raise IndexError(f"sat {sat} outside [0, {self.eph.n_leo})")
        row = self.eph.relay[sat, max(slot, 0) :]
        k = int(np.argmax(row)) if row.size else 0
        return max(slot, 0) + k if row.size and row[k] else None
