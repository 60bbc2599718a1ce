"""A forwarded upload is priced on the frames the neighbour really carries (issue 31 item 1).

Setup shared by the tests: D = 2500 values, the ``chunked`` pipeline with 1000 values a
frame, so three frames that sealed (+40 B envelope) weigh 1096, 1096 and 588 B. Tractor 0
is in an outage and forwards through tractor 1 (group {0, 1}); the adversary tampers with
one frame on every hop (``tamper_prob: 1``). In round 1 it hits frame 0 or 1 on the
tractor → neighbour hop, so the neighbour re-seals frames {1, 2} or {0, 2}: 1096 + 588 =
1684 B. The frames that survive are not a prefix of those sent: counting the first two
would give 1096 + 1096 = 2192 B.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.config.uplink import UplinkConfig
from geofl.engine.uplink.ground import TransmitStatus, Uplink
from geofl.network.rural import LinkStates

GOOD = [-75.0, 60.0, 20.0]  # B = 60 Mbps, L = 20 ms
SEALED = [1096, 1096, 588]  # the three frames' sealed sizes (checked below)


def _uplink(deadline_s: float) -> Uplink:
    cfg = UplinkConfig.model_validate(
        {
            "nqi": {"normalisation": "global"},
            "network": {"deadline_s": deadline_s, "neighbour_mbps": 20.0},
            "checkpoint": {"tau_cos": 0.0},
            "neighbour_group": 2,
            "fixed_pipeline": "chunked",
            "pipelines": {"frame_values": 1000},
            "security": {"tamper_prob": 1.0},
        }
    )
    up = Uplink(cfg, num_clients=4, seed=0)
    up.begin_round(1, LinkStates(np.array([GOOD] * 4), np.array([True, False, False, False])))
    return up


def _x() -> torch.Tensor:
    return torch.randn(2500, generator=torch.Generator().manual_seed(1))


def test_forwarded_bytes_are_those_of_the_surviving_frames() -> None:
    tx = _uplink(deadline_s=10.0).transmit(_x(), 0)
    assert tx.via == 1 and tx.status is TransmitStatus.REJECTED
    assert tx.bytes_by_hop["tractor_neighbour"] == sum(SEALED) == 2780
    # one of the two 1096 B frames was refused by the neighbour; it re-sealed the others
    assert tx.bytes_by_hop["neighbour_server"] == 1096 + 588


def test_forwarded_deadline_uses_the_surviving_frames() -> None:
    # local hop 8 · 2780 B / 20 Mbps = 1.112 ms; then frames end at L + 8·Σbytes / B:
    # 1096 B → 20.146 ms, + 588 B → 20.2245 ms (a second 1096 B frame would end at 20.292)
    local = 8 * 2780 / 20e6
    tx = _uplink(deadline_s=local + 0.02026).transmit(_x(), 0)
    assert tx.bytes_by_hop["neighbour_server"] == 1096 + 588  # both carried frames in time
    assert tx.airtime_s == pytest.approx(local + 8 * 1684 / 60e6)
