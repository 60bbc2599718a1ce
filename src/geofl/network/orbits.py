"""Satellite orbits from two-line element sets (003 §2.3.2, §3.1.3).

The space layer of 003 has N_LEO = 8 LEO satellites in near-polar orbits and one GEO
coordinator (§3.1.3); cluster drivers "maintain ephemeris tables" of the LEOs (§2.3.2).
Ephemerides here are TLEs propagated with the sgp4 library: :func:`parse_tles` reads real
TLE files (validating column layout, checksums and line numbers), and
:func:`walker_constellation` writes valid TLE lines for a synthetic Walker-star
constellation plus one GEO, the default when no file is given.

Frames. sgp4 gives positions in TEME (true equator, mean equinox). :func:`teme_to_ecef`
rotates them about z by GMST (IAU 1982, the angle SGP4 itself is defined with; Vallado et
al. AIAA 2006-6753 App. C) into the pseudo-Earth-fixed frame, taken as ECEF. Because TEME's
x axis is the *mean* equinox, GMST (not GAST) is the right angle and the equation of the
equinoxes (≤ 1.2″) cancels out of this step. Ignored: polar motion (≤ 0.5″, PEF → ITRF)
and UT1 − UTC (UTC is used as UT1; |DUT1| < 0.9 s ≈ 13.5″ of Earth rotation). The angular
error of a station's direction is thus below 15″ ≈ 0.004°, a displacement below 0.5 km on
the ground — under 0.05° of elevation for any LEO in view (measured against skyfield's full
IAU chain for the ISS over three stations and a day: ≤ 0.013°, tests/network/test_orbits.py).
Stations sit on the WGS84 ellipsoid (height 0) with the geodetic vertical as "up";
atmospheric refraction is not modelled (geometric elevation, as skyfield's default altaz).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from geofl.errors import OrbitError

if TYPE_CHECKING:
    from sgp4.api import Satrec

# sgp4 is the `space` extra: parsing TLEs and building Walker constellations need only the
# core install (config load imports this module); propagation imports sgp4 when it runs.

__all__ = [
    "GEO_MEAN_MOTION",
    "Tle",
    "check_location",
    "gmst82",
    "julian_dates",
    "load_tles",
    "parse_tles",
    "propagate",
    "station_frames",
    "teme_to_ecef",
    "to_utc",
    "walker_constellation",
]

#: WGS72 constants (the gravity model sgp4 propagates TLEs with).
MU_KM3_S2 = 398600.8
EARTH_RADIUS_KM = 6378.135
#: WGS84 ellipsoid (station positions).
WGS84_A_KM = 6378.137
WGS84_F = 1.0 / 298.257223563
#: Revolutions per day of a geostationary orbit (one sidereal day).
GEO_MEAN_MOTION = 1.00273791
DAY_S = 86400.0


@dataclass(frozen=True)
class Tle:
    """One two-line element set.

    Attributes:
        name: Satellite name (the name line of a 3-line set, else the catalogue number).
        line1: TLE line 1, 69 characters.
        line2: TLE line 2, 69 characters.
    """

    name: str
    line1: str
    line2: str

    @property
    def mean_motion(self) -> float:
        """Mean motion in revolutions per day (line 2, columns 53–63)."""
        return float(self.line2[52:63])

    def satrec(self) -> Satrec:
        """The sgp4 satellite record (WGS72, as TLEs are fitted)."""
        from sgp4.api import WGS72, Satrec

        return Satrec.twoline2rv(self.line1, self.line2, WGS72)


# ----------------------------------------------------------------------------- parsing

_FLOAT = r"\s*[+-]?(\d+\.?\d*|\.\d+)"
_EXPO = r"[ +-]\d{5}[+-]\d"
#: (columns as a slice, field name, regex the field must match) for each line.
_LAYOUT: dict[str, tuple[tuple[slice, str, str], ...]] = {
    "1": (
        (slice(2, 7), "catalogue number", r"[ \dA-Z][ \d]{3}\d"),
        (slice(7, 8), "classification", r"[A-Z ]"),
        (slice(18, 20), "epoch year", r"\d\d"),
        (slice(20, 32), "epoch day", r"[ \d]{2}\d\.\d{8}"),
        (slice(33, 43), "first derivative of mean motion", _FLOAT),
        (slice(44, 52), "second derivative of mean motion", _EXPO),
        (slice(53, 61), "BSTAR drag term", _EXPO),
        (slice(62, 63), "ephemeris type", r"[\d ]"),
        (slice(64, 68), "element set number", r"[ \d]{3}\d"),
    ),
    "2": (
        (slice(2, 7), "catalogue number", r"[ \dA-Z][ \d]{3}\d"),
        (slice(8, 16), "inclination", _FLOAT),
        (slice(17, 25), "right ascension of the node", _FLOAT),
        (slice(26, 33), "eccentricity", r"\d{7}"),
        (slice(34, 42), "argument of perigee", _FLOAT),
        (slice(43, 51), "mean anomaly", _FLOAT),
        (slice(52, 63), "mean motion", _FLOAT),
        (slice(63, 68), "revolution number", r"[ \d]{4}\d"),
    ),
}
#: 1-based columns that must be blank (field separators).
_BLANK = {"1": (2, 9, 18, 33, 44, 53, 62, 64), "2": (2, 8, 17, 26, 34, 43, 52)}
_FIX = "copy the line unchanged from its source (69 columns, fixed layout)"


def tle_checksum(line: str) -> int:
    """The TLE checksum of the first 68 columns: sum of digits, '-' counts 1, mod 10."""
    return sum(int(c) if c.isdigit() else c == "-" for c in line[:68]) % 10


def _fail(source: str, lineno: int, what: str, fix: str = _FIX) -> OrbitError:
    return OrbitError(f"{source} line {lineno}: {what} — {fix}")


def _check_line(line: str, number: str, source: str, lineno: int) -> None:
    """Validate one TLE line's length, layout, field values and checksum."""
    if len(line) != 69:
        raise _fail(source, lineno, f"TLE line {number} has {len(line)} columns, not 69")
    if line[0] != number:
        raise _fail(source, lineno, f"expected TLE line {number}, found line number {line[0]!r}")
    for col in _BLANK[number]:
        if line[col - 1] != " ":
            raise _fail(source, lineno, f"column {col} is {line[col - 1]!r}, not blank")
    for cols, name, pattern in _LAYOUT[number]:
        field = line[cols]
        if not re.fullmatch(pattern, field):
            where = f" columns {cols.start + 1}-{cols.stop}" if cols.stop - cols.start > 1 else ""
            raise _fail(source, lineno, f"{name}{where} is {field!r}")
    if number == "2":
        inclination, mean_motion = float(line[8:16]), float(line[52:63])
        if not 0.0 <= inclination <= 180.0:
            raise _fail(source, lineno, f"inclination {inclination} outside [0, 180] degrees")
        if mean_motion <= 0.0:
            raise _fail(source, lineno, f"mean motion {mean_motion} is not positive")
    if not line[68].isdigit() or int(line[68]) != tle_checksum(line):
        raise _fail(
            source,
            lineno,
            f"checksum is {line[68]!r} but the columns 1-68 give {tle_checksum(line)}",
            "recopy the line (a character was changed) or fix its last digit",
        )


