"""The uplink table's latency: each round's mean weighted by its deliveries (003 §3.1.4)."""

from __future__ import annotations

import math

import pytest

from geofl.report.uplink import _latency


def test_latency_is_delivery_weighted_and_skips_rounds_without_deliveries() -> None:
    ups: list[dict[str, object]] = [
        {"status": {"delivered": 2, "lost": 1}, "latency_s": 1.0, "latency_local_s": 0.2},
        {"status": {"delivered": 1}, "latency_s": 4.0, "latency_local_s": 0.5},
        {"status": {"lost": 3}, "latency_s": math.nan, "latency_local_s": math.nan},
    ]
    # (2·1.0 + 1·4.0) / 3 = 2.0 s; local (2·0.2 + 0.5) / 3 = 0.3 s
    assert _latency(ups) == pytest.approx((2.0, 0.3))
    lat, local = _latency([{"status": {"lost": 1}, "latency_s": math.nan}])
    assert math.isnan(lat) and math.isnan(local)
