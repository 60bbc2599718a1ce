"""Hostile inputs to the geography parameters and helpers: refused with one line naming the
field, never a traceback from deep inside the generator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from geofl.data.agri.dataset import SyntheticAgriParams
from geofl.errors import HierarchyError
from geofl.hierarchy.geography import footprint_radius_km, region_centres_of


@pytest.mark.parametrize(
    "params",
    [
        {"geography": "World"},
        {"geography": ""},
        {"geography": None},
        {"geography": 3},
        {"geography": "world", "farms_per_region": []},
        {"geography": "world", "farms_per_region": [1] * 14},
        {"geography": "paper3", "farms_per_region": [1, 1, 1, 1]},
        {"geography": "world", "farms_per_region": [1, -1]},
        {"geography": "world", "farms_per_region": [0]},
        {"geography": "world", "farms_per_region": ["a"]},
    ],
)
def test_bad_geography_params_are_refused(params: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as err:
        SyntheticAgriParams(task="stress", **params)
    assert "\n" in str(err.value)  # pydantic's one error per line, field named
    assert any(k in str(err.value) for k in ("geography", "farms_per_region"))


@pytest.mark.parametrize(
    ("h", "e"), [(0.0, 10.0), (-5.0, 10.0), (550.0, -1.0), (550.0, 90.0), (float("nan"), 10.0)]
)
def test_footprint_refuses_bad_geometry(h: float, e: float) -> None:
    with pytest.raises(HierarchyError, match="footprint"):
        footprint_radius_km(h, e)


@pytest.mark.parametrize(
    ("region", "lat", "lon"),
    [
        ([0, 0], [1.0, float("nan")], [0.0, 0.0]),
        ([1], [1.0], [2.0]),  # region 0 has no row
        ([0, 0], [1.0, 1.0], [2.0, 3.0]),
    ],
)
def test_region_centres_refuse_inconsistent_rows(
    region: list[int], lat: list[float], lon: list[float]
) -> None:
    with pytest.raises(HierarchyError, match="region_lat/region_lon"):
        region_centres_of(np.array(region), np.array(lat), np.array(lon))