def _check_pair(name: str, l1: str, l2: str, source: str, lineno: int) -> Tle:
    _check_line(l1, "1", source, lineno)
    _check_line(l2, "2", source, lineno + 1)
    if l1[2:7] != l2[2:7]:
        raise _fail(
            source,
            lineno + 1,
            f"catalogue number {l2[2:7]!r} differs from line 1's {l1[2:7]!r}",
            "lines 1 and 2 must come from the same element set",
        )
    tle = Tle(name or l1[2:7].strip(), l1, l2)
    if tle.satrec().error != 0:
        raise _fail(source, lineno, "sgp4 cannot initialise this element set")
    return tle


def parse_tles(text: str, *, source: str = "<tle>") -> list[Tle]:
    """Parse TLEs in 2-line or 3-line (name line first) format (003 §2.3.2 ephemerides).

    Blank lines are skipped; a name line may carry the "0 " prefix of the 3LE format.

    Args:
        text: Contents of a TLE file.
        source: Name for error messages (e.g. the file path).

    Returns:
        The element sets in file order.

    Raises:
        OrbitError: ``"<source> line N: <what> — <fix>"`` on the first malformed line
            (wrong length, layout, non-numeric field, checksum, line number or catalogue
            number mismatch, a name without its two lines), or when there is no TLE.
    """
    lines = [(i, s.rstrip()) for i, s in enumerate(text.splitlines(), start=1) if s.strip()]
    out: list[Tle] = []
    k = 0
    while k < len(lines):
        lineno, line = lines[k]
        name = ""
        if line.startswith("2 "):
            raise _fail(source, lineno, "TLE line 2 without a line 1 before it", _FIX)
        if not line.startswith("1 "):
            name = line[2:].strip() if line.startswith("0 ") else line.strip()
            k += 1
            if k == len(lines) or not lines[k][1].startswith("1 "):
                at, found = lines[k] if k < len(lines) else (lineno, "the end")
                raise _fail(
                    source, at, f"expected TLE line 1 after the name {name!r}, got {found[:8]!r}"
                )
            lineno, line = lines[k]
        if k + 1 == len(lines) or not lines[k + 1][1].startswith("2 "):
            at, found = lines[k + 1] if k + 1 < len(lines) else (lineno, "the end")
            raise _fail(source, at, f"expected TLE line 2 after line 1, got {found[:8]!r}")
        if lines[k + 1][0] != lineno + 1:
            raise _fail(source, lineno + 1, "blank line between TLE lines 1 and 2")
        out.append(_check_pair(name, line, lines[k + 1][1], source, lineno))
        k += 2
    if not out:
        raise OrbitError(f"{source}: no TLE found — give 2-line or 3-line element sets")
    return out


