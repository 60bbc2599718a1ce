"""Paper 003's Table 5 flat-baseline presets: settings as documented, and a shrunk run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config

_METHODS = ["centralized", "fedavg", "fedprox", "scaffold", "fednova"]


_PRESETS = [("paper003-task-a", "nutrient", [64, 32]), ("paper003-task-b", "stress", [128, 64])]


@pytest.mark.parametrize(("name", "task", "hidden"), _PRESETS)
def test_presets_follow_the_paper(name: str, task: str, hidden: list[int]) -> None:
    cfg = load_config(name)
    assert [m.name for m in cfg.methods] == _METHODS
    assert cfg.data.dataset == "synthetic_agri" and cfg.data.params["task"] == task
    assert cfg.model.params["hidden"] == hidden
    assert cfg.federation.num_clients == 120 and cfg.eval.group_by == "region"
    assert cfg.train.lr == 0.005 and cfg.train.batch_size == 64  # 003 §3.1.2
    assert all(m.partition.name == "group" for m in cfg.methods[1:])
    assert set(cfg.paper) == set(_METHODS)


@pytest.mark.slow
def test_task_b_preset_runs_shrunk_with_region_metrics(tmp_path: Path) -> None:
    out = tmp_path / "b"
    args = ["run", "paper003-task-b", "--out", str(out), "--no-progress"]
    for kv in (
        "data.params.num_blocks=150",
        "data.params.num_tractors=40",
        "data.params.weeks=12",
        "federation.num_clients=40",
        "federation.rounds=2",
        "train.local_epochs=1",
    ):
        args += ["--set", kv]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    methods = json.loads((out / "summary.json").read_text())["methods"]
    assert list(methods) == _METHODS
    for m in methods.values():
        assert {"final_test_roc_auc_region_0", "final_test_roc_auc_region_std"} <= set(m)
    final = json.loads((out / "methods/fedavg/seed-1/final.json").read_text())
    assert final["num_clients"] == 40
