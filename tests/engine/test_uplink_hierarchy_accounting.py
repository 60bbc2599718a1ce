"""Issue 31 items 2, 6 and 18: one counting basis for the tractor → driver bytes (the
hierarchy's hop and the ground uplink's hops agree), the superseded update's logged age,
and the gate's routine outcomes (NQI skips, checkpointer holds, outages) kept out of the
WARNING stream but counted in the round record with a one-line INFO summary per round."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.engine.hierarchy_helpers import agri_raw, config, make_run

from geofl.config.uplink import UplinkConfig
from geofl.engine.uplink.ground import TransmitStatus, Uplink
from geofl.network.rural import LinkStates
from geofl.records import RejectionReason, RoundRecord

GOOD = [-75.0, 60.0, 20.0]  # NQI 0.8 under global normalisation


def _rounds(tmp_path: Path, uplink: dict[str, Any], rounds: int = 2) -> list[RoundRecord]:
    """The records of a tiny synchronous hierarchy (12 tractors) over the ground uplink."""
    hier = {"mode": "sync"}
    run = make_run(config(tmp_path, agri_raw(hier, rounds=rounds, uplink=uplink)), tmp_path / "r")
    params, out = run.init_params, []
    for r in range(1, rounds + 1):
        res = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = res.params
        out.append(res.record)
    return out


def test_hierarchy_and_uplink_count_tractor_driver_bytes_alike(tmp_path: Path) -> None:
    """Under the simulated adversary (half the hops tampered with) some uploads are refused
    by the driver: their bytes were on the link, so both blocks count them."""
    uplink = {
        "network": {"p_fail": 0.0},
        "checkpoint": {"tau_cos": 0.0},
        "nqi": {"tau": 0.0},
        "security": {"tamper_prob": 0.5},
    }
    refused = 0
    for rec in _rounds(tmp_path, uplink):
        assert rec.uplink is not None and rec.hierarchy is not None
        refused += rec.uplink["status"].get("rejected", 0)
        ground = sum(rec.uplink["bytes_by_hop"].values())
        assert ground > 0
        assert rec.hierarchy["bytes_by_hop"]["tractor_driver"] == ground
        # the delivered updates' bytes, recorded apart: what the participants uploaded
        assert sum(rec.uplink["pipeline_bytes"].values()) <= ground
    assert refused > 0  # the scenario really has undelivered transmissions


def test_routine_gate_outcomes_are_counted_not_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """τ_NQI 0.3 skips the tractors on poor links; τ_cos 2 holds every update after a
    tractor's first delivered one (hold when 1 − cos < 2)."""
    uplink = {
        "network": {"p_fail": 0.0},
        "checkpoint": {"tau_cos": 2.0},
        "nqi": {"tau": 0.3},
    }
    with caplog.at_level(logging.DEBUG, logger="geofl"):
        records = _rounds(tmp_path, uplink)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in warned if "rejected update" in m], warned
    status: dict[str, int] = {}
    for rec in records:
        assert rec.uplink is not None
        for name, n in rec.uplink["status"].items():
            status[name] = status.get(name, 0) + n
        held_back = sum(r.reason is RejectionReason.HELD_BACK for r in rec.rejected)
        assert held_back == rec.uplink["status"].get("held", 0) + rec.uplink["status"].get(
            "skipped", 0
        )
    assert status.get("skipped", 0) > 0 and status.get("held", 0) > 0
    routine = [
        r for r in caplog.records if r.levelno == logging.DEBUG and "rejected update" in r.message
    ]
    assert len(routine) >= status["skipped"] + status["held"]  # still there at DEBUG
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    summaries = [m for m in lines if m.startswith(("round 1: uplink ", "round 2: uplink "))]
    assert len(summaries) == 2
    assert f"{records[1].uplink['status']['skipped']} skipped" in summaries[1]


def test_a_refused_envelope_is_still_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uplink = {
        "network": {"p_fail": 0.0},
        "checkpoint": {"tau_cos": 0.0},
        "nqi": {"tau": 0.0},
        "security": {"tamper_prob": 1.0},
    }
    with caplog.at_level(logging.WARNING, logger="geofl"):
        _rounds(tmp_path, uplink, rounds=1)
    assert any("uplink rejected: envelope" in r.getMessage() for r in caplog.records)


def test_superseded_update_logs_how_long_it_waited(caplog: pytest.LogCaptureFixture) -> None:
    cfg = UplinkConfig.model_validate(
        {
            "nqi": {"normalisation": "global"},
            "network": {"max_retries": 2},
            "checkpoint": {"tau_cos": 0.0},
        }
    )
    up = Uplink(cfg, num_clients=4, seed=0)
    x = torch.ones(300)
    for r in (1, 2):  # in an outage (no neighbour up): buffered, aged 1 then 2 rounds
        up.begin_round(r, LinkStates(np.array([GOOD] * 4), np.ones(4, dtype=bool)))
        assert up.transmit(x, 0).status is TransmitStatus.OUTAGE
    up.begin_round(3, LinkStates(np.array([GOOD] * 4), np.zeros(4, dtype=bool)))
    with caplog.at_level(logging.INFO, logger="geofl"):
        assert up.transmit(x, 0).status is TransmitStatus.DELIVERED
    assert "client 0: buffered update superseded after 2 rounds" in caplog.text
