"""The governance layer on real (tiny) runs: closed loop, audit CLI, offline mode."""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

OUTAGE = {"name": "scripted_outage", "outages": {4: [3, 4]}}


def _raw(governance: dict[str, Any] | None, *, network: dict[str, Any] | None = None) -> Any:
    method: dict[str, Any] = {
        "name": "fedavg",
        "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
    }
    if network is not None:
        method["network"] = network
    raw = tiny_raw(federation={"num_clients": 6, "rounds": 6}, methods=[method])
    if governance is not None:
        raw["governance"] = governance
    return raw


def _run(tmp_path: Path, name: str, raw: dict[str, Any]) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return run_experiment(load_config(p), tmp_path / name)


def _metrics(run: Path) -> list[dict[str, Any]]:
    keys = ("round", "val", "test", "train_loss", "weights", "participants", "model_sha256")
    return [
        {k: r[k] for k in keys} for r in read_jsonl(seed_dir(run, "fedavg", 3) / "rounds.jsonl")
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("gov")
    gov = {"committee": {"size": 2}, "label": "rule_B"}
    return {
        "off": _run(tmp, "off", _raw(None, network=OUTAGE)),
        "on": _run(tmp, "on", _raw(gov, network=OUTAGE)),
        "suspend": _run(
            tmp, "suspend", _raw({**gov, "permissions": {"suspend_below": 0.25}}, network=OUTAGE)
        ),
    }


def test_governance_does_not_change_the_training_metrics(runs: dict[str, Path]) -> None:
    assert _metrics(runs["on"]) == _metrics(runs["off"])


def test_two_consecutive_failures_put_the_node_on_the_watchlist(runs: dict[str, Path]) -> None:
    log = read_jsonl(seed_dir(runs["on"], "fedavg", 3) / "governance.jsonl")
    assert log[0]["label"] == "rule_B_fedavg_seed3"
    rounds = [e for e in log if "round" in e]
    assert [e["round"] for e in rounds] == [1, 2, 3, 4, 5, 6]
    assert all(len(e["committee"]["members"]) == 2 for e in rounds)  # R = 1: every round
    changes = [p for e in rounds for p in e["permissions"]]
    assert len(changes) == 1
    (c,) = changes
    assert (c["node"], c["old"], c["new"], c["round_id"], c["applied"]) == (4, 0, 1, 4, True)
    assert c["reason"] == "consecutive_failures"
    assert c["approvers"] == rounds[3]["committee"]["members"]  # round 4's committee
    assert 4 not in c["approvers"]
    rep4 = [e["reputation"]["4"] for e in rounds]
    assert rep4[3]["reputation"] == min(r["reputation"] for r in rep4)  # lowest at round 4
    assert rep4[3]["miss_streak"] == 2 and rep4[4]["miss_streak"] == 0
    assert rounds[-1]["levels"]["4"] == 1


def test_suspended_nodes_sit_out_later_rounds(runs: dict[str, Path]) -> None:
    rounds = read_jsonl(seed_dir(runs["suspend"], "fedavg", 3) / "rounds.jsonl")
    assert [r["excluded"] for r in rounds] == [[], [], [], [], [4], [4]]
    assert all(4 not in r["participants"] for r in rounds[4:])


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["ledger", *args])


