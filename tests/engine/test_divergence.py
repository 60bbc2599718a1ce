"""A diverged run is flagged in final.json, the summary and the report (not silently rc 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.records.final import divergence
from geofl.records import Rejection, RejectionReason, RoundRecord, RoundStatus
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


def _refused(r: int, *reasons: RejectionReason) -> RoundRecord:
    rejected = [
        Rejection(k, why, "delta has 4 non-finite values (NaN/Inf)")
        for k, why in enumerate(reasons)
    ]
    return RoundRecord(r, RoundStatus.NO_UPDATES, [], [], rejected=rejected)


def test_a_run_whose_every_update_is_refused_to_the_end_is_flagged() -> None:
    bad, lost = RejectionReason.MALFORMED, RejectionReason.LOST_IN_TRANSIT
    why = divergence([_refused(1, bad, bad), _refused(2, bad, bad)])
    assert why == (
        "from round 1 on no update was aggregated: every update that arrived in round 1 "
        "was malformed (2; client 0: delta has 4 non-finite values (NaN/Inf))"
    )
    # it stalls after a first aggregated round too (the model that round made blows up)
    assert "from round 2 on" in str(divergence([_rec(1, 2.0), _refused(2, lost, bad)]))
    empty = RoundRecord(3, RoundStatus.EMPTY_COHORT, [], [])
    assert "from round 2 on" in str(divergence([_rec(1, 2.0), _refused(2, bad), empty]))
    # a later aggregated round clears it; rounds that only lost uploads do not stall
    assert divergence([_refused(1, bad), _rec(2, 2.0)]) is None
    assert divergence([_rec(1, 2.0), _refused(2, lost)]) is None


def test_a_run_with_every_update_rejected_is_flagged_not_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = tiny_raw()  # η_l = 1e6, batches of 8: every client's training ends in NaN/Inf
    raw["train"].update(lr=1e6, batch_size=8)
    raw["methods"] = raw["methods"][1:]
    raw["federation"]["rounds"] = 2
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    with caplog.at_level("WARNING", logger="geofl"):
        out = run_experiment(load_config(tmp_path / "c.yaml"), tmp_path / "run")
    final = json.loads((out / "methods/fedavg/seed-3/final.json").read_text())
    assert str(final["diverged"]).startswith("from round 1 on no update was aggregated")
    assert "non-finite" in final["diverged"]
    assert f"fedavg seed=3 diverged: {final['diverged']}" in caplog.text
