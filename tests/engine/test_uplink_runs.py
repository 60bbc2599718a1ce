"""The opt-in 003 uplink in real runs: encoded bytes counted by hop, envelopes opened before
validation, tampered envelopes lost like uploads while the run goes on, determinism, resume,
bad config refused at load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.io import read_jsonl
from geofl.rundir import seed_dir

SEED = 3


def _raw(uplink: dict[str, Any] | None, rounds: int = 3) -> dict[str, Any]:
    raw = tiny_raw()
    part = {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}
    method: dict[str, Any] = {"name": "ground", "partition": part}
    if uplink is not None:
        method["uplink"] = uplink
    raw["methods"] = [method]
    raw["federation"].update(num_clients=8, rounds=rounds)
    return raw


def _run(tmp_path: Path, name: str, raw: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    run_experiment(load_config(path), tmp_path / name, **kw)
    return read_jsonl(seed_dir(tmp_path / name, "ground", SEED) / "rounds.jsonl")


UPLINK = {
    "nqi": {"tau": -1.0, "t_chunked": 0.3, "normalisation": "global"},  # all send
    "network": {"p_fail": 0.25, "deadline_s": 60.0},
    "checkpoint": {"tau_cos": 0.0},
    "security": {"tamper_prob": 0.3, "replay_prob": 0.5},
}


@pytest.mark.slow
def test_uplink_round_records_and_determinism(tmp_path: Path) -> None:
    recs = _run(tmp_path, "a", _raw(UPLINK))
    again = _run(tmp_path, "b", _raw(UPLINK))
    assert [r["model_sha256"] for r in recs] == [r["model_sha256"] for r in again]
    dim_bytes = None
    for rec in recs:
        up = rec["uplink"]
        assert up["replays_accepted"] == 0
        hops = up["bytes_by_hop"]
        # the encoded bytes of every hop, far below the dense float32 upload
        assert rec["bytes_up"] <= sum(hops.values())
        if rec["participants"]:
            dim_bytes = rec["bytes_down"] // (len(rec["cohort"]) - len(rec["excluded"]))
            assert rec["bytes_up"] < len(rec["participants"]) * dim_bytes
        assert sum(up["status"].values()) == len(rec["cohort"])
    rejected = [r for rec in recs for r in rec["rejected"]]
    assert any("auth_failed" in r["detail"] for r in rejected)  # tampering lost uploads ...
    assert all(rec["status"] == "aggregated" for rec in recs)  # ... and the rounds went on
    total = {}
    for rec in recs:
        for k, v in rec["uplink"]["envelope_rejections"].items():
            total[k] = v  # cumulative counters
    assert total.get("replayed", 0) + total.get("wrong_epoch", 0) + total.get("too_old", 0) > 0
    assert dim_bytes is not None


@pytest.mark.slow
def test_report_has_the_uplink_table(tmp_path: Path) -> None:
    from geofl.report.html import write_report

    _run(tmp_path, "rep", _raw(UPLINK, rounds=2))
    page = write_report(tmp_path / "rep").read_text()
    assert '<h2 id="uplink">Uplink</h2>' in page and "tractor → server" in page
    assert "latency (s)" in page


@pytest.mark.slow
def test_resume_with_uplink_is_identical(tmp_path: Path) -> None:
    from tests.engine.test_stateful_resume import _CrashAfter  # the kill subscriber

    full = _run(tmp_path, "full", _raw(UPLINK, rounds=4))
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "cut", _raw(UPLINK, rounds=4), subscribers=[_CrashAfter("ground", 2)])
    resumed = _run(tmp_path, "cut", _raw(UPLINK, rounds=4), resume=True)
    assert [json.dumps(r["uplink"]) for r in resumed] == [json.dumps(r["uplink"]) for r in full]
    assert [r["model_sha256"] for r in resumed] == [r["model_sha256"] for r in full]


def test_without_uplink_records_have_no_uplink_key(tmp_path: Path) -> None:
    recs = _run(tmp_path, "plain", _raw(None, rounds=1))
    assert "uplink" not in recs[0]
    cfg = seed_dir(tmp_path / "plain", "ground", SEED).parent.parent / "config.yaml"
    if cfg.exists():
        assert "uplink" not in cfg.read_text()


@pytest.mark.parametrize(
    ("uplink", "match"),
    [
        ({"nqi": {"weights": [0.5, 0.5, 0.5]}}, "sum to 1"),
        ({"nqi": {"t_chunked": 0.9}}, "ascending"),
        ({"pipelines": {"k_frac": 0.0}}, "k_frac"),
        ({"pipelines": {"k_frac": 1.5}}, "k_frac"),
    ],
)
def test_bad_uplink_config_rejected_at_load(
    tmp_path: Path, uplink: dict[str, Any], match: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_raw(uplink)))
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_uplink_and_network_both_set_rejected(tmp_path: Path) -> None:
    raw = _raw(UPLINK)
    raw["methods"][0]["network"] = {"name": "lossy", "drop_prob": 0.1}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="uplink"):
        load_config(path)


def test_delivered_update_is_the_decoded_one() -> None:
    from geofl.config.uplink import UplinkConfig
    from geofl.engine.uplink.ground import TransmitStatus, Uplink

    cfg = UplinkConfig.model_validate(
        {
            "nqi": {"tau": -1.0, "t_chunked": -1.0, "t_fallback": -1.0},  # always fallback
            "network": {"p_fail": 0.0, "deadline_s": 1e6},
            "checkpoint": {"tau_cos": 0.0},
        }
    )
    up = Uplink(cfg, num_clients=2, seed=0)
    up.begin_round(1)
    x = torch.linspace(-1, 1, 5000)
    tx = up.transmit(x, 0)
    assert tx.status is TransmitStatus.DELIVERED and tx.values is not None
    assert float((tx.values - x).abs().max()) <= 2 / 255 / 2 * 1.01  # 8-bit, chunk 512
    assert tx.bytes_by_hop == {"tractor_server": 12 + 10 * 8 + 5000 + 40}