def test_audit_cli_show_committee_permissions_reputation(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run = str(runs["on"])
    show = _cli("show", run)
    assert show.exit_code == 0, show.output
    assert show.output.count("Success") == 6 and "MISMATCH" not in show.output
    assert "Round 3" in _cli("show", run, "--round", "3").output
    perms = _cli("permissions", run)
    assert perms.exit_code == 0 and "client4" in perms.output and "watchlist" in perms.output
    assert _cli("committee", run).exit_code == 0
    png = tmp_path / "rep.png"
    rep = _cli("reputation", run, "--node", "4", "--plot", str(png))
    assert rep.exit_code == 0, rep.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = _cli("reputation", run, "--node", "99")
    assert bad.exit_code == 2 and "client 99" in bad.output


def _model_byte(path: Path) -> int:
    """Offset of a byte in the middle of the largest tensor stored in a torch zip file
    (the flat model parameters), so that the flip lands in what the chain commits."""
    with zipfile.ZipFile(path) as zf:
        storages = [z for z in zf.infolist() if "/data/" in z.filename]
        info = max(storages, key=lambda z: z.file_size)
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack(
        "<HH", raw[info.header_offset + 26 : info.header_offset + 30]
    )
    return info.header_offset + 30 + name_len + extra_len + info.file_size // 2


def test_verify_passes_untouched_and_fails_after_one_flipped_byte(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    ok = _cli("verify", str(runs["on"]))
    assert ok.exit_code == 0, ok.output
    for target in ("checkpoint.pt", "ledger/transactions.jsonl", "governance.rule.json"):
        copy = tmp_path / target.replace("/", "_")
        shutil.copytree(runs["on"], copy)
        path = seed_dir(copy, "fedavg", 3) / target
        data = bytearray(path.read_bytes())
        i = _model_byte(path) if target.endswith(".pt") else len(data) // 2
        while data[i] in b"\n":  # flip a byte that carries content, not a line break
            i += 1
        data[i] ^= 0x01
        path.write_bytes(bytes(data))
        bad = _cli("verify", str(copy))
        assert bad.exit_code == 1, (target, bad.output)
        assert "fedavg/seed-3" in bad.output and "mismatch" in bad.output


def test_config_edit_after_the_run_is_detected(runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "edited"
    shutil.copytree(runs["on"], copy)
    cfg = yaml.safe_load((copy / "config.yaml").read_text())
    cfg["train"]["lr"] = 0.5
    (copy / "config.yaml").write_text(yaml.safe_dump(cfg))
    bad = _cli("verify", str(copy))
    assert bad.exit_code == 1 and "config.yaml: differs from the committed rule" in bad.output


def test_offline_build_reproduces_the_live_ledger(runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "offline"
    shutil.copytree(runs["off"], copy)
    gov = tmp_path / "gov.yaml"
    gov.write_text(yaml.safe_dump({"committee": {"size": 2}, "label": "rule_B"}))
    res = _cli("build", str(copy), "--method", "fedavg", "--seed", "3", "--governance", str(gov))
    assert res.exit_code == 0, res.output
    live = read_jsonl(seed_dir(runs["on"], "fedavg", 3) / "governance.jsonl")[1:]
    offline = read_jsonl(seed_dir(copy, "fedavg", 3) / "governance.jsonl")[1:]
    strip = [{k: v for k, v in e.items() if k not in ("committee", "aggregation")} for e in live]
    assert strip == [
        {k: v for k, v in e.items() if k not in ("committee", "aggregation")} for e in offline
    ]
    members = [e["committee"]["members"] for e in live]
    assert members == [e["committee"]["members"] for e in offline]
    assert _cli("verify", str(copy)).exit_code == 0


def test_ledger_commands_on_a_run_without_governance_fail_clearly(runs: dict[str, Path]) -> None:
    res = _cli("show", str(runs["off"]))
    assert res.exit_code == 2 and "no governance ledger" in res.output
    assert json.loads((runs["off"] / "run.json").read_text())["name"] == "tiny"


def test_live_governance_on_a_json_rpc_node(ganache_url: str, tmp_path: Path) -> None:
    # A fresh seed per session so the deterministic coordinator account has a fresh nonce
    # history on this node (several xdist workers may share nothing, but be safe).
    gov = {"committee": {"size": 2}, "backend": {"name": "rpc", "url": ganache_url}}
    raw = _raw(gov, network=OUTAGE)
    raw["seeds"] = [11]
    raw["federation"]["rounds"] = 5
    run = _run(tmp_path, "rpc", raw)
    sd = seed_dir(run, "fedavg", 11)
    info = json.loads((sd / "ledger" / "rpc.json").read_text())
    assert info["url"] == ganache_url and info["address"].startswith("0x")
    log = read_jsonl(sd / "governance.jsonl")
    changes = [p for e in log[1:] for p in e["permissions"]]
    assert [(c["node"], c["new"], c["applied"]) for c in changes] == [(4, 1, True)]
    ok = _cli("verify", str(run))
    assert ok.exit_code == 0, ok.output
    perms = _cli("permissions", str(run))
    assert perms.exit_code == 0 and "client4" in perms.output


def test_krum_round_with_too_few_updates_keeps_the_model(tmp_path: Path) -> None:
    raw = _raw(None, network={"name": "scripted_outage", "outages": {4: [2]}})
    raw["methods"][0]["aggregator"] = {"name": "krum", "num_byzantine": 1}  # needs > 4 of 6
    raw["federation"]["rounds"] = 3
    raw["methods"][0]["network"]["outages"] = {4: [2], 5: [2]}  # 4 updates left in round 2
    run = _run(tmp_path, "krum", raw)
    rounds = read_jsonl(seed_dir(run, "fedavg", 3) / "rounds.jsonl")
    assert [r["aggregation_error"] is not None for r in rounds] == [False, True, False]
    assert "Krum" in rounds[1]["aggregation_error"]
    assert rounds[1]["model_sha256"] == rounds[0]["model_sha256"]  # global model unchanged


def test_process_tolerates_missing_accuracy_and_empty_validator_pool() -> None:
    import numpy as np

    from geofl.governance.config import GovernanceConfig
    from geofl.governance.ledger import EmbeddedLedger
    from geofl.governance.process import GovernanceProcess

    cfg = GovernanceConfig.model_validate({"nodes": [0, 1, 2], "committee": {"size": 2}})
    proc = GovernanceProcess(
        cfg,
        ledger=EmbeddedLedger.create(None, seed=1),
        seed=1,
        num_clients=3,
        histograms=np.array([[3, 1], [1, 3], [2, 2]]),
        resolved_config={"name": "t"},
        num_params=100,
    )
    proc.start("rule_t")

    def rec(r: int, parts: list[int], val: float) -> RoundRecord:
        return RoundRecord.from_json(
            {
                "round": r,
                "participants": parts,
                "rejected": [],
                "weights": [1 / len(parts)] * len(parts),
                "update_norms": [10.0] * len(parts),
                "val": {"accuracy": val},
                "model_sha256": f"{r:064x}",
                "update_set_sha256": "0" * 64,
            }
        )

    e1 = proc.round(rec(1, [0, 1, 2], float("nan")))  # no validation split: NaN accuracy
    assert len(e1["committee"]["members"]) == 2
    obs = e1["reputation"]["0"]
    assert 0.0 <= obs["reputation"] <= 1.0
    e2 = proc.round(rec(2, [0], 0.5))  # only one validator seen this round
    assert "committee_skipped" not in e2  # the tracker still knows all three nodes
    assert proc.committee == e2["committee"]["members"]


def test_report_has_a_governance_section_for_governed_runs(runs: dict[str, Path]) -> None:
    from geofl.report import write_report

    html = write_report(runs["on"]).read_text()
    assert '<h2 id="governance">Governance</h2>' in html and "rule_B_fedavg_seed3" in html
    assert "client4 0→1 (consecutive_failures" in html
    png = runs["on"] / "report" / "reputation-fedavg-seed-3-client4.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.name in html
    assert ">Governance</h2>" not in write_report(runs["off"]).read_text()
