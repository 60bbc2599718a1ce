"""Forwarded uploads under an adversary on every hop, over many rounds and update sizes
(issue 31 item 1): the bytes recorded on the neighbour → server hop are those of the frames
the neighbour opened, whichever frame the adversary refused.

The oracle redraws the adversary's choice from its documented key (seed, round, owner,
"adversary", sender, receiver): with ``tamper_prob: 1`` and no replays, one ``random()``
then the refused frame's index.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geofl.config.uplink import UplinkConfig
from geofl.engine.uplink.ground import TransmitStatus, Uplink
from geofl.network.pipelines import Pipeline, encode_with_feedback
from geofl.network.rural import LinkStates
from geofl.rng import numpy_generator
from geofl.security.envelope import OVERHEAD_BYTES

GOOD = [-75.0, 60.0, 20.0]


def _refused(round_idx: int, n_frames: int) -> int:
    rng = numpy_generator(0, "round", round_idx, "client", 0, "adversary", 0, 1)
    rng.random()
    return int(rng.integers(n_frames))


@pytest.mark.parametrize("dim", [1700, 2500, 3999])
def test_forwarded_bytes_match_the_frames_the_neighbour_opened(dim: int) -> None:
    cfg = UplinkConfig.model_validate(
        {
            "nqi": {"normalisation": "global"},
            "network": {"deadline_s": 10.0, "max_retries": 0},
            "checkpoint": {"tau_cos": 0.0},
            "neighbour_group": 2,
            "fixed_pipeline": "chunked",
            "pipelines": {"frame_values": 1000},
            "security": {"tamper_prob": 1.0},
        }
    )
    up = Uplink(cfg, num_clients=4, seed=0)
    gen = torch.Generator().manual_seed(dim)
    for r in range(1, 41):  # the 40 cases
        up.begin_round(r, LinkStates(np.array([GOOD] * 4), np.array([True, False, False, False])))
        x = torch.randn(dim, generator=gen)
        residual = up.tractors[0].residual
        enc, _ = encode_with_feedback(x, residual, Pipeline.CHUNKED, cfg.pipelines, round_idx=r)
        sizes = [len(f) + OVERHEAD_BYTES for f in enc.frames]
        tx = up.transmit(x, 0)
        assert tx.status is TransmitStatus.REJECTED and tx.via == 1
        assert tx.bytes_by_hop["tractor_neighbour"] == sum(sizes)
        expected = sum(sizes) - sizes[_refused(r, len(sizes))]
        assert tx.bytes_by_hop["neighbour_server"] == expected, (r, sizes)