def load_tles(path: str | Path) -> list[Tle]:
    """Read a TLE file (:func:`parse_tles` with the path as source in error messages)."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as exc:
        raise OrbitError(
            f"{path}: cannot read the TLE file ({exc.strerror}) — check the path"
        ) from exc
    return parse_tles(text, source=str(path))


# ----------------------------------------------------------------------------- writing


def to_utc(when: datetime) -> datetime:
    """``when`` in UTC; a naive datetime is taken to be UTC."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _angle(deg: float) -> str:
    return f"{round(deg % 360.0, 4) % 360.0:8.4f}"


def format_tle(
    name: str, satnum: int, epoch: datetime, elements: tuple[float, float, float, float]
) -> Tle:
    """Write a circular, drag-free orbit as standard TLE lines with valid checksums.

    Args:
        elements: (inclination, right ascension of the node, mean anomaly) in degrees and
            the mean motion in rev/day; eccentricity and argument of perigee are 0.
    """
    inclination, raan, anomaly, mean_motion = elements
    t = to_utc(epoch)
    day = (t - datetime(t.year, 1, 1, tzinfo=UTC)).total_seconds() / DAY_S + 1.0
    body1 = (
        f"1 {satnum:05d}U {t.year % 100:02d}{900 + satnum % 100:03d}A   "
        f"{t.year % 100:02d}{day:012.8f}  .00000000  00000-0  00000-0 0  999"
    )
    body2 = (
        f"2 {satnum:05d} {inclination:8.4f} {_angle(raan)} 0000000 {_angle(0.0)} "
        f"{_angle(anomaly)} {mean_motion:11.8f}    1"
    )
    return Tle(name, body1 + str(tle_checksum(body1)), body2 + str(tle_checksum(body2)))


def walker_constellation(
    *,
    n_leo: int = 8,
    planes: int = 4,
    altitude_km: float = 550.0,
    inclination_deg: float = 97.6,
    epoch: datetime,
    geo_longitude_deg: float = -98.0,
) -> list[Tle]:
    """A synthetic Walker-star LEO constellation plus one GEO, as TLEs (003 §3.1.3).

    Walker star i:t/p/f = ``inclination``:``n_leo``/``planes``/1 — the pattern of polar
    constellations (Iridium): plane j has its ascending node at 180°·j/p, its q = t/p
    satellites are 360°/q apart in mean anomaly, and adjacent planes are phased by
    360°·f/t. Orbits are circular at ``altitude_km`` above the WGS72 equatorial radius
    (mean motion from Kepler's third law; sgp4 reads it as a Kozai mean motion, so the
    propagated altitude differs by a few km) and drag-free. The GEO is circular and
    equatorial with one revolution per sidereal day, placed over ``geo_longitude_deg``
    at the epoch (mean anomaly = longitude + GMST).

    Args:
        n_leo: Number of LEO satellites t (named "LEO-0" … ; 8 in 003).
        planes: Orbital planes p (must divide ``n_leo``).
        altitude_km: Circular altitude of the LEOs.
        inclination_deg: LEO inclination (97.6° = sun-synchronous at 550 km, near-polar).
        epoch: TLE epoch (UTC; naive means UTC).
        geo_longitude_deg: Longitude of the GEO ("GEO-0"), degrees east.

    Returns:
        ``n_leo`` LEO TLEs then the GEO's; catalogue numbers 90000 + index.
    """
    if not 1 <= n_leo <= 9999 or planes < 1 or n_leo % planes:
        raise OrbitError(f"n_leo: {n_leo} must be a multiple of planes={planes} in [1, 9999]")
    if not altitude_km > 0 or not 0.0 <= inclination_deg <= 180.0:
        raise OrbitError(
            f"altitude_km={altitude_km}, inclination_deg={inclination_deg}: need altitude > 0 "
            "and inclination in [0, 180]"
        )
    check_location(0.0, geo_longitude_deg, field="geo_longitude_deg")
    a = EARTH_RADIUS_KM + altitude_km
    n_rev_day = math.sqrt(MU_KM3_S2 / a**3) * DAY_S / (2 * math.pi)
    q = n_leo // planes  # satellites per plane
    tles = []
    for i in range(n_leo):
        plane, k = divmod(i, q)
        anomaly = 360.0 * k / q + 360.0 * plane / n_leo  # f = 1 phasing between planes
        elements = (inclination_deg, 180.0 * plane / planes, anomaly, n_rev_day)
        tles.append(format_tle(f"LEO-{i}", 90000 + i, epoch, elements))
    gmst = math.degrees(float(gmst82(*julian_dates(epoch, 1, 1.0))[0]))
    elements = (0.0, 0.0, geo_longitude_deg + gmst, GEO_MEAN_MOTION)
    geo = format_tle("GEO-0", 90000 + n_leo, epoch, elements)
    return [*tles, geo]


