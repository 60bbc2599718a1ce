"""Contact windows of cluster drivers with LEO satellites, and LEO → GEO relays (003 §2.3.2).

003 §2.3.2: each cluster driver keeps an ephemeris-derived schedule of LEO visibility in
slots of δ = 30 s (§3.1.3); it transmits to at most one LEO per slot, the one chosen by the
"Proximity Driver" (highest predicted link quality / shortest slant range); a LEO forwards
to the GEO when within its relay footprint, else buffers on board; each LEO pass is
dropped with probability p_LEO-fail = 0.05 (weather, hardware; §3.1.3).

:func:`contact_plan` builds that schedule for G stations (drivers), S LEOs and one GEO:

* sgp4's vectorised ``SatrecArray`` propagates all satellites at every slot start, then
  positions go to Earth-fixed axes by GMST (:mod:`geofl.network.orbits`).
* The elevation of every (station, satellite, slot) comes from two [G, S·T'] matrix products
  per chunk of T' slots, chunked so that a chunk holds about 4 M elements (memory bounded
  whatever G and T). A slot is in a pass when the elevation at its start is at least the
  mask (10° by default).
* A pass is a maximal run of visible slots of one (station, LEO); it is dropped when its
  uniform draw u is below p_LEO-fail, u = ``derive_seed(seed, "leo_pass", station, sat,
  start slot) / 2**63`` — the keyed hash with which :mod:`geofl.rng` seeds its generators,
  used as a one-draw counter-based generator (a PCG64 per pass, for ~300 k passes, cost
  5× more). A pass's fate therefore depends on nothing but its keys: not on which other
  passes, stations or slots are simulated.
* Proximity Driver: in each slot a station uses the undropped visible LEO of highest
  elevation (for equal-altitude satellites, the shortest slant range).
* Relay: LEO s reaches the GEO in slot t when the segment between them stays above the
  Earth — a sphere of the WGS84 equatorial radius (the polar flattening, ≤ 21 km, is
  ignored, which errs on the blocking side) plus ``relay_margin_km`` of grazing altitude
  (0 by default; e.g. 100 km keeps an optical link out of the atmosphere).

Passes already in progress at slot 0 start at 0, those still open at the end end at
``n_slots`` (truncated windows).
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
from geofl.rng import derive_seed

__all__ = ["ContactPlan", "Pass", "classify", "contact_plan", "pass_uniform"]

#: Elements of a chunk's [G, S, T'] elevation tensor (≈ 32 MB per float64 array).
CHUNK_ELEMENTS = 1 << 22
#: LEO: mean motion above 11.25 rev/day (period below 128 min); GEO: within 10 % of one
#: revolution per sidereal day.
LEO_MIN_REV_DAY = 11.25
GEO_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class Pass:
    """One LEO pass over one station: slots ``[start_slot, end_slot)`` above the mask.

    Attributes:
        station: Station (driver) index.
        sat: LEO index (0 … n_leo − 1, order of the LEO TLEs).
        start_slot: First slot in view.
        end_slot: First slot after the pass.
        max_elevation_deg: Highest elevation sampled in the pass.
        dropped: Lost with probability p_LEO-fail (003 §3.1.3); unusable for the whole pass.
    """

    station: int
    sat: int
    start_slot: int
    end_slot: int
    max_elevation_deg: float
    dropped: bool


@dataclass(frozen=True, eq=False)
class ContactPlan:
    """The contact schedule of G stations with S LEOs and one GEO (003 §2.3.2).

    Attributes:
        slot_s: Slot length δ in seconds.
        n_slots: Number of slots T.
        start: UTC start of slot 0.
        n_stations: G.
        n_leo: S.
        passes: Every LEO pass over every station, sorted (start_slot, station, sat).
        relay: [S, T] bool — LEO s can reach the GEO in slot t.
        geo_visible: [G] bool — the station sees the GEO above the mask in every slot.
        proximity: [G, T] int8 (int16 beyond 127 LEOs) — the LEO a station transmits to in
            each slot, −1 for none
            (undropped, highest elevation: the Proximity Driver).

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


