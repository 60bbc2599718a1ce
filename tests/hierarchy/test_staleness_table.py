"""003 Table 10 by hand: fraction of updates, GEO-weighted contribution and the count-
weighted test metric per staleness bucket (0-1, 2-3, 4+ rounds)."""

from __future__ import annotations

import math

import pytest

from geofl.engine.hierarchy.stats import HierarchyStats
from geofl.hierarchy.staleness import staleness_table


def test_staleness_table_by_hand() -> None:
    # updates: staleness 0, 1, 1, 2, 5, 7 with GEO shares summing to 1
    stale = [0, 1, 1, 2, 5, 7]
    weight = [0.4, 0.2, 0.1, 0.2, 0.05, 0.05]
    # regional model AUCs carried by the updates (NaN: the model was not measured)
    metric = [0.9, 0.8, 0.8, 0.7, 0.6, math.nan]
    lo, mid, hi = staleness_table(stale, weight, metric)
    assert (lo.label, mid.label, hi.label) == ("0-1", "2-3", "4+")
    assert (lo.updates, mid.updates, hi.updates) == (3, 1, 2)
    assert (lo.fraction, mid.fraction, hi.fraction) == pytest.approx((0.5, 1 / 6, 1 / 3))
    assert (lo.contribution, mid.contribution, hi.contribution) == pytest.approx((0.7, 0.2, 0.1))
    assert lo.metric == pytest.approx((0.9 + 0.8 + 0.8) / 3)  # 0.8333
    assert mid.metric == pytest.approx(0.7)
    assert hi.metric == pytest.approx(0.6)  # the unmeasured update is left out


def test_staleness_table_empty_and_unmeasured() -> None:
    rows = staleness_table([], [], None)
    assert [r.updates for r in rows] == [0, 0, 0]
    assert all(r.fraction is None and r.contribution is None and r.metric is None for r in rows)
    rows = staleness_table([3], [0.0], None)
    assert rows[1].fraction == 1.0 and rows[1].contribution is None and rows[1].metric is None


def test_the_round_block_carries_the_table() -> None:
    st = HierarchyStats(
        staleness=[0, 4], geo_weight=[0.75, 0.25], update_metric=[0.9, 0.6], metric="roc_auc"
    )
    block = st.to_json()
    assert block["metric"] == "roc_auc" and block["update_metric"] == [0.9, 0.6]
    t = {row["bucket"]: row for row in block["staleness_table"]}
    assert t["0-1"]["contribution"] == 0.75 and t["0-1"]["metric"] == 0.9
    assert t["2-3"]["updates"] == 0 and t["2-3"]["metric"] is None
    assert t["4+"]["fraction"] == 0.5 and t["4+"]["metric"] == 0.6
    # without a probe the metric is absent, not misaligned
    plain = HierarchyStats(staleness=[0], geo_weight=[1.0]).to_json()
    assert plain["metric"] is None and plain["staleness_table"][0]["metric"] is None
