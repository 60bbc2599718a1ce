"""Paper 003's space-layer presets (Tables 5-7, 10-12, 14): settings as the paper gives them
and as documented, and a shrunk run whose records carry Table 10 and Table 12."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config

_PRESETS = ("paper003-hierarchical", "paper003-table11", "paper003-table14-hier")


@pytest.mark.parametrize("name", _PRESETS)
def test_hierarchy_presets_follow_the_paper(name: str) -> None:
    cfg = load_config(name)
    assert cfg.data.dataset == "synthetic_agri" and cfg.data.params["task"] == "stress"
    assert cfg.data.split.group == "block" and cfg.model.params["hidden"] == [128, 64]
    assert cfg.federation.num_clients == 120 and cfg.eval.group_by == "region"
    assert cfg.train.lr == 0.005 and cfg.train.batch_size == 64  # 003 §3.1.2
    assert set(cfg.paper) == {m.name for m in cfg.methods}
    for m in cfg.methods:
        assert m.uplink is not None and m.uplink.network.profile_source == "data"
        assert m.partition.name == "group" and m.partition.params["key"] == "tractor"
        if m.hierarchy is not None:  # 8 LEOs, sgp4 contacts, 30 s slots (§3.1.3)
            h = m.hierarchy
            assert h.mode == "async" and h.leo.contacts == "orbit" and h.leo.n == 8
            assert h.leo.slot_s == 30.0 and h.kappa == 0.5


def test_table5_rows_and_the_sweep_and_ablations() -> None:
    by = {m.name: m for m in load_config("paper003-hierarchical").methods}
    assert by["fedavg"].hierarchy is None and by["ours-ground"].hierarchy is None
    no_nqi, full = by["hier-no-nqi"], by["ours-full"]
    assert no_nqi.hierarchy is not None and full.hierarchy is not None
    assert no_nqi.uplink is not None and no_nqi.uplink.fixed_pipeline == "raw"  # periodic
    assert no_nqi.uplink.checkpoint.tau_cos == 0.0  # no similarity gating
    assert full.uplink is not None and full.uplink.fixed_pipeline is None  # NQI gate on
    sweep = [
        (m.uplink.network.p_fail, m.hierarchy.leo.p_leo_fail)
        for m in load_config("paper003-table11").methods
        if m.uplink is not None and m.hierarchy is not None
    ]
    assert sweep == [(p, 0.05) for p in (0.0, 0.1, 0.2, 0.3, 0.4)] + [(0.2, 0.1), (0.3, 0.1)]
    t14 = {m.name: m for m in load_config("paper003-table14-hier").methods}
    assert t14["ground-only"].hierarchy is None
    assert t14["no-fairness"].hierarchy is not None and not t14["no-fairness"].hierarchy.fairness
    assert all(t14[k].hierarchy is not None for k in ("full", "no-nqi", "no-compression"))
    assert t14["no-compression"].uplink is not None and not t14["no-compression"].uplink.compress
    no_comp = t14["no-compression"].hierarchy
    assert no_comp is not None and no_comp.links.compress is False  # off at the driver too
    assert t14["full"].hierarchy is not None and t14["full"].hierarchy.links.compress is None


@pytest.mark.slow
def test_hierarchical_preset_runs_shrunk_with_table10_and_region_metrics(tmp_path: Path) -> None:
    out = tmp_path / "h"
    args = ["run", "paper003-hierarchical", "--out", str(out), "--no-progress"]
    for kv in (
        "data.params.num_blocks=150",
        "data.params.num_tractors=40",
        "data.params.weeks=12",
        "federation.num_clients=40",
        "federation.rounds=3",
        "train.local_epochs=1",
        "eval.every=1",
    ):
        args += ["--set", kv]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    methods = json.loads((out / "summary.json").read_text())["methods"]
    assert list(methods) == ["fedavg", "ours-ground", "hier-no-nqi", "ours-full"]
    for m in methods.values():
        assert {"final_test_roc_auc_region_0", "final_test_roc_auc_region_std"} <= set(m)
    lines = (out / "methods/ours-full/seed-1/rounds.jsonl").read_text().splitlines()
    blocks = [json.loads(line)["hierarchy"] for line in lines]
    assert all(b["metric"] == "roc_auc" for b in blocks if b["staleness"])
    assert sum(row["updates"] for b in blocks for row in b["staleness_table"]) == sum(
        len(b["staleness"]) for b in blocks
    )
    assert "test AUC at 0-1" in (out / "report/index.html").read_text()
