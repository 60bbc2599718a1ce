"""Issue 32 items 3 and 6: the hierarchy-attack and composed presets.

Both pass ``config validate`` and the hierarchy's own run-time checks; each ablation row of
the composed preset switches exactly one part of the full row off; and a tiny composed run
(12 tractors, 2 rounds) trains with DP-SGD, DUAL-SHIELD at the GEO, backdoor tractors, the
governance ledger and the uplink, reporting ASR, ε per tractor and bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.engine.hierarchy_helpers import SEED, agri_raw, config
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config, preset_path
from geofl.engine.experiment import run_experiment
from geofl.engine.hierarchy.build import _check_method
from geofl.rundir import seed_dir

PRESETS = ["paper003-hierarchy-attack", "paper003-composed"]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_passes_validate_and_the_hierarchys_checks(preset: str) -> None:
    result = CliRunner().invoke(app, ["config", "validate", preset])
    assert result.exit_code == 0, result.output
    cfg = load_config(preset)
    assert cfg.seeds == [1, 2, 3]
    for method in cfg.methods:
        assert method.hierarchy is not None and method.attack is not None
        _check_method(cfg, method, None)


def _methods() -> dict[str, dict[str, Any]]:
    raw = yaml.safe_load(preset_path("paper003-composed").read_text("utf-8"))
    return {m["name"]: m for m in raw["methods"]}


#: Each ablation row: the parts of the full row it changes (and nothing else).
ABLATION = {
    "no-dp": {"trainer"},
    "fedavg-geo": {"algorithm", "weighting", "hierarchy"},
    "robustavg-geo": {"algorithm", "weighting"},
    "no-attack": {"attack"},
    "no-governance": set(),
    "sync": {"hierarchy"},
    "plain-uplink": {"uplink"},
}


def test_each_composed_ablation_switches_one_part_off() -> None:
    methods = _methods()
    full = methods.pop("full")
    assert set(methods) == set(ABLATION)
    for name, m in methods.items():
        keys = (set(full) | set(m)) - {"name", "label"}
        changed = {k for k in keys if full.get(k) != m.get(k)}
        assert changed == ABLATION[name], name
    assert methods["no-attack"]["attack"]["fraction"] == 0.0
    assert methods["sync"]["hierarchy"]["mode"] == "sync"
    assert methods["fedavg-geo"]["hierarchy"]["trim_fraction"] == 0.0
    plain = methods["plain-uplink"]["uplink"]
    assert plain["compress"] is False and plain["security"] == {"enabled": False}
    cfg = load_config("paper003-composed")
    assert cfg.governance is not None
    assert set(cfg.governance["methods"]) == set(_methods()) - {"no-governance"}


@pytest.mark.slow
def test_a_tiny_composed_run_reports_asr_epsilon_per_tractor_and_bytes(tmp_path: Path) -> None:
    full = _methods()["full"]
    hier = {**full["hierarchy"], "leo": {"contacts": "ideal", "n": 4, "planes": 2}}
    method = {k: full[k] for k in ("trainer", "algorithm", "weighting", "attack", "uplink")}
    raw = agri_raw(hier, rounds=2, **method)
    raw["methods"][0]["attack"]["fraction"] = 0.25  # 3 of the 12 tractors
    raw["privacy"] = {"accountant": {"name": "rdp"}, "delta": 1.0e-5}
    raw["governance"] = {"committee": {"size": 3, "every": 1}}
    run = run_experiment(config(tmp_path, raw), tmp_path / "run")
    sd = seed_dir(run, "hier", SEED)
    final = json.loads((sd / "final.json").read_text("utf-8"))
    test = final["final"]["test"]
    assert 0.0 <= test["asr"] <= 1.0 and "roc_auc" in test
    eps = final["privacy"]["epsilon_per_client"]
    assert len(eps) == 12 and all(v > 0 for v in eps.values())
    assert final["communication"]["bytes_up"] > 0
    assert len(final["threat"]["attackers"]) == 3
    assert (sd / "governance.jsonl").stat().st_size > 0
