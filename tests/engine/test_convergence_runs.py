"""The 001 §6.1.2/§6.1.4 options in whole runs: lr schedule, early stopping, select_by,
target, communication; FL-SPDP's small ResNet through model.json and geofl.load_model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw

import geofl
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.io import read_jsonl
from geofl.report.html import write_report
from geofl.rundir import seed_dir

SEED = 3


def _run(tmp_path: Path, name: str, overrides: list[str], **raw: Any) -> Path:
    cfg_path = tmp_path / f"{name}.yaml"
    base = tiny_raw(methods=[{"name": "fedavg", "partition": {"name": "iid"}}], **raw)
    cfg_path.write_text(yaml.safe_dump(base))
    return run_experiment(load_config(cfg_path, overrides), tmp_path / name)


def _rounds(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(seed_dir(run_dir, "fedavg", SEED) / "rounds.jsonl")


def _final(run_dir: Path) -> dict[str, Any]:
    final: dict[str, Any] = json.loads(
        (seed_dir(run_dir, "fedavg", SEED) / "final.json").read_text()
    )
    return final


def test_lr_schedule_reaches_the_clients_and_the_record(tmp_path: Path) -> None:
    """constant = no schedule, bit for bit; step halves η_l from round 2 on."""
    adam = ["train.optimizer=adam", "train.lr=0.001", "federation.rounds=2"]
    plain = _run(tmp_path, "plain", adam)
    const = _run(tmp_path, "const", [*adam, "train.lr_schedule={name: constant}"])
    step = _run(tmp_path, "step", [*adam, "train.lr_schedule={name: step, every: 1}"])
    hashes = {
        k: [r["model_sha256"] for r in _rounds(d)]
        for k, d in (("plain", plain), ("const", const), ("step", step))
    }
    assert hashes["const"] == hashes["plain"]
    assert hashes["step"][0] == hashes["plain"][0] and hashes["step"][1] != hashes["plain"][1]
    assert all("lr" not in r for r in _rounds(plain))
    assert [r["lr"] for r in _rounds(const)] == [0.001, 0.001]
    assert [r["lr"] for r in _rounds(step)] == [0.001, 0.0005]
    resolved = yaml.safe_load((plain / "config.yaml").read_text())  # no new keys by default
    assert "lr_schedule" not in resolved["train"]
    assert not {"select_by", "early_stopping", "target"} & set(resolved["eval"])


def test_early_stopping_ends_the_run_and_a_resume_stays_stopped(tmp_path: Path) -> None:
    """No round can gain 10⁹ in val loss: best is round 1, patience 2 → stop after round 3."""
    over = ["federation.rounds=6", "eval.early_stopping={patience: 2, min_delta: 1.0e9}"]
    run_dir = _run(tmp_path, "es", over)
    assert [r["round"] for r in _rounds(run_dir)] == [1, 2, 3]
    final = _final(run_dir)
    assert final["early_stopping"]["stopped_at"] == 3
    assert final["early_stopping"]["best_round"] == 1
    assert final["communication"]["rounds"] == 3
    assert final["final"]["test"] == _rounds(run_dir)[-1]["test"]
    (seed_dir(run_dir, "fedavg", SEED) / "final.json").unlink()  # crashed before final.json
    cfg = load_config(run_dir / "config.yaml")
    run_experiment(cfg, run_dir, resume=True)
    assert [r["round"] for r in _rounds(run_dir)] == [1, 2, 3]
    assert _final(run_dir)["early_stopping"]["stopped_at"] == 3


def test_select_by_and_target_and_communication(tmp_path: Path) -> None:
    over = [
        "federation.rounds=3",
        "eval.select_by=macro_f1",
        "eval.target={metric: accuracy, value: 0.0}",
    ]
    run_dir = _run(tmp_path, "sel", over)
    rounds, final = _rounds(run_dir), _final(run_dir)
    best = max(rounds, key=lambda r: r["val"]["macro_f1"])
    assert final["best_val"]["round"] == best["round"]
    assert final["best_val"]["val_macro_f1"] == best["val"]["macro_f1"]
    per_round = rounds[0]["bytes_up"] + rounds[0]["bytes_down"]
    assert final["target"]["round"] == 1 and final["target"]["bytes_total"] == per_round
    total = sum(r["bytes_up"] + r["bytes_down"] for r in rounds)
    assert final["communication"]["bytes_total"] == total
    summary = json.loads((run_dir / "summary.json").read_text())["methods"]["fedavg"]
    assert summary["bytes_total"]["mean"] == total
    assert summary["target"]["per_seed"] == {str(SEED): 1}
    html = write_report(run_dir).read_text()
    assert (
        '<h2 id="communication">Communication</h2>' in html
        and "rounds to test accuracy ≥ 0" in html
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("eval.select_by=f1", "eval.select_by"),
        ("eval.early_stopping={metric: rmse}", "eval.early_stopping.metric"),
        ("eval.target={metric: map, value: 0.5}", "eval.target.metric"),
        ("train.lr_schedule={name: linear}", "train.lr_schedule.name"),
    ],
)
def test_unknown_names_fail_at_load_in_one_line(tmp_path: Path, override: str, field: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_raw()))
    with pytest.raises(ConfigError, match=rf"^{field}: ") as err:
        load_config(path, [override])
    assert "\n" not in str(err.value)


def test_spdp_small_resnet_runs_and_loads_back(tmp_path: Path) -> None:
    run_dir = _run(
        tmp_path,
        "spdp",
        ["federation.rounds=1", "train.optimizer=adam", "train.lr=0.001"],
        model={"name": "resnet18_spdp_small", "params": {"dropout": 0.3}},
    )
    model = geofl.load_model(run_dir)
    x = torch.rand(2, 13, 16, 16)
    out = model(x)
    assert out.shape == (2, 10) and torch.equal(out, model(x))  # eval: dropout off
