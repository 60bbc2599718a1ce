"""Slow end-to-end runs of the paper-000 presets, shortened (still run in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geofl.cli import app

_SHORT = [
    "--set",
    "federation.rounds=2",
    "--set",
    "data.params.num_samples=600",
    "--set",
    "data.params.size=16",
    "--no-progress",
]


def _run(preset: str, out: Path, *extra: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["run", preset, "--out", str(out), *_SHORT, *extra])
    assert result.exit_code == 0, result.output
    summary: dict[str, object] = json.loads((out / "summary.json").read_text())
    return summary


@pytest.mark.slow
def test_noise_preset_end_to_end_with_attack(tmp_path: Path) -> None:
    out = tmp_path / "noise"
    summary = _run(
        "paper000-noise",
        out,
        "--seeds",
        "1,42",
        "--set",
        "analyses.0.window=1",
        "--set",
        "analyses.0.n_estimators=20",
    )
    assert set(summary["methods"]) == {"fedavg", "uniform-noise", "risk-aware-noise"}  # type: ignore[call-overload]
    attack = json.loads((out / "analysis" / "attribute_inference.json").read_text())
    for m in ("fedavg", "uniform-noise", "risk-aware-noise"):
        assert attack["methods"][m]["high_risk"]["n_samples"] == 2 * 10 * 2
    final = json.loads((out / "methods/risk-aware-noise/seed-1/final.json").read_text())
    assert final["privacy"]["epsilon_max"] > 1e5
    assert (out / "report" / "index.html").exists()


@pytest.mark.slow
def test_aggregation_preset_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "agg"
    summary = _run("paper000-aggregation", out, "--seeds", "1")
    methods = summary["methods"]
    assert set(methods) == {"fedavg", "trimmed-mean", "krum", "consistency"}  # type: ignore[call-overload]
    rec = json.loads((out / "methods/consistency/seed-1/rounds.jsonl").read_text().splitlines()[0])
    assert len(rec["weights"]) == 10 and sum(rec["weights"]) == pytest.approx(1.0)
    assert len(set(rec["weights"])) > 1  # JS consistency weights differ across clients


@pytest.mark.slow
def test_table1_preset_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "t1"
    summary = _run("paper000-table1", out, "--seeds", "1", "--set", "federation.rounds=1")
    assert list(summary["methods"]) == [  # type: ignore[call-overload]
        "centralized",
        "fedavg-iid",
        "fedavg-dir0.5",
        "fedavg-dir0.1",
        "uniform-noise",
        "risk-aware-noise",
        "integrated",
    ]


@pytest.mark.slow
def test_governance_scenario_b_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "gov-b"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "paper000-governance-b",
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
            "--set",
            "federation.rounds=6",
            "--set",
            "data.params.num_samples=600",
            "--set",
            "data.params.size=16",
        ],
    )
    assert result.exit_code == 0, result.output
    sd = out / "methods/integrated/seed-1"
    log = [json.loads(line) for line in (sd / "governance.jsonl").read_text().splitlines()]
    changes = [p for e in log[1:] for p in e["permissions"]]
    assert [(c["node"], c["old"], c["new"], c["round_id"]) for c in changes] == [(7, 0, 1, 5)]
    assert changes[0]["approvers"] == log[5]["committee"]["members"]  # round 5's committee
    assert {len(e["committee"]["members"]) for e in log[1:]} == {2}
    assert sorted(log[1]["reputation"]) == ["1", "3", "5", "7", "8", "9"]
    verify = CliRunner().invoke(app, ["ledger", "verify", str(out)])
    assert verify.exit_code == 0, verify.output
