"""DP-SGD through the whole engine: per-round ε, the budget stop, dp_events.json, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from dp_accounting.rdp import rdp_privacy_accountant
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.privacy.accounting import read_dp_events

runner = CliRunner()


def _dp_raw(**trainer: Any) -> dict[str, Any]:
    raw = tiny_raw(
        methods=[
            {
                "name": "fedavg-dp",
                "partition": {"name": "iid"},
                "trainer": {"name": "dp_sgd", "noise_multiplier": 1.5, "clip": 1.0, **trainer},
            }
        ],
        federation={"num_clients": 4, "rounds": 3, "participation": 0.5},
        model={"name": "small_cnn", "params": {"width": 8, "blocks": 2, "norm": "group"}},
    )
    return raw


def _run(tmp_path: Path, raw: dict[str, Any], *extra: str) -> tuple[int, str, Path]:
    cfg = tmp_path / "dp.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(cfg), "--out", str(out), *extra])
    return res.exit_code, res.output, out


def _rounds(out: Path) -> list[dict[str, Any]]:
    (path,) = out.glob("methods/*/*/rounds.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_per_round_epsilon_matches_an_offline_recomputation(tmp_path: Path) -> None:
    code, output, out = _run(tmp_path, _dp_raw())
    assert code == 0, output
    rounds = _rounds(out)
    seen: dict[str, float] = {}
    for rec in rounds:
        assert rec["train_loss"] is None  # DP-SGD releases no training loss
        assert set(rec["epsilon"]) == {str(c) for c in rec["participants"]}
        for k, eps in rec["epsilon"].items():
            assert eps > seen.get(k, 0.0)  # ε grows with every round a client takes part in
            seen[k] = eps
    (events_file,) = out.glob("methods/*/*/dp_events.json")
    (final_file,) = out.glob("methods/*/*/final.json")
    final = json.loads(final_file.read_text())["privacy"]
    assert "record-level" in final["neighbouring"]
    for k, event in read_dp_events(events_file).items():
        acc = rdp_privacy_accountant.RdpAccountant(
            sorted(set(rdp_privacy_accountant.DEFAULT_RDP_ORDERS) | {1.05})
        )
        acc.compose(event)
        assert acc.get_epsilon(1e-5) == pytest.approx(final["epsilon_per_client"][str(k)])
        assert seen[str(k)] == pytest.approx(final["epsilon_per_client"][str(k)])


def test_a_client_stops_before_the_round_that_would_exceed_its_budget(tmp_path: Path) -> None:
    raw = _dp_raw()
    raw["federation"] = {"num_clients": 4, "rounds": 4, "participation": 1.0}
    code, output, out = _run(tmp_path, raw)
    assert code == 0, output
    one_round = max(_rounds(out)[0]["epsilon"].values())
    two_rounds = max(_rounds(out)[1]["epsilon"].values())
    target = (one_round + two_rounds) / 2  # room for exactly one round
    raw["privacy"] = {"target_epsilon": target}
    (tmp_path / "b").mkdir()
    code, output, out = _run(tmp_path / "b", raw)
    assert code == 0, output
    rounds = _rounds(out)
    assert len(rounds[0]["participants"]) == 4
    for rec in rounds[1:]:
        assert rec["participants"] == [] and rec["status"] == "no_updates"
        assert {r["reason"] for r in rec["rejected"]} == {"privacy budget exhausted"}
    (final_file,) = out.glob("methods/*/*/final.json")
    assert json.loads(final_file.read_text())["privacy"]["epsilon_max"] <= target


@pytest.mark.parametrize(
    ("raw_change", "needle"),
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"clip": 0.0}, "clip"),
        ({"sampling_probability": 1.5}, "sampling_probability"),
        ({"adaptive_clip": {"c_min": 2.0, "c_max": 1.0}}, "adaptive_clip"),
    ],
)
def test_bad_dp_settings_are_one_line_exit_2_nothing_written(
    tmp_path: Path, raw_change: dict[str, Any], needle: str
) -> None:
    code, output, out = _run(tmp_path, _dp_raw(**raw_change))
    assert code == 2, output
    assert needle in output and len(output.strip().splitlines()) == 1
    assert not out.exists()


def test_batch_norm_with_dp_is_refused_at_load(tmp_path: Path) -> None:
    raw = _dp_raw()
    raw["model"]["params"]["norm"] = "batch"
    code, output, out = _run(tmp_path, raw)
    assert code == 2 and "model.params.norm" in output and "BatchNorm" in output
    assert not out.exists()


def test_an_unreachable_target_epsilon_is_refused_before_round_1(tmp_path: Path) -> None:
    raw = _dp_raw()
    raw["privacy"] = {"target_epsilon": 0.01}
    code, output, out = _run(tmp_path, raw)
    assert code == 2, output
    assert output.strip().startswith("error: privacy.target_epsilon: 0.01 is exceeded by one")
    assert len(output.strip().splitlines()) == 1
    assert not out.exists()


def test_report_names_the_selection_metric(tmp_path: Path) -> None:
    raw = _dp_raw()
    raw["eval"] = {"select_by": "macro_f1"}
    code, output, out = _run(tmp_path, raw)
    assert code == 0, output
    html = (out / "report" / "index.html").read_text()
    assert "at the round with the best validation macro_f1" in html
    assert "DP-SGD noise multiplier σ = 1.5" in html
