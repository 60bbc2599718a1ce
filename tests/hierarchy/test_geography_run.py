"""A tiny end-to-end hierarchy run on the world geography (issue 32, deliverable 5): the
GEO step sees ten or more regional models, so RobustAvg trims (b = ⌊0.1 · L⌋ ≥ 1), and the
round record says how many regions and farms it saw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

REGIONS = 13


def _world_raw(rounds: int) -> dict[str, Any]:
    hier = {"round_s": 3600, "driver_deadline_s": 600, "staleness_metric": False}
    raw = agri_raw(hier, rounds=rounds)
    raw["data"]["params"].update(
        geography="world",
        farms_per_region=[1] * REGIONS,
        num_tractors=2 * REGIONS,
        num_blocks=20 * REGIONS,
    )
    raw["federation"]["num_clients"] = 2 * REGIONS
    return raw


@pytest.mark.slow  # ~15 s idle, ~50 s on a loaded machine: two rounds with sgp4 contacts
def test_world_geography_run_trims_and_counts_regions(tmp_path: Path) -> None:
    run = make_run(config(tmp_path, _world_raw(rounds=2)), tmp_path / "world")
    topo = run.scheduler.topo  # the fleet's regions from the data's region centres
    assert sorted(set(np.asarray(topo.region).tolist())) == list(range(REGIONS))
    params, geos = run.init_params, []
    for r in (1, 2):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        assert res.record.hierarchy is not None
        geos.append(res.record.hierarchy["geo"])
    seen = [g for g in geos if g is not None]
    assert seen, "the GEO never aggregated"
    for g in seen:
        assert g["models"] == len(g["regions_per_model"]) and g["farms"] >= g["regions"] >= 1
        assert g["trimmed"] == int(0.1 * g["models"] + 1e-9)
    best = max(seen, key=lambda g: g["models"])
    assert best["models"] >= 10 and best["trimmed"] >= 1  # RobustAvg trims
    assert best["regions"] >= 8
