"""Real-format readers of paper 003's data (CDL GeoTIFF, SSURGO table, weekly VI CSV) on the
fixture of ``tests/data/agri/data.py``, and their one-line errors on bad input."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest
import tifffile
from tests.data.agri.data import (
    ORIGIN,
    PIXEL,
    SEASON_START,
    SOIL_HEADER,
    WEEKS,
    cdl_codes,
    make_fixture,
    write_cdl,
)

from geofl.data.agri.cdl import block_crops, read_cdl
from geofl.data.agri.files import AgriFilesParams, build_agri_files, read_field_blocks
from geofl.data.agri.ssurgo import read_soil_table
from geofl.data.agri.vi import read_block_series
from geofl.data.base import DATASETS
from geofl.errors import DataError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_fixture(tmp_path / "agri")


def _params(root: Path, task: str = "stress") -> AgriFilesParams:
    return AgriFilesParams(task=task, root=root, season_start=SEASON_START, weeks=WEEKS)  # type: ignore[arg-type]


def test_cdl_georeferencing_and_majority_crop(root: Path) -> None:
    raster = read_cdl(root / "cdl.tif")
    assert (raster.x0, raster.y0, raster.dx, raster.dy) == (*ORIGIN, PIXEL, PIXEL)
    np.testing.assert_array_equal(raster.codes, cdl_codes())
    x0, y0 = ORIGIN
    quads = [(0, 0), (0, 6), (5, 0), (5, 6)]
    bbox = np.array(
        [[x0 + c * 30, y0 - (r + 5) * 30, x0 + (c + 6) * 30, y0 - r * 30] for r, c in quads]
    )
    # B1: 16 corn vs 8 soybean (water ignored); B2 soybean; B3 winter wheat -> small grain
    # (background ignored); B4: 16 sorghum vs 14 cotton
    assert block_crops(raster, bbox, np.array(["B1", "B2", "B3", "B4"])).tolist() == [0, 1, 2, 4]
    # a one-pixel block on pixel (row 0, col 0): its centre is inside, the next one is not
    one = np.array([[x0, y0 - 30, x0 + 30, y0]])
    assert block_crops(raster, one, np.array(["px"])).tolist() == [1]  # soybean pixel


def test_cdl_pixel_is_point_shifts_half_a_pixel(tmp_path: Path) -> None:
    geokeys = (1, 1, 0, 1, 1025, 0, 1, 2)
    tags = [
        (33550, "d", 3, (30.0, 30.0, 0.0), False),
        (33922, "d", 6, (0.0, 0.0, 0.0, 100.0, 200.0, 0.0), False),
        (34735, "H", len(geokeys), geokeys, False),
    ]
    tifffile.imwrite(tmp_path / "p.tif", np.ones((2, 2), np.uint8), extratags=tags)
    r = read_cdl(tmp_path / "p.tif")
    assert (r.x0, r.y0) == (85.0, 215.0)


def test_cdl_model_transformation_tag(tmp_path: Path) -> None:
    m = (10.0, 0, 0, 1000.0, 0, -10.0, 0, 5000.0, 0, 0, 0, 0, 0, 0, 0, 1)
    tifffile.imwrite(
        tmp_path / "m.tif", np.ones((2, 2), np.uint8), extratags=[(34264, "d", 16, m, False)]
    )
    r = read_cdl(tmp_path / "m.tif")
    assert (r.x0, r.y0, r.dx, r.dy) == (1000.0, 5000.0, 10.0, 10.0)


def test_cdl_bad_inputs_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.tif"
    bad.write_bytes(b"not a tiff at all")
    with pytest.raises(DataError, match=r"garbage\.tif: not a readable GeoTIFF"):
        read_cdl(bad)
    tifffile.imwrite(tmp_path / "plain.tif", np.ones((3, 3), np.uint8))
    with pytest.raises(DataError, match=r"plain\.tif: not georeferenced"):
        read_cdl(tmp_path / "plain.tif")
    codes = cdl_codes()
    codes[0, 0] = 43  # potatoes: a real CDL crop the tasks do not know
    write_cdl(tmp_path / "potato.tif", codes)
    with pytest.raises(DataError, match=r"potato\.tif: unknown CDL crop code 43 \(1 pixels\)"):
        read_cdl(tmp_path / "potato.tif")
    write_cdl(tmp_path / "float.tif", cdl_codes().astype(np.float32))
    with pytest.raises(DataError, match=r"float\.tif: expected a single-band integer"):
        read_cdl(tmp_path / "float.tif")
    with pytest.raises(DataError, match=r"missing\.tif does not exist"):
        read_cdl(tmp_path / "missing.tif")


def test_cdl_block_outside_the_clip(root: Path) -> None:
    raster = read_cdl(root / "cdl.tif")
    with pytest.raises(DataError, match="no crop pixel centre lies in field block far"):
        block_crops(raster, np.array([[0.0, 0.0, 10.0, 10.0]]), np.array(["far"]))


def test_ssurgo_depth_and_component_weighting_by_hand(root: Path) -> None:
    soils = read_soil_table(root / "soil.csv")
    assert set(soils) == {"100", "200"}
    # 0.6 * (3.0*20 + 1.0*10)/30 + 0.4 * 2.0
    assert soils["100"]["soil_om_pct"] == pytest.approx(2.2)
    # 0.6 * (1.30*20 + 1.45*10)/30 + 0.4 * 1.50
    assert soils["100"]["bulk_density"] == pytest.approx(1.41)
    assert soils["200"]["soil_ph"] == pytest.approx(7.9)  # the 30-80 cm horizon is below
    assert soils["100"]["awc"] == pytest.approx(0.6 * (0.18 * 20 + 0.16 * 10) / 30 + 0.4 * 0.10)


def test_ssurgo_bad_inputs(tmp_path: Path) -> None:
    p = tmp_path / "soil.csv"
    p.write_text("mukey,cokey,comppct_r,hzdept_r,hzdepb_r\n1,1,100,0,30\n")
    with pytest.raises(DataError, match=r"soil\.csv: SSURGO soil table lacks column 'ph1to1h2o_r'"):
        read_soil_table(p)
    head = SOIL_HEADER
    p.write_text(head + "\n1,1,100,0,30,6.5,abc,10,40,40,20,0.1,1.3\n")
    with pytest.raises(
        DataError, match=r"soil\.csv line 2: column 'om_r' value 'abc' is not a number"
    ):
        read_soil_table(p)
    p.write_text(head + "\n1,1,100,30,10,6.5,2,10,40,40,20,0.1,1.3\n")
    with pytest.raises(DataError, match="line 2: hzdepb_r"):
        read_soil_table(p)
    p.write_text(head + "\n1,1,100,0,30,6.5,,10,40,40,20,0.1,1.3\n")
    with pytest.raises(DataError, match="map unit 1 has no 'om_r' value"):
        read_soil_table(p)
    p.write_text(head + "\n1,1,100,0,30\n")
    with pytest.raises(DataError, match="line 2: 5 fields, the header has 13"):
        read_soil_table(p)


def test_weekly_series_and_composite_by_hand(root: Path) -> None:
    s = read_block_series(root / "weekly" / "B1.csv", SEASON_START, WEEKS)
    assert s.imagery.shape == (WEEKS, 2, 8) and s.valid.all()
    np.testing.assert_allclose(s.imagery[2, :, 0], [0.5, 0.7])
    assert s.sensors["rain_mm"][0] == pytest.approx(21.0)  # 10 + 11, summed
    assert s.sensors["soil_moisture"][0] == pytest.approx(0.25)  # averaged
    assert s.sensors["n_applied_kg_ha"][1] == pytest.approx(50.0)
    fb = read_field_blocks(_params(root))
    assert fb.weekly["ndvi"][0, 2] == pytest.approx(0.6)
    # week 3 of B1 is cloudy twice: midway between weeks 2 and 4
    assert fb.weekly["ndvi"][0, 3] == pytest.approx((0.6 + fb.weekly["ndvi"][0, 4]) / 2)
    assert fb.weekly["clear"][0, 3] == 0.0
    assert fb.crop.tolist() == [0, 1, 2, 4]
    assert fb.region.tolist() == [0, 0, 1, 2] and fb.farm.tolist() == [0, 0, 1, 1]
    assert fb.tractor.tolist() == [0, 1, 2, 2]


def test_weekly_series_bad_inputs(tmp_path: Path, root: Path) -> None:
    src = (root / "weekly" / "B1.csv").read_text().splitlines()
    p = tmp_path / "B9.csv"
    p.write_text("\n".join([src[0].replace("evi,", "evi_x,"), *src[1:]]) + "\n")
    with pytest.raises(DataError, match=r"B9\.csv: weekly vegetation-index CSV lacks column 'evi'"):
        read_block_series(p, SEASON_START, WEEKS)
    p.write_text("\n".join([src[0], "2024/04/02" + src[1][10:]]) + "\n")
    with pytest.raises(DataError, match=r"B9\.csv line 2: column 'date' value '2024/04/02'"):
        read_block_series(p, SEASON_START, WEEKS)
    cells = src[1].split(",")
    cells[1] = "1.5"
    p.write_text("\n".join([src[0], ",".join(cells)]) + "\n")
    with pytest.raises(DataError, match=r"B9\.csv line 2: column 'cloud_frac' must be in \[0, 1\]"):
        read_block_series(p, SEASON_START, WEEKS)


def test_agri_files_dataset_both_tasks(root: Path) -> None:
    b = build_agri_files(_params(root, "stress"), cache_dir=root)
    a = build_agri_files(_params(root, "nutrient"), cache_dir=root)
    assert b.inputs.shape == (4 * (WEEKS - 8), 52) and b.target_kind == "binary"
    assert a.inputs.shape == (4 * (WEEKS - 2), 48) and a.target_kind == "real"
    # B1 (corn, Y 10.5, OM 2.2, bulk density 1.41, week-0 nitrate 12 ppm):
    # 20 * 10.5 - 18 * 2.2 - 12 * 1.41 * 30 * 0.1 = 119.64; B2 is soybean: 0
    assert float(a.targets[0]) == pytest.approx(119.64, abs=1e-3)
    assert float(a.targets[WEEKS - 2]) == 0.0
    assert "agri_files" in DATASETS


def test_agri_files_bad_block_table(root: Path) -> None:
    text = (root / "blocks.csv").read_text().replace(",100,", ",999,", 1)
    (root / "blocks.csv").write_text(text)
    with pytest.raises(DataError, match=r"blocks\.csv: mukey 999 is not in .*soil\.csv"):
        read_field_blocks(_params(root))
    text = (
        (root / "blocks.csv")
        .read_text()
        .replace(",999,", ",100,")
        .replace("humid,", "tropical,", 1)
    )
    (root / "blocks.csv").write_text(text)
    with pytest.raises(DataError, match="column 'climate' value 'tropical'"):
        read_field_blocks(_params(root))
    (root / "weekly" / "B3.csv").unlink()
    (root / "blocks.csv").write_text(text.replace("tropical,", "humid,"))
    with pytest.raises(DataError, match=r"weekly vegetation-index CSV .*B3\.csv does not exist"):
        read_field_blocks(_params(root))


def test_season_start_parses_from_config_text(root: Path) -> None:
    p = AgriFilesParams.model_validate(
        {"task": "stress", "root": str(root), "season_start": "2024-04-01", "weeks": 12}
    )
    assert p.season_start == dt.date(2024, 4, 1)


def test_sensor_column_without_values_names_file_and_column(root: Path) -> None:
    path = root / "weekly" / "B2.csv"
    lines = path.read_text().splitlines()
    col = lines[0].split(",").index("soil_moisture")
    rows = [",".join("" if i == col else c for i, c in enumerate(r.split(","))) for r in lines[1:]]
    path.write_text("\n".join([lines[0], *rows]) + "\n")
    with pytest.raises(DataError, match=r"B2\.csv: column 'soil_moisture' has no value"):
        read_field_blocks(_params(root))
