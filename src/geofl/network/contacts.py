"""Contact windows of ground stations with LEO satellites, and LEO → GEO relays (003 §2.3.2).

003 §2.3.2: each cluster driver keeps an ephemeris-derived schedule of LEO visibility in
slots of δ = 30 s (§3.1.3); it transmits to at most one LEO per slot, the one chosen by the
"Proximity Driver" (highest predicted link quality / shortest slant range); a LEO forwards
to the GEO when within its relay footprint, else buffers on board; each LEO pass is
dropped with probability p_LEO-fail = 0.05 (weather, hardware; §3.1.3).

Two steps, so that a station's schedule can be derived when it becomes a driver:

* :func:`ephemeris` — sgp4's vectorised ``SatrecArray`` propagates all satellites at every
  slot start, positions go to Earth-fixed axes by GMST (:mod:`geofl.network.orbits`), and
  the relay mask is computed: LEO s reaches the GEO in slot t when the segment between them
  stays above the Earth — a sphere of the WGS84 equatorial radius (the polar flattening,
  ≤ 21 km, is ignored, which errs on the blocking side) plus ``relay_margin_km`` of grazing
  altitude (0 by default; e.g. 100 km keeps an optical link out of the atmosphere). It does
  not depend on the stations.
* :func:`station_plan` — the plan of G stations over an ephemeris: the elevation of every
  (station, satellite, slot) comes from two [G, S·T'] matrix products per chunk of T' slots,
  chunked so that a chunk holds about 4 M elements (memory bounded whatever G and T). A slot
  is in a pass when the elevation at its start is at least the mask (10° by default). Passes
  and their drops (keyed by station id, :mod:`geofl.network.passes`) and the Proximity
  Driver's choice per slot follow.

:func:`contact_plan` is both at once. Passes already in progress at slot 0 start at 0,
those still open at the end end at ``n_slots`` (truncated windows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from geofl.errors import OrbitError
from geofl.network.orbits import (
    GEO_MEAN_MOTION,
    WGS84_A_KM,
    Tle,
    check_location,
    gmst82,
    julian_dates,
    propagate,
    station_frames,
    teme_to_ecef,
    to_utc,
)
from geofl.network.passes import Pass, PassTracker, pass_uniform, proximity_driver

__all__ = [
    "ContactPlan",
    "Ephemeris",
    "Pass",
    "check_stations",
    "classify",
    "contact_plan",
    "ephemeris",
    "pass_uniform",
    "station_plan",
]

#: Elements of a chunk's [G, S, T'] elevation tensor (≈ 32 MB per float64 array).
CHUNK_ELEMENTS = 1 << 22
#: LEO: mean motion above 11.25 rev/day (period below 128 min); GEO: within 10 % of one
#: revolution per sidereal day.
LEO_MIN_REV_DAY = 11.25
GEO_TOLERANCE = 0.1


@dataclass(frozen=True, eq=False)
class ContactPlan:
    """The contact schedule of G stations with S LEOs and one GEO (003 §2.3.2).

    Attributes:
        slot_s: Slot length δ in seconds.
        n_slots: Number of slots T.
        start: UTC start of slot 0.
        n_stations: G; rows 0 … G − 1 of ``proximity`` and ``geo_visible``.
        n_leo: S.
        passes: Every LEO pass over every station, sorted (start_slot, station row, sat);
            :attr:`Pass.station` is the station's id.
        relay: [S, T] bool — LEO s can reach the GEO in slot t.
        geo_visible: [G] bool — the station sees the GEO above the mask in every slot.
        proximity: [G, T] int8 (int16 beyond 127 LEOs) — the LEO a station transmits to in
            each slot, −1 for none
            (undropped, highest elevation: the Proximity Driver).
        station_ids: [G] the stations' ids (the pass-drop keys); empty: ids are the rows.

    The arrays are read-only; compare plans by their fields, not with ``==``.
    """

    slot_s: float
    n_slots: int
    start: datetime
    n_stations: int
    n_leo: int
    passes: tuple[Pass, ...]
    relay: np.ndarray
    geo_visible: np.ndarray
    proximity: np.ndarray = field(repr=False)
    station_ids: tuple[int, ...] = ()

    def _check(self, what: str, index: int, size: int) -> None:
        if not 0 <= index < size:
            raise IndexError(f"{what} {index} outside [0, {size})")

    def slot_at(self, seconds: float) -> int:
        """The slot containing ``seconds`` after ``start`` (may be ≥ ``n_slots``)."""
        return math.floor(seconds / self.slot_s)

    def usable(self, station: int, slot: int) -> int | None:
        """The LEO ``station`` transmits to in ``slot`` (at most one), or None."""
        self._check("station", station, self.n_stations)
        self._check("slot", slot, self.n_slots)
        sat = int(self.proximity[station, slot])
        return sat if sat >= 0 else None

    def next_contact(self, station: int, slot: int) -> tuple[int, int] | None:
        """First (slot, sat) at or after ``slot`` in which ``station`` can transmit, or None."""
        self._check("station", station, self.n_stations)
        row = self.proximity[station, max(slot, 0) :]
        hit = row >= 0
        k = int(np.argmax(hit)) if row.size else 0
        return (max(slot, 0) + k, int(row[k])) if row.size and hit[k] else None

    def next_relay(self, sat: int, slot: int) -> int | None:
        """First slot at or after ``slot`` in which LEO ``sat`` can reach the GEO, or None."""
        self._check("sat", sat, self.n_leo)
        row = self.relay[sat, max(slot, 0) :]
        k = int(np.argmax(row)) if row.size else 0
        return max(slot, 0) + k if row.size and row[k] else None


def classify(tles: Sequence[Tle]) -> tuple[list[Tle], Tle]:
    """Split element sets into LEOs (file order) and the one GEO, by mean motion.

    Raises:
        OrbitError: naming the satellite, if one is neither LEO nor GEO, or if there is not
            exactly one GEO or no LEO.
    """
    leos, geos = [], []
    for t in tles:
        n = t.mean_motion
        if n > LEO_MIN_REV_DAY:
            leos.append(t)
        elif abs(n - GEO_MEAN_MOTION) <= GEO_TOLERANCE * GEO_MEAN_MOTION:
            geos.append(t)
        else:
            raise OrbitError(
                f"TLE {t.name!r}: mean motion {n} rev/day is neither LEO (> {LEO_MIN_REV_DAY}) "
                "nor GEO (≈ 1.0027) — the space layer has LEOs and one GEO (003 §2.3.2)"
            )
    if len(geos) != 1 or not leos:
        raise OrbitError(
            f"tles: {len(leos)} LEO and {len(geos)} GEO element sets — give at least one LEO "
            "and exactly one GEO (003 §2.3.2)"
        )
    return leos, geos[0]


def check_stations(stations: np.ndarray) -> np.ndarray:
    """``stations`` as a float64 [G, 2] (lat, lon) array, G ≥ 1.

    Raises:
        OrbitError: naming ``stations`` (shape) or ``stations[i]`` (a location outside
            [−90, 90] × [−180, 180]).
    """
    arr = np.asarray(stations, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] == 0:
        raise OrbitError(
            f"stations: shape {arr.shape} — give a [G, 2] array of (lat, lon) degrees, G ≥ 1"
        )
    ok = np.isfinite(arr).all(axis=1)
    ok &= (np.abs(arr[:, 0]) <= 90.0) & (np.abs(arr[:, 1]) <= 180.0)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        check_location(float(arr[i, 0]), float(arr[i, 1]), field=f"stations[{i}]")
    return arr


def _sin_elevation(r_ecef: np.ndarray, pos: np.ndarray, up: np.ndarray) -> np.ndarray:
    """sin(elevation) of [S, T', 3] satellites from [G, 3] stations → [G, S, T'].

    sin e = up · (r − p) / |r − p| with |r − p|² = |r|² − 2 p · r + |p|²: both are
    [G, 5] × [5, S·T'] matrix products with the satellites augmented as (r, |r|², 1).
    """
    s, t, _ = r_ecef.shape
    flat = r_ecef.reshape(-1, 3)
    one = np.ones((len(flat), 1))
    sat = np.hstack([flat, np.einsum("ni,ni->n", flat, flat)[:, None], one])  # [N, 5]
    zero = np.zeros((len(pos), 1))
    c_up = np.einsum("gi,gi->g", up, pos)[:, None]
    p2 = np.einsum("gi,gi->g", pos, pos)[:, None]
    along = np.hstack([up, zero, -c_up]) @ sat.T  # up · (r − p)
    rho = np.hstack([-2.0 * pos, zero + 1.0, p2]) @ sat.T  # |r − p|²
    np.sqrt(rho, out=rho)
    along /= rho
    return np.asarray(along).reshape(len(pos), s, t)


def _relay(leo: np.ndarray, geo: np.ndarray, margin_km: float) -> np.ndarray:
    """[S, T'] bool: the segment LEO → GEO clears a sphere of radius R + margin.

    Args:
        leo: [S, T', 3] positions; geo: [T', 3] positions (same frame, km).
    """
    d = geo[None] - leo
    u = np.clip(-np.einsum("stk,stk->st", leo, d) / np.einsum("stk,stk->st", d, d), 0.0, 1.0)
    closest = leo + u[..., None] * d
    radius = WGS84_A_KM + margin_km
    return np.asarray(np.einsum("stk,stk->st", closest, closest) > radius * radius)


def _check_args(n_slots: int, slot_s: float, mask: float, p: float, margin: float) -> None:
    checks = (
        ("n_slots", n_slots, n_slots >= 1, "at least 1"),
        ("slot_s", slot_s, math.isfinite(slot_s) and slot_s > 0, "positive seconds"),
        ("elevation_mask_deg", mask, 0.0 <= mask < 90.0, "in [0, 90)"),
        ("p_leo_fail", p, 0.0 <= p <= 1.0, "a probability in [0, 1]"),
        ("relay_margin_km", margin, math.isfinite(margin) and margin >= 0, "≥ 0 km"),
    )
    for name, value, ok, need in checks:
        if not ok:
            raise OrbitError(f"{name}: {value!r} — must be {need}")


@dataclass(frozen=True, eq=False)
class Ephemeris:
    """Where the satellites are at every slot start, and when each LEO reaches the GEO.

    Attributes:
        slot_s: Slot length δ in seconds.
        n_slots: Number of slots T.
        start: UTC start of slot 0.
        n_leo: S.
        ecef: [S + 1, T, 3] Earth-fixed positions (km): the LEOs in TLE order, then the GEO.
        relay: [S, T] bool — LEO s can reach the GEO in slot t.

    The arrays are read-only.
    """

    slot_s: float
    n_slots: int
    start: datetime
    n_leo: int
    ecef: np.ndarray = field(repr=False)
    relay: np.ndarray = field(repr=False)


def ephemeris(
    tles: Sequence[Tle],
    *,
    start: datetime,
    n_slots: int,
    slot_s: float = 30.0,
    relay_margin_km: float = 0.0,
) -> Ephemeris:
    """Propagate LEOs and the GEO over ``n_slots`` slots and mark the relay slots.

    Args: as :func:`contact_plan`. Memory: (S + 1)·T·3 float64 (2.6 MB for 9 satellites
    over 12,000 slots).

    Raises:
        OrbitError: bad argument, TLEs that are not LEOs + one GEO, or a satellite sgp4
            cannot propagate.
    """
    _check_args(n_slots, slot_s, 0.0, 0.0, relay_margin_km)
    leos, geo = classify(tles)
    jd, fr = julian_dates(start, n_slots, slot_s)
    r = propagate([*leos, geo], jd, fr)  # [S + 1, T, 3] TEME
    s = len(leos)
    relay = _relay(r[:s], r[s], relay_margin_km)
    ecef = teme_to_ecef(r, gmst82(jd, fr))
    for arr in (relay, ecef):
        arr.flags.writeable = False
    return Ephemeris(float(slot_s), n_slots, to_utc(start), s, ecef, relay)


def station_plan(
    eph: Ephemeris,
    stations: np.ndarray,
    *,
    station_ids: Sequence[int] | None = None,
    elevation_mask_deg: float = 10.0,
    p_leo_fail: float = 0.05,
    seed: int = 0,
) -> ContactPlan:
    """The contact plan of ``stations`` over ``eph`` (003 §2.3.2; module docstring).

    Args:
        eph: The satellites' :func:`ephemeris`.
        stations: [G, 2] latitude, longitude of the stations in degrees.
        station_ids: [G] the stations' ids, the pass-drop keys; default 0 … G − 1.
        elevation_mask_deg, p_leo_fail, seed: as :func:`contact_plan`.

    Raises:
        OrbitError: bad station location (naming ``stations[i]``) or bad argument.
    """
    _check_args(eph.n_slots, eph.slot_s, elevation_mask_deg, p_leo_fail, 0.0)
    coords = check_stations(stations)
    g, s, n_slots = len(coords), eph.n_leo, eph.n_slots
    ids = np.arange(g) if station_ids is None else np.asarray(station_ids, dtype=np.int64)
    if ids.shape != (g,):
        raise OrbitError(f"station_ids: {ids.shape} ids for {g} stations — give one per station")
    pos, up = station_frames(coords)
    sin_mask = math.sin(math.radians(elevation_mask_deg))
    chunk = max(1, CHUNK_ELEMENTS // (g * (s + 1)))
    proximity = np.full((g, n_slots), -1, dtype=np.int8 if s < 128 else np.int16)
    geo_min = np.full(g, np.inf)
    tracker = PassTracker(ids, s, seed, p_leo_fail)
    for t0 in range(0, n_slots, chunk):
        t1 = min(n_slots, t0 + chunk)
        sin_el = _sin_elevation(eph.ecef[:, t0:t1], pos, up)
        geo_min = np.minimum(geo_min, sin_el[:, s].min(axis=1))
        leo_el = sin_el[:, :s]
        usable = tracker.add(leo_el, leo_el >= sin_mask, t0, final=t1 == n_slots)
        proximity[:, t0:t1] = proximity_driver(usable)
    proximity.flags.writeable = False
    visible = geo_min >= sin_mask
    visible.flags.writeable = False
    return ContactPlan(
        slot_s=eph.slot_s,
        n_slots=n_slots,
        start=eph.start,
        n_stations=g,
        n_leo=s,
        passes=tracker.passes(),
        relay=eph.relay,
        geo_visible=visible,
        proximity=proximity,
        station_ids=() if station_ids is None else tuple(ids.tolist()),
    )


def contact_plan(
    tles: Sequence[Tle],
    stations: np.ndarray,
    *,
    start: datetime,
    n_slots: int,
    slot_s: float = 30.0,
    elevation_mask_deg: float = 10.0,
    p_leo_fail: float = 0.05,
    seed: int = 0,
    relay_margin_km: float = 0.0,
    station_ids: Sequence[int] | None = None,
) -> ContactPlan:
    """The contact plan of stations with LEOs and the GEO over ``n_slots`` slots (003 §2.3.2):
    :func:`station_plan` over :func:`ephemeris`.

    Args:
        tles: LEO element sets and exactly one GEO (told apart by mean motion).
        stations: [G, 2] latitude, longitude of the stations (drivers) in degrees.
        start: UTC time of slot 0 (naive means UTC).
        n_slots: Number of slots T.
        slot_s: Slot length δ (30 s in 003 §3.1.3); positions are sampled at slot starts.
        elevation_mask_deg: Minimum elevation for a contact.
        p_leo_fail: Probability a pass is dropped (0.05 in 003 §3.1.3).
        seed: Seed of the pass drops.
        relay_margin_km: Grazing altitude an LEO → GEO line of sight must keep.
        station_ids: [G] the stations' ids (pass-drop keys); default 0 … G − 1.

    Returns:
        The plan; ``usable`` / ``next_contact`` / ``next_relay`` answer the engine's queries.

    Raises:
        OrbitError: bad station location (naming ``stations[i]``), bad argument, TLEs that
            are not LEOs + one GEO, or a satellite sgp4 cannot propagate.
    """
    _check_args(n_slots, slot_s, elevation_mask_deg, p_leo_fail, relay_margin_km)
    coords = check_stations(stations)
    eph = ephemeris(
        tles, start=start, n_slots=n_slots, slot_s=slot_s, relay_margin_km=relay_margin_km
    )
    return station_plan(
        eph,
        coords,
        station_ids=station_ids,
        elevation_mask_deg=elevation_mask_deg,
        p_leo_fail=p_leo_fail,
        seed=seed,
    )
