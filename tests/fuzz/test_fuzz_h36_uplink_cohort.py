"""Fuzz: the cohort uplink equals the per-client one on arbitrary cohorts (issue 36).

Random cohorts (size, order, row length), rows drawn from values that stress the codecs
(±0, repeats, subnormals, float32's extremes) and random link states per round, under a
few uplink configurations: :meth:`Uplink.transmit_cohort` must leave the same
transmissions and tractor state as :meth:`Uplink.transmit` called row by row, for three
rounds (buffers, residuals and checkpointer references carried over).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.engine import test_uplink_cohort as cohort_tests

from geofl.engine.uplink.ground import Uplink
from geofl.network.rural import LinkStates

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # float32 extremes

LEVELS = np.array(
    [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -3.0, 1e-45, -1e-40, 1e30, -3.4e38, 3.4e38], np.float32
)
CONFIGS: list[dict[str, Any]] = [
    {},
    {"pipelines": {"frame_values": 7, "k_frac": 0.3}},
    {"fixed_pipeline": "paq", "pipelines": {"error_feedback": False}},
    {"security": {"tamper_prob": 0.2, "replay_prob": 0.2}, "checkpoint": {"tau_cos": 0.3}},
]


def _uplink(k: int, over: dict[str, Any]) -> Uplink:
    """The cohort tests' uplink with a short deadline, one retry and groups of 3."""
    network = {"deadline_s": 5.0, "max_retries": 1}
    return cohort_tests._uplink(k, network=network, neighbour_group=3, **over)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(1, 7),
    d=st.integers(1, 60),
    config=st.sampled_from(range(len(CONFIGS))),
    seed=st.integers(0, 2**31 - 1),
)
def test_cohort_equals_per_client(k: int, d: int, config: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ref, coh = _uplink(k, CONFIGS[config]), _uplink(k, CONFIGS[config])
    for r in range(1, 4):
        s = rng.uniform([-112.0, 0.2, 20.0], [-75.0, 60.0, 500.0], size=(k, 3))
        links = LinkStates(s, rng.random(k) < 0.3)
        ref.begin_round(r, links)
        coh.begin_round(r, copy.deepcopy(links))
        rows = np.where(
            rng.random((k, d)) < 0.5,
            LEVELS[rng.integers(0, LEVELS.size, (k, d))],
            rng.standard_normal((k, d)).astype(np.float32),
        )
        deltas = torch.from_numpy(rows.astype(np.float32))
        clients = [int(c) for c in rng.permutation(k)]
        want = [ref.transmit(deltas[i].clone(), c) for i, c in enumerate(clients)]
        got = coh.transmit_cohort(deltas.clone(), clients)
        fields = cohort_tests._tx_fields
        assert [fields(t) for t in got] == [fields(t) for t in want]
        assert cohort_tests._state(coh) == cohort_tests._state(ref)
