"""The hierarchy table's figures by hand: staleness means, GEO-weight shares per staleness
bucket, delivery ratio per hop, count-weighted latency, bytes per tractor and round."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from geofl.records import RoundRecord, RoundStatus
from geofl.report.hierarchy import hierarchy_figures, timeline_figures
from geofl.report.hierarchy_plots import plot_timeline


def _rec(r: int, block: dict[str, object] | None, cohort: int = 4) -> RoundRecord:
    return RoundRecord(
        r, RoundStatus.AGGREGATED, [], [], cohort=list(range(cohort)), hierarchy=block
    )


def test_hierarchy_figures_by_hand() -> None:
    a = {
        "staleness": [0, 0, 1],
        "geo_weight": [0.25, 0.25, 0.5],
        "update_metric": [0.9, 0.9, 0.8],
        "sent": {"tractor_driver": 4, "driver_leo": 2},
        "delivered": {"tractor_driver": 3, "driver_leo": 1},
        "bytes_by_hop": {"tractor_driver": 4000, "driver_leo": 800},
        "latency_s": {"pass_wait": 10.0},
        "latency_n": {"pass_wait": 1},
        "energy_by_hop": {"tractor_driver": 0.6, "driver_leo": 0.0064},
        "envelope_rejections": {"driver_leo": {"auth_failed": 1}},
    }
    b = {
        "staleness": [3, 5],
        "geo_weight": [0.5, 0.5],
        "sent": {"tractor_driver": 4, "driver_leo": 2},
        "delivered": {"tractor_driver": 1, "driver_leo": 2},
        "bytes_by_hop": {"tractor_driver": 4000},
        "latency_s": {"pass_wait": 40.0},
        "latency_n": {"pass_wait": 2},
    }
    f = hierarchy_figures([_rec(1, a), _rec(2, None), _rec(3, b)])
    assert f is not None
    assert f["staleness"] == pytest.approx(9 / 5)
    # weights sum to 2: (0.5·1 + 0.5·3 + 0.5·5) / 2
    assert f["staleness_weighted"] == pytest.approx(2.25)
    assert (f["weight_0"], f["weight_1"], f["weight_2"], f["weight_3"]) == pytest.approx(
        (0.25, 0.25, 0.0, 0.5)
    )
    # Table 10 pooled over the run: 0-1 holds 3 of 5 updates, 1.0 of the 2.0 GEO weight,
    # AUC (0.9 + 0.9 + 0.8) / 3; 2-3 holds staleness 3; 4+ staleness 5; b carries no metric
    assert f["t10_fraction_0-1"] == pytest.approx(0.6)
    assert f["t10_contribution_0-1"] == pytest.approx(0.5)
    assert f["t10_metric_0-1"] == pytest.approx(2.6 / 3)
    assert f["t10_fraction_2-3"] == pytest.approx(0.2)
    assert f["t10_contribution_4+"] == pytest.approx(0.25)
    assert math.isnan(f["t10_metric_4+"])
    assert f["delivery_tractor_driver"] == pytest.approx(0.5)
    assert f["delivery_driver_leo"] == pytest.approx(0.75)
    assert math.isnan(f["delivery_leo_geo"])
    assert f["latency_pass_wait"] == pytest.approx((10.0 + 2 * 40.0) / 3)
    assert math.isnan(f["latency_relay_wait"])
    assert f["bytes_tractor_driver"] == pytest.approx(8000 / 12)
    assert f["bytes_driver_leo"] == pytest.approx(800 / 12)
    # energy per sampled tractor and round: 0.6 J and 800 B · 8 / 1 Mbps · 2 W over 12 slots
    assert f["energy_tractor_driver"] == pytest.approx(0.05)
    assert f["energy_driver_leo"] == pytest.approx(0.0064 / 12)
    assert f["energy_leo_geo"] == 0.0
    assert f["energy_uplink"] == pytest.approx(0.6064 / 12) and f["refused"] == 1.0
    assert hierarchy_figures([_rec(1, None)]) is None


def test_hierarchy_block_round_trips_through_the_record_json() -> None:
    block = {"staleness": [1, 2], "geo_weight": [0.5, 0.5], "sent": {"leo_geo": 1}}
    rec = _rec(3, block)
    back = RoundRecord.from_json(rec.to_json())
    assert back.hierarchy == block
    assert "hierarchy" not in _rec(3, None).to_json()  # other runs' records stay as they were


def test_timeline_figure_is_drawn_from_the_events(tmp_path: Path) -> None:
    events = [
        [700.0, "uplink", 2, 0],
        [900.0, "relay", 2, -1],
        [3600.0, "geo", -1, -1],
        [4000.0, "downlink", -1, 0],
        [40_000.0, "uplink", 5, 1],
    ]
    path = plot_timeline([tuple(e) for e in events], tmp_path / "t.png", title="t", hours=2.0)  # type: ignore[misc]
    assert path.stat().st_size > 0
    rec = _rec(1, {"events": events})
    run = SimpleNamespace(
        methods={"h": {1: SimpleNamespace(rounds=[rec])}}, display_names=lambda: {"h": "Hier"}
    )
    blocks = timeline_figures(run, tmp_path)  # type: ignore[arg-type]
    assert len(blocks) == 1 and "hierarchy_timeline_h.png" in blocks[0]
    assert (tmp_path / "hierarchy_timeline_h.png").is_file()
    quiet = SimpleNamespace(
        methods={"h": {1: SimpleNamespace(rounds=[_rec(1, {"events": []})])}},
        display_names=lambda: {},
    )
    assert timeline_figures(quiet, tmp_path) == []  # type: ignore[arg-type]
