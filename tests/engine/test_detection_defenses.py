"""FedAvg, Krum, median, FLAME and DUAL-SHIELD on the detection task under the
object-disappearance attack (004 Table 3 on detection): two rounds each, ASR per evaluated
round (004 Eq. 15) next to CDA = mAP@0.5 (Eq. 14), the threat and the report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.report import write_report

ODA = {"name": "oda", "fraction": 0.2, "poison_ratio": 0.5, "target": 0, "trigger": {"size": 5}}
METHODS: list[dict[str, Any]] = [
    {"name": "fedavg-clean", "attack": {**ODA, "fraction": 0.0}},
    {"name": "fedavg", "attack": ODA},
    {"name": "krum", "aggregator": {"name": "krum", "num_byzantine": 1}, "attack": ODA},
    {"name": "median", "aggregator": {"name": "median"}, "attack": ODA},
    {
        "name": "flame",
        "weighting": {"name": "uniform"},
        "algorithm": {"name": "flame"},
        "attack": ODA,
    },
    {"name": "dual-shield", "algorithm": {"name": "dual_shield"}, "attack": ODA},
]


def _raw() -> dict[str, Any]:
    return {
        "name": "tiny-oda",
        "seeds": [1],
        "task": {"name": "detection"},
        "data": {
            "dataset": "synthetic_aerial",
            "params": {"num_samples": 40, "size": 64, "seed": 0},
            "split": {"val": 0.1, "test": 0.2},
        },
        "model": {"name": "fcos", "params": {"width": 8, "fpn_channels": 64, "head_convs": 1}},
        "train": {"optimizer": "adam", "lr": 5.0e-4, "batch_size": 4, "local_steps": 1},
        "federation": {"num_clients": 5, "rounds": 2},
        "eval": {"every": 1, "batch_size": 16},
        "compare_to": "dual-shield",
        "methods": [{**m, "partition": {"name": "iid"}} for m in METHODS],
    }


@pytest.mark.slow  # ~8 s CPU: detection runs under every defense
def test_defenses_run_on_detection_under_oda_and_record_asr(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(_raw()))
    run = run_experiment(load_config(path), tmp_path / "run")
    for m in METHODS:
        seed = run / "methods" / m["name"] / "seed-1"
        rounds = [json.loads(line) for line in (seed / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rounds] == [1, 2]
        for r in rounds:  # CDA and ASR of every evaluated round
            assert 0.0 <= r["test"]["map_50"] <= 1.0 and 0.0 <= r["test"]["asr"] <= 1.0
            assert 0.0 <= r["test"]["miss_untriggered"] <= 1.0  # the same objects, no trigger
        final = json.loads((seed / "final.json").read_text())
        threat = final["threat"]
        assert threat["attack"] == "oda" and threat["asr"]["score_threshold"] == 0.25
        assert len(threat["attackers"]) == (0 if m["name"] == "fedavg-clean" else 1)
        assert final["final"]["test"]["asr"] == rounds[-1]["test"]["asr"]
    dual = [json.loads(s) for s in (run / "methods/dual-shield/seed-1/rounds.jsonl").open()]
    assert all(r["status"] == "aggregated" for r in dual)
    html = write_report(run).read_text()
    summary = json.loads((run / "summary.json").read_text())
    for m in METHODS:
        stat = summary["methods"][m["name"]]["final_test_asr"]
        assert stat["n"] == 1 and math.isfinite(stat["mean"])
    assert "final ASR" in html  # the results table's ASR column
    assert (run / "report" / "asr_trajectories.png").is_file()  # ASR per evaluated round
    paired = summary.get("paired") or {}
    assert "asr" in json.dumps(paired)  # paired ASR statistics vs DUAL-SHIELD
