"""The sentinel2-slums-spatial preset: one difference between its methods, documented --set."""

from __future__ import annotations

import re
import shlex

from geofl.config.load import load_config


def test_methods_differ_only_in_the_weighting() -> None:
    cfg = load_config("sentinel2-slums-spatial")
    size, spatial = cfg.methods
    assert (size.weighting.name, spatial.weighting.name) == ("data_size", "spatial")
    assert size.partition == spatial.partition and size.partition.name == "region"
    assert size.release == spatial.release and size.release[0].name == "spatial_alpha"
    assert cfg.seeds == [1, 2, 3] and cfg.model.name == "small_cnn"
    assert cfg.model.params["norm"] == "group"
    assert {"B04", "B8A"} <= set(cfg.data.bands)


def test_documented_overrides_point_it_at_the_real_file() -> None:
    cfg = load_config("sentinel2-slums-spatial")
    sets = re.findall(r"--set ('[^']*'|\S+)", cfg.description)
    overrides = [shlex.split(s)[0] for s in sets]
    real = load_config("sentinel2-slums-spatial", overrides)
    assert real.data.dataset == "sentinel2_npz" and real.task.name == "binary"
    assert str(real.data.params["path"]).startswith("../shared/data/sentinel2_slums_ar/")
