"""A diverged run is flagged in final.json, the summary and the report (not silently rc 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.final import divergence
from geofl.records import RoundRecord, RoundStatus
from geofl.tasks.base import SplitMetrics


def _rec(r: int, test_loss: float | None, train_loss: float | None = 1.0) -> RoundRecord:
    test = None if test_loss is None else SplitMetrics({"loss": test_loss, "accuracy": 0.1})
    return RoundRecord(
        round=r,
        status=RoundStatus.AGGREGATED,
        participants=[0],
        weights=[1.0],
        train_loss=train_loss,
        test=test,
    )


def test_divergence_rules_by_hand() -> None:
    assert divergence([_rec(1, 2.0), _rec(2, 1.5)]) is None
    assert divergence([_rec(1, 2.0), _rec(2, None), _rec(3, 19.9)]) is None  # < 10 × 2.0
    assert "exceeds 10× the first" in str(divergence([_rec(1, 2.0), _rec(2, 20.5)]))
    assert divergence([_rec(1, 2.0), _rec(2, float("nan"))]) == "round 2: test loss is not finite"
    assert "round 1: training loss" in str(divergence([_rec(1, 2.0, float("inf"))]))


def test_an_exploding_run_is_flagged_in_final_summary_and_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = tiny_raw()  # every fedavg client scales its (finite) update by 1e6
    raw["methods"][1]["attack"] = {"name": "scaling", "clients": [0, 1, 2, 3], "factor": 1e6}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with caplog.at_level("WARNING", logger="geofl"):
        out = run_experiment(load_config(tmp_path / "c.yaml"), tmp_path / "run")
    final = json.loads((out / "methods/fedavg/seed-3/final.json").read_text())
    assert final["diverged"], final["final"]["test"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["fedavg"]["diverged"] == {"3": final["diverged"]}
    assert "diverged" in caplog.text
    from geofl.report import write_report

    assert "diverged</span>" in write_report(out).read_text()
