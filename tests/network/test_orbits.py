"""TLE parsing and writing, frames and sgp4 propagation (003 §2.3.2, §3.1.3).

Reference values come from skyfield (``load.timescale(builtin=True)``: no download), whose
TEME → ITRS chain is the full IAU one; ours uses GMST only (module docstring of
:mod:`geofl.network.orbits`): elevations agree within 0.05° (measured ≤ 0.013°).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from geofl.errors import OrbitError
from geofl.network.contacts import _sin_elevation
from geofl.network.orbits import (
    Tle,
    check_location,
    gmst82,
    julian_dates,
    load_tles,
    parse_tles,
    propagate,
    station_frames,
    teme_to_ecef,
    tle_checksum,
    walker_constellation,
)

#: The ISS element set of Vallado's and CelesTrak's TLE format examples.
ISS_NAME = "ISS (ZARYA)"
ISS_1 = "1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927"
ISS_2 = "2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537"
ISS_EPOCH = datetime(2008, 9, 20, 12, 0, tzinfo=UTC)
#: Elevation agreement with skyfield's altaz (degrees); see the module docstring.
ELEVATION_TOL_DEG = 0.05


def _fixsum(line: str) -> str:
    """``line`` with its checksum recomputed (to test a field error, not a checksum error)."""
    return line[:68] + str(tle_checksum(line))


def test_checksum_by_hand() -> None:
    # digits of "1 25544U 98067A ..." plus one per '-' (two of them) ≡ 7 mod 10
    assert tle_checksum(ISS_1) == 7
    assert tle_checksum(ISS_2) == 7
    assert tle_checksum("1 -" + "0" * 66) == 2  # 1 + one minus sign


def test_parse_three_and_two_line_formats() -> None:
    text = (
        f"{ISS_NAME}\n{ISS_1}\n{ISS_2}\n\n0 ISS COPY\r\n{ISS_1}\r\n{ISS_2}   \n{ISS_1}\n{ISS_2}\n"
    )
    tles = parse_tles(text, source="iss.txt")
    assert [t.name for t in tles] == [ISS_NAME, "ISS COPY", "25544"]
    assert all(t.line1 == ISS_1 and t.line2 == ISS_2 for t in tles)
    assert tles[0].mean_motion == pytest.approx(15.72125391)


def test_load_tles_reads_a_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "fleet.tle"
    geo = walker_constellation(epoch=ISS_EPOCH)[-1]
    path.write_text(f"{ISS_NAME}\n{ISS_1}\n{ISS_2}\n{geo.name}\n{geo.line1}\n{geo.line2}\n")
    assert [t.name for t in load_tles(path)] == [ISS_NAME, "GEO-0"]
    path.write_text(f"{ISS_NAME}\n{ISS_1}\n{ISS_2[:-1]}5\n")
    with pytest.raises(OrbitError, match=f"^{re.escape(str(path))} line 3: checksum"):
        load_tles(path)
    with pytest.raises(OrbitError, match=r"missing.tle: cannot read the TLE file"):
        load_tles(tmp_path / "missing.tle")


BAD = {
    "wrong checksum": (ISS_1[:68] + "3", "line 2: checksum is '3' but the columns 1-68 give 7"),
    "wrong length": (ISS_1[:60], "line 2: TLE line 1 has 60 columns, not 69"),
    "line number mismatch": (
        _fixsum("3" + ISS_1[1:]),
        "line 2: expected TLE line 1 after the name 'ISS \\(ZARYA\\)', got '3 25544U'",
    ),
    "non-numeric field": (
        _fixsum(ISS_1[:20] + "264.5x782528" + ISS_1[32:]),
        "line 2: epoch day columns 21-32 is '264.5x782528'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_line_one_names_the_line(case: str) -> None:
    line, message = BAD[case]
    with pytest.raises(OrbitError, match=f"^bad.tle {message}.* — "):
        parse_tles(f"{ISS_NAME}\n{line}\n{ISS_2}", source="bad.tle")


@pytest.mark.parametrize(
    ("line2", "message"),
    [
        (_fixsum(ISS_2[:8] + " 51.6x16" + ISS_2[16:]), "line 3: inclination columns 9-16"),
        (_fixsum("1" + ISS_2[1:]), "line 3: expected TLE line 2"),
        (_fixsum(ISS_2[:2] + "25545" + ISS_2[7:]), "line 3: catalogue number '25545' differs"),
        (_fixsum(ISS_2[:8] + "181.0000" + ISS_2[16:]), "line 3: inclination 181.0 outside"),
        (ISS_2 + "0", "line 3: TLE line 2 has 70 columns"),
        (_fixsum(ISS_2[:7] + "0" + ISS_2[8:]), "line 3: column 8 is '0', not blank"),
        (_fixsum(ISS_2[:26] + "00067-3" + ISS_2[33:]), "line 3: eccentricity columns 27-33"),
    ],
)
def test_malformed_line_two_names_the_line(line2: str, message: str) -> None:
    with pytest.raises(OrbitError, match=f"^x.txt {message}"):
        parse_tles(f"{ISS_NAME}\n{ISS_1}\n{line2}", source="x.txt")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{ISS_NAME}\n", "<tle> line 1: expected TLE line 1 after the name"),
        (f"{ISS_NAME}\n{ISS_1}\n", "<tle> line 2: expected TLE line 2"),
        (f"{ISS_1}\n\n{ISS_2}\n", "<tle> line 2: blank line between"),
        ("\n \n", "<tle>: no TLE found"),
    ],
)
def test_incomplete_sets_are_refused(text: str, message: str) -> None:
    with pytest.raises(OrbitError, match=f"^{message}"):
        parse_tles(text)


@pytest.mark.parametrize(
    ("lat", "lon", "message"),
    [
        (90.5, 0.0, r"fleet\[3\]: latitude 90.5 is outside \[-90, 90\]"),
        (-91.0, 10.0, r"fleet\[3\]: latitude -91.0"),
        (10.0, 180.01, r"fleet\[3\]: longitude 180.01 is outside \[-180, 180\]"),
        (float("nan"), 0.0, r"fleet\[3\]: latitude nan"),
    ],
)
def test_check_location_names_the_field(lat: float, lon: float, message: str) -> None:
    with pytest.raises(OrbitError, match=f"^{message}"):
        check_location(lat, lon, field="fleet[3]")
    check_location(-90.0, 180.0, field="ok")  # the bounds themselves are valid


def test_walker_constellation_round_trips_through_parse_and_sgp4() -> None:
    epoch = datetime(2026, 12, 3, 6, 30, tzinfo=UTC)
    tles = walker_constellation(epoch=epoch)
    assert [t.name for t in tles] == [f"LEO-{i}" for i in range(8)] + ["GEO-0"]
    text = "\n".join(f"{t.name}\n{t.line1}\n{t.line2}" for t in tles)
    assert parse_tles(text) == tles
    assert all(t.satrec().error == 0 for t in tles)
    # Kepler: a = 6378.135 + 550 km, T = 2π·sqrt(a³/μ) = 95.65 min → 15.055 rev/day
    assert tles[0].mean_motion == pytest.approx(1440 / 95.65, abs=2e-3)
    inclinations = {float(t.line2[8:16]) for t in tles[:8]}
    nodes = sorted({float(t.line2[17:25]) for t in tles[:8]})
    assert inclinations == {97.6}
    assert nodes == [0.0, 45.0, 90.0, 135.0]  # Walker star: planes 180°/4 apart
    jd, fr = julian_dates(epoch, 2 * 96, 30.0)  # ≥ one orbit at 30 s
    r = propagate(tles, jd, fr)  # raises if sgp4 fails on any
    altitude = np.linalg.norm(r[:8], axis=-1) - 6378.137
    assert altitude.min() > 530.0 and altitude.max() < 575.0
    lat = np.degrees(np.arcsin(r[:8, :, 2] / np.linalg.norm(r[:8], axis=-1)))
    assert lat.max() > 82.0 and lat.min() < -82.0  # near-polar: 180° − 97.6° = 82.4°


def test_walker_rejects_bad_shapes() -> None:
    with pytest.raises(OrbitError, match=r"^n_leo: 8 must be a multiple of planes=3"):
        walker_constellation(planes=3, epoch=ISS_EPOCH)
    with pytest.raises(OrbitError, match=r"^geo_longitude_deg: longitude 200.0"):
        walker_constellation(epoch=ISS_EPOCH, geo_longitude_deg=200.0)


def test_geo_stays_over_its_longitude_for_a_day() -> None:
    epoch = datetime(2026, 3, 20, 12, tzinfo=UTC)
    geo = walker_constellation(epoch=epoch, geo_longitude_deg=-98.0)[-1]
    jd, fr = julian_dates(epoch + timedelta(hours=5), 24 * 60, 60.0)
    r = teme_to_ecef(propagate([geo], jd, fr), gmst82(jd, fr))[0]
    lon = np.degrees(np.arctan2(r[:, 1], r[:, 0]))
    lat = np.degrees(np.arcsin(r[:, 2] / np.linalg.norm(r, axis=1)))
    assert np.abs(lon + 98.0).max() < 0.05
    assert np.abs(lat).max() < 0.05
    assert np.linalg.norm(r, axis=1) == pytest.approx(42164.0, abs=20.0)


def test_gmst_and_frames_match_skyfield() -> None:
    sgp4lib = pytest.importorskip("skyfield.sgp4lib")
    jd, fr = julian_dates(ISS_EPOCH, 5, 3600.0)
    theta = gmst82(jd, fr)
    for k in range(5):
        want, _ = sgp4lib.theta_GMST1982(jd[k], fr[k])
        assert theta[k] == pytest.approx(want, abs=1e-12)
    r = propagate(parse_tles(f"{ISS_1}\n{ISS_2}"), jd, fr)[0]
    ours = teme_to_ecef(r[None], theta)[0]
    for k in range(5):
        want, _ = sgp4lib.TEME_to_ITRF(jd[k], r[k], np.zeros(3), fraction_ut1=fr[k])
        np.testing.assert_allclose(ours[k], want, atol=1e-6)


def test_station_frames_by_hand() -> None:
    pos, up = station_frames(np.array([[0.0, 0.0], [90.0, 0.0], [0.0, 90.0]]))
    np.testing.assert_allclose(pos[0], [6378.137, 0, 0], atol=1e-9)
    np.testing.assert_allclose(pos[1], [0, 0, 6356.752314245], atol=1e-6)  # WGS84 b
    np.testing.assert_allclose(up[2], [0, 1, 0], atol=1e-12)


def test_elevation_matches_skyfield_altaz() -> None:
    api = pytest.importorskip("skyfield.api")
    ts = api.load.timescale(builtin=True)
    iss = Tle(ISS_NAME, ISS_1, ISS_2)
    sat = api.EarthSatellite(ISS_1, ISS_2, ISS_NAME, ts)
    stations = np.array([[40.0, -75.0], [-33.9, 151.2], [51.5, -0.1]])
    offsets = np.arange(0, 86400, 30.0)
    jd, fr = julian_dates(ISS_EPOCH, len(offsets), 30.0)
    r = teme_to_ecef(propagate([iss], jd, fr), gmst82(jd, fr))
    ours = np.degrees(np.arcsin(_sin_elevation(r, *station_frames(stations))))[:, 0]
    times = ts.from_datetimes([ISS_EPOCH + timedelta(seconds=float(s)) for s in offsets])
    in_view = 0
    for g, (lat, lon) in enumerate(stations):
        alt = (sat - api.wgs84.latlon(lat, lon)).at(times).altaz()[0].degrees
        assert np.abs(ours[g] - alt).max() < ELEVATION_TOL_DEG
        in_view += int((alt > 10).sum())
    assert in_view > 50  # the comparison covers passes, not only far-side geometry


def test_propagation_failure_names_the_satellite() -> None:
    # drag big enough that sgp4 reports the satellite decayed within days
    line1 = _fixsum(ISS_1[:53] + " 50000-0" + ISS_1[61:])
    tle = parse_tles(f"DOOMED\n{line1}\n{ISS_2}")[0]
    jd, fr = julian_dates(ISS_EPOCH + timedelta(days=60), 3, 30.0)
    with pytest.raises(OrbitError, match=r"^TLE 'DOOMED': sgp4 cannot propagate"):
        propagate([tle], jd, fr)
    assert math.isfinite(float(propagate([tle], *julian_dates(ISS_EPOCH, 1, 1.0))[0, 0, 0]))
