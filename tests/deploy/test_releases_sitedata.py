"""With site-local data, a DP method's site sends the band sums of its held-out val split,
not of its training records (issue 33, item 2); a non-DP method's site is unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from geofl.deploy.setup import load_setup
from geofl.deploy.sitedata import LocalSite
from geofl.engine.sites import SitesPlan, band_stats
from geofl.errors import ConfigError
from tests.engine.test_sites import sites_raw

DP_SGD = {"name": "dp_sgd", "noise_multiplier": 1.0, "micro_batch": 16}


def _setup(tmp_path: Path, **method: Any) -> Any:
    raw = sites_raw()
    raw["model"]["params"]["norm"] = "group"
    raw["methods"] = [{"name": "m", **method}]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return load_setup(path, None, None)


@pytest.mark.parametrize(("method", "part"), [({}, "train"), ({"trainer": DP_SGD}, "val")])
def test_a_site_sends_the_band_sums_of_the_split_its_method_allows(
    tmp_path: Path, method: dict[str, Any], part: str
) -> None:
    site = LocalSite(_setup(tmp_path, **method), "north", "", None)
    want = band_stats(getattr(site.split, part).inputs)
    info = site.describe()
    assert info["stats_count"] == want.count
    np.testing.assert_array_equal(info["stats_sum"], want.sum)
    np.testing.assert_array_equal(info["stats_sumsq"], want.sumsq)


def test_the_simulator_uses_the_same_val_sums_for_a_dp_method(tmp_path: Path) -> None:
    setup = _setup(tmp_path, trainer=DP_SGD)
    plan = SitesPlan(setup.cfg)
    train, val = plan.prepare(3), plan.prepare(3, "val")
    assert train.data.stats_from == "train" and val.data.stats_from == "val"
    assert not np.array_equal(train.data.mean, val.data.mean)


def test_a_dp_site_without_val_records_is_refused_in_one_line(tmp_path: Path) -> None:
    raw = sites_raw(split={"val": 0.0, "test": 0.2})
    raw["model"]["params"]["norm"] = "group"
    raw["methods"] = [{"name": "m", "trainer": DP_SGD}]
    raw["data"]["split"] = raw.pop("split")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^data\.split\.val: site north has no validation"):
        LocalSite(load_setup(path, None, None), "north", "", None)
