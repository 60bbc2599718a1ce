"""Engine runs with paper-000 release steps: accounting, observations, resume, analysis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rundir import seed_dir


def _cfg(tmp_path: Path, **over: Any) -> Any:
    raw = tiny_raw(
        seeds=[3, 4],
        eval={"observe_updates": True},
        methods=[
            {"name": "fedavg", "partition": {"name": "dirichlet", "alpha": 0.3, "min_samples": 5}},
            {
                "name": "risk",
                "partition": {"name": "dirichlet", "alpha": 0.3, "min_samples": 5},
                "release": [{"name": "risk_aware", "risk": {"tau_mid": 0.3, "tau_high": 0.45}}],
            },
        ],
        analyses=[{"name": "attribute_inference", "window": 1, "n_estimators": 20}],
    )
    raw.update(over)
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_config(p)


class _Crash:
    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if info.method == "risk" and info.seed == 4 and record.round == 2:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def test_private_run_accounts_observes_and_resumes_identically(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    whole = run_experiment(cfg, tmp_path / "whole")
    sdir = seed_dir(whole, "risk", 4)
    final = json.loads((sdir / "final.json").read_text())
    priv = final["privacy"]
    assert priv["delta"] == 1e-5 and priv["accountant"] == "rdp"
    assert set(priv["epsilon_per_client"]) == {"0", "1", "2", "3"}
    assert priv["epsilon_max"] > 1e6  # z = σ/(2C) ≤ 4.4e-4: no meaningful guarantee
    assert "privacy" not in json.loads((seed_dir(whole, "fedavg", 4) / "final.json").read_text())
    rounds = read_jsonl(sdir / "rounds.jsonl")
    levels = {k: v["risk_aware"]["level"] for k, v in rounds[0]["client_log"].items()}
    assert set(levels) == {"0", "1", "2", "3"} and set(levels.values()) <= {"low", "mid", "high"}
    obs = read_jsonl(sdir / "observations.jsonl")
    names = json.loads((sdir / "observations.meta.json").read_text())["features"]
    assert [o["round"] for o in obs] == [1, 2, 3]
    assert all(len(f) == len(names) for o in obs for f in o["features"])
    assert "observed" not in rounds[0]
    attack = json.loads((whole / "analysis" / "attribute_inference.json").read_text())
    assert set(attack["methods"]) == {"fedavg", "risk"}
    assert attack["methods"]["risk"]["high_risk"]["n_samples"] == 2 * 4 * 3

    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "cut", subscribers=[_Crash()])
    cut = run_experiment(cfg, tmp_path / "cut", resume=True)
    for name in ("rounds.jsonl", "observations.jsonl", "final.json"):
        a, b = (seed_dir(d, "risk", 4) / name for d in (whole, cut))
        if name == "final.json":
            fa, fb = json.loads(a.read_text()), json.loads(b.read_text())
            assert fa["privacy"] == fb["privacy"] and fa["final"] == fb["final"]
        else:
            strip = [{k: v for k, v in r.items() if k != "time_s"} for r in read_jsonl(a)]
            assert strip == [{k: v for k, v in r.items() if k != "time_s"} for r in read_jsonl(b)]