def check_location(lat_deg: float, lon_deg: float, *, field: str) -> None:
    """Raise :class:`OrbitError` naming ``field`` unless lat ∈ [−90, 90], lon ∈ [−180, 180]."""
    if not (math.isfinite(lat_deg) and -90.0 <= lat_deg <= 90.0):
        raise OrbitError(f"{field}: latitude {lat_deg!r} is outside [-90, 90] — give degrees north")
    if not (math.isfinite(lon_deg) and -180.0 <= lon_deg <= 180.0):
        raise OrbitError(
            f"{field}: longitude {lon_deg!r} is outside [-180, 180] — give degrees east"
        )


# ----------------------------------------------------------------------------- frames


def julian_dates(start: datetime, n_slots: int, slot_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Julian date of slot starts, split as sgp4 wants: whole part [T] and fraction [T]."""
    from sgp4.api import jday

    t = to_utc(start)
    jd, fr = jday(t.year, t.month, t.day, t.hour, t.minute, t.second + t.microsecond * 1e-6)
    frac = fr + np.arange(n_slots, dtype=np.float64) * (slot_s / DAY_S)
    whole = np.floor(frac)
    return jd + whole, frac - whole


def gmst82(jd: np.ndarray, fr: np.ndarray) -> np.ndarray:
    """Greenwich mean sidereal time (IAU 1982) in radians, UT1 taken as UTC. [T] → [T]."""
    t = (jd - 2451545.0 + fr) / 36525.0
    g = 67310.54841 + (8640184.812866 + (0.093104 + (-6.2e-6) * t) * t) * t
    turns = (jd % 1.0 + fr + (g / DAY_S) % 1.0) % 1.0
    return np.asarray(turns * 2.0 * np.pi)


def teme_to_ecef(r_teme: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Rotate TEME positions about z by GMST into Earth-fixed axes.

    Args:
        r_teme: [..., T, 3] positions (km).
        theta: [T] GMST (rad).

    Returns:
        [..., T, 3] Earth-fixed positions (polar motion ignored; module docstring).
    """
    c, s = np.cos(theta), np.sin(theta)
    x, y = r_teme[..., 0], r_teme[..., 1]
    return np.stack([c * x + s * y, c * y - s * x, r_teme[..., 2]], axis=-1)


def station_frames(stations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """WGS84 Earth-fixed positions and geodetic up vectors of stations at height 0.

    Args:
        stations: [G, 2] latitude, longitude in degrees.

    Returns:
        ([G, 3] positions in km, [G, 3] unit up vectors).
    """
    lat, lon = np.radians(stations[:, 0]), np.radians(stations[:, 1])
    e2 = WGS84_F * (2.0 - WGS84_F)
    n = WGS84_A_KM / np.sqrt(1.0 - e2 * np.sin(lat) ** 2)
    up = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    pos = np.stack([n * up[:, 0], n * up[:, 1], n * (1.0 - e2) * up[:, 2]], axis=1)
    return pos, up


def propagate(tles: Sequence[Tle], jd: np.ndarray, fr: np.ndarray) -> np.ndarray:
    """TEME positions of every satellite at every time, with sgp4's vectorised SatrecArray.

    Args:
        tles: S element sets.
        jd: [T] whole Julian dates; ``fr``: [T] fractions (UTC).

    Returns:
        [S, T, 3] positions in km (TEME).

    Raises:
        OrbitError: naming the satellite, when sgp4 fails (e.g. it has decayed).
    """
    from sgp4.api import SatrecArray

    err, r, _ = SatrecArray([t.satrec() for t in tles]).sgp4(jd, fr)
    bad = np.flatnonzero(err.any(axis=1))
    if bad.size:
        s = int(bad[0])
        code = int(err[s][err[s] != 0][0])
        raise OrbitError(
            f"TLE {tles[s].name!r}: sgp4 cannot propagate it over the plan (error {code}) — "
            "use a fresher element set or a start closer to its epoch"
        )
    return np.asarray(r, dtype=np.float64)