def _check_stations(stations: np.ndarray) -> np.ndarray:
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


def pass_uniform(seed: int, station: int, sat: int, start_slot: int) -> float:
    """The uniform in [0, 1) that decides whether a pass is dropped (003 §3.1.3).

    ``derive_seed(seed, "leo_pass", station, sat, start_slot) / 2**63`` (module docstring).
    """
    return derive_seed(seed, "leo_pass", station, sat, start_slot) / float(1 << 63)


class _PassTracker:
    """Runs of visible slots per (station, LEO) row, accumulated chunk after chunk.

    A run touching the end of a chunk stays open (its start slot, peak and fate carried)
    and continues with the run starting at column 0 of the next chunk.
    """

    def __init__(self, n_stations: int, n_leo: int, seed: int, p_fail: float) -> None:
        self.n_leo, self.seed, self.p_fail = n_leo, seed, p_fail
        rows = n_stations * n_leo
        self.open_start = np.full(rows, -1, dtype=np.int64)
        self.open_peak = np.full(rows, -np.inf)
        self.open_drop = np.zeros(rows, dtype=bool)
        self.closed: list[tuple[np.ndarray, ...]] = []

    def _dropped(self, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Fate of new passes: dropped iff pass_uniform(seed, station, sat, start) < p."""
        station, sat = np.divmod(rows, self.n_leo)
        keys = zip(station.tolist(), sat.tolist(), starts.tolist(), strict=True)
        draws = [pass_uniform(self.seed, g, s, t) for g, s, t in keys]
        return np.asarray(draws, dtype=np.float64).reshape(-1) < self.p_fail

    def add(self, sin_el: np.ndarray, vis: np.ndarray, t0: int, final: bool) -> np.ndarray:
        """Record the runs of one chunk.

        Args:
            sin_el: [G, S, T'] sin(elevation); vis: [G, S, T'] above the mask.
            t0: Slot of the chunk's column 0.
            final: Last chunk (close every open run at its end).

        Returns:
            [G, S, T'] ``sin_el`` where usable (visible, pass not dropped), else −inf.
        """
        g, s, tc = vis.shape
        width = tc + 2  # one False column either side keeps runs inside their row
        pad = np.zeros((g * s, width), dtype=bool)
        pad[:, 1:-1] = vis.reshape(g * s, tc)
        flat = pad.ravel()
        edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1  # alternating run starts, ends
        row = edges[0::2] // width
        c0, c1 = edges[0::2] - row * width - 1, edges[1::2] - row * width - 1
        el = np.where(vis, sin_el, -np.inf).reshape(g * s, tc)
        first = row * tc + c0  # unpadded flat index of each run's first slot
        peak = np.maximum.reduceat(el.ravel(), first) if first.size else np.empty(0)
        cont = (c0 == 0) & (self.open_start[row] >= 0)
        start_slot = np.where(cont, self.open_start[row], t0 + c0)
        peak = np.where(cont, np.maximum(peak, self.open_peak[row]), peak)
        drop = self.open_drop[row].copy()
        drop[~cont] = self._dropped(row[~cont], start_slot[~cont])
        ended = self.open_start >= 0  # open passes not continued at column 0 end at t0
        ended[row[cont]] = False
        self.closed.append(self._open_rows(ended, t0))
        self.open_start[:] = -1
        keep_open = (c1 == tc) & (not final)
        self.open_start[row[keep_open]] = start_slot[keep_open]
        self.open_peak[row[keep_open]] = peak[keep_open]
        self.open_drop[row[keep_open]] = drop[keep_open]
        done = ~keep_open
        self.closed.append((row[done], start_slot[done], t0 + c1[done], peak[done], drop[done]))
        for r, a, b in zip(row[drop].tolist(), c0[drop].tolist(), c1[drop].tolist(), strict=True):
            el[r, a:b] = -np.inf  # a loop over dropped passes only
        return el.reshape(g, s, tc)

    def _open_rows(self, which: np.ndarray, end: int) -> tuple[np.ndarray, ...]:
        rows = np.flatnonzero(which)
        ends = np.full(rows.size, end, dtype=np.int64)
        return rows, self.open_start[rows], ends, self.open_peak[rows], self.open_drop[rows]

    def passes(self) -> tuple[Pass, ...]:
        """Every closed pass, sorted (start_slot, station, sat)."""
        row, start, end, peak, drop = (np.concatenate(c) for c in zip(*self.closed, strict=True))
        station, sat = np.divmod(row, self.n_leo)
        order = np.lexsort((sat, station, start))
        elev = np.degrees(np.arcsin(np.clip(peak, -1.0, 1.0)))
        cols = (station, sat, start, end, elev, drop)
        return tuple(Pass(*v) for v in zip(*(c[order].tolist() for c in cols), strict=True))


def _proximity(usable: np.ndarray) -> np.ndarray:
    """The Proximity Driver: [G, S, T'] usable sin(elevation) (−inf: not) → [G, T'] LEO or −1.

    Highest elevation wins (lowest index on ties); a loop over the S satellites only.
    """
    best_val = usable[:, 0].copy()
    best = np.zeros(best_val.shape, dtype=np.int8 if usable.shape[1] < 128 else np.int16)
    for k in range(1, usable.shape[1]):
        better = usable[:, k] > best_val
        best[better] = k
        np.maximum(best_val, usable[:, k], out=best_val)
    best[np.isneginf(best_val)] = -1
    return best


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
) -> ContactPlan:
    """The contact plan of stations with LEOs and the GEO over ``n_slots`` slots (003 §2.3.2).

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

    Returns:
        The plan; ``usable`` / ``next_contact`` / ``next_relay`` answer the engine's queries.

    Raises:
        OrbitError: bad station location (naming ``stations[i]``), bad argument, TLEs that
            are not LEOs + one GEO, or a satellite sgp4 cannot propagate.
    """
    _check_args(n_slots, slot_s, elevation_mask_deg, p_leo_fail, relay_margin_km)
    leos, geo = classify(tles)
    coords = _check_stations(stations)
    pos, up = station_frames(coords)
    g, s = len(coords), len(leos)
    jd, fr = julian_dates(start, n_slots, slot_s)
    sin_mask = math.sin(math.radians(elevation_mask_deg))
    chunk = max(1, CHUNK_ELEMENTS // (g * (s + 1)))
    relay = np.zeros((s, n_slots), dtype=bool)
    proximity = np.full((g, n_slots), -1, dtype=np.int8 if s < 128 else np.int16)
    geo_min = np.full(g, np.inf)
    tracker = _PassTracker(g, s, seed, p_leo_fail)
    for t0 in range(0, n_slots, chunk):
        t1 = min(n_slots, t0 + chunk)
        r = propagate([*leos, geo], jd[t0:t1], fr[t0:t1])  # [S + 1, T', 3] TEME
        relay[:, t0:t1] = _relay(r[:s], r[s], relay_margin_km)
        sin_el = _sin_elevation(teme_to_ecef(r, gmst82(jd[t0:t1], fr[t0:t1])), pos, up)
        geo_min = np.minimum(geo_min, sin_el[:, s].min(axis=1))
        leo_el = sin_el[:, :s]
        usable = tracker.add(leo_el, leo_el >= sin_mask, t0, final=t1 == n_slots)
        proximity[:, t0:t1] = _proximity(usable)
    for arr in (relay, proximity):
        arr.flags.writeable = False
    visible = geo_min >= sin_mask
    visible.flags.writeable = False
    return ContactPlan(
        slot_s=float(slot_s),
        n_slots=n_slots,
        start=to_utc(start),
        n_stations=g,
        n_leo=s,
        passes=tracker.passes(),
        relay=relay,
        geo_visible=visible,
        proximity=proximity,
    )
