"""The uplink's per-tractor policy (003 Alg. 1, §2.3.1) on scripted link states: forwarding,
buffering and coalescing, superseding after R_max, checkpointer holds, NQI skips, deadline."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from geofl.config.uplink import UplinkConfig
from geofl.engine.uplink.ground import TransmitStatus, Uplink
from geofl.network.rural import LinkStates

GOOD = [-75.0, 60.0, 20.0]  # best of every range: NQI = 0.35 + 0.45 = 0.8 (fallback band)
BAD = [-112.0, 0.2, 500.0]  # worst of every range: NQI = −0.2


def _uplink(**over: Any) -> Uplink:
    raw: dict[str, Any] = {
        "nqi": {"normalisation": "global"},
        "network": {"deadline_s": 1e6, "max_retries": 2},
        "checkpoint": {"tau_cos": 0.0},
        "neighbour_group": 2,
    }
    for key, value in over.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return Uplink(UplinkConfig.model_validate(raw), num_clients=4, seed=0)


def _links(rows: list[list[float]], outage: list[bool]) -> LinkStates:
    return LinkStates(np.array(rows), np.array(outage))


def _x(seed: int) -> torch.Tensor:
    return torch.randn(3000, generator=torch.Generator().manual_seed(seed))


def test_outage_forwards_through_the_best_neighbour() -> None:
    up = _uplink()
    up.begin_round(1, _links([GOOD, GOOD, GOOD, GOOD], [True, False, False, False]))
    tx = up.transmit(_x(0), 0)
    assert tx.status is TransmitStatus.DELIVERED and tx.via == 1  # group {0, 1}
    assert set(tx.bytes_by_hop) == {"tractor_neighbour", "neighbour_server"}
    assert tx.bytes_by_hop["tractor_neighbour"] == tx.bytes_by_hop["neighbour_server"]
    up.begin_round(2, _links([GOOD, GOOD, GOOD, GOOD], [True, True, False, False]))
    assert up.transmit(_x(1), 0).status is TransmitStatus.OUTAGE  # neighbour 1 down too


def test_buffered_update_is_coalesced_then_superseded() -> None:
    up = _uplink()
    down = _links([GOOD] * 4, [True] * 4)
    up.begin_round(1, down)
    assert up.transmit(_x(0), 2).status is TransmitStatus.OUTAGE
    up.begin_round(2, _links([GOOD] * 4, [False] * 4))
    tx = up.transmit(_x(1), 2)  # 0.8 ≥ 0.75: 8-bit fallback, close to x0 + x1
    assert tx.status is TransmitStatus.DELIVERED and tx.values is not None
    assert tx.buffered_rounds == 1
    assert float((tx.values - (_x(0) + _x(1))).abs().max()) < 0.05
    for r in (3, 4):  # two rounds down: the buffer ages to R_max = 2
        up.begin_round(r, down)
        up.transmit(_x(r), 2)
    up.begin_round(5, _links([GOOD] * 4, [False] * 4))
    tx = up.transmit(_x(5), 2)  # x3 + x4 superseded: only x5 (+ residual) goes
    assert tx.values is not None
    assert float((tx.values - _x(5)).abs().max()) < 0.05


def test_low_nqi_skips_and_checkpointer_holds() -> None:
    up = _uplink(checkpoint={"tau_cos": 0.5})
    up.begin_round(1, _links([BAD, GOOD, GOOD, GOOD], [False] * 4))
    skip = up.transmit(_x(0), 0)
    assert skip.status is TransmitStatus.SKIPPED and skip.nqi < 0.35
    assert up.transmit(_x(0), 1).status is TransmitStatus.DELIVERED
    up.begin_round(2, _links([GOOD] * 4, [False] * 4))
    held = up.transmit(_x(0) * 1.01, 1)  # cos ≈ 1 with the last sent: held back
    assert held.status is TransmitStatus.HELD
    tx = up.transmit(_x(0) * -2.02, 1)  # coalesced with the held one: −1.01·x0, cos −1
    assert tx.status is TransmitStatus.DELIVERED and tx.values is not None
    assert float((tx.values + 1.01 * _x(0)).abs().max()) < 0.05


def test_pipeline_follows_nqi_and_deadline_loses_late_frames() -> None:
    mid = [-93.5, 30.0, 20.0]  # global ranges: S̃ = 0.5, B̃ ≈ 0.5, L̃ = 0 → NQI ≈ 0.40
    up = _uplink(pipelines={"frame_values": 1000})
    up.begin_round(1, _links([mid, GOOD, GOOD, GOOD], [False] * 4))
    tx = up.transmit(_x(0), 0)
    assert tx.pipeline is not None and tx.pipeline.value == "compressed"
    slow = _uplink(
        network={"deadline_s": 0.0203}, nqi={"t_fallback": 0.9}, pipelines={"frame_values": 1000}
    )
    slow.begin_round(1, _links([GOOD] * 4, [False] * 4))
    late = slow.transmit(_x(0), 0)  # chunked: 3 frames of ~1.1 kB end at 20.14, 20.28, 20.42 ms
    assert late.status is TransmitStatus.DEADLINE and "frames past the deadline" in late.detail


def test_fixed_raw_pipeline_is_fedavg_over_the_same_links() -> None:
    up = _uplink(fixed_pipeline="raw")
    up.begin_round(1, _links([BAD, GOOD, GOOD, GOOD], [False] * 4))
    tx = up.transmit(_x(0), 0)  # NQI −0.2: no gate with a fixed pipeline
    assert tx.status is TransmitStatus.DELIVERED and tx.values is not None
    assert torch.equal(tx.values, _x(0))
    assert tx.bytes_by_hop == {"tractor_server": 8 + 4 * 3000 + 40}
    # 12 kB at 0.2 Mbps + 0.5 s latency = 0.98 s of latency
    assert tx.latency_s == pytest.approx(0.5 + 8 * 12048 / 0.2e6)


def test_checkpointer_with_tau_dot_needs_a_stable_inner_product_too() -> None:
    up = _uplink(checkpoint={"tau_cos": 0.5, "tau_dot": 5.0})
    up.begin_round(1, _links([GOOD] * 4, [False] * 4))
    assert up.transmit(_x(0), 1).status is TransmitStatus.DELIVERED
    up.begin_round(2, _links([GOOD] * 4, [False] * 4))
    # cos ≈ 1 but s_dot jumps from 0 (no previous test) to ≈ ‖x0‖² ≈ 3000: sent
    assert up.transmit(_x(0), 1).status is TransmitStatus.DELIVERED
    up.begin_round(3, _links([GOOD] * 4, [False] * 4))
    # the reference is now round 2's reconstruction (≈ x0 again, 8-bit error), so s_dot
    # stays ≈ ‖x0‖² as in round 2's test (|Δ s_dot| < 5) and cos ≈ 1: held
    assert up.transmit(_x(0), 1).status is TransmitStatus.HELD
