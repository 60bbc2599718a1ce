"""Slow end-to-end runs of the multi-label, regression and tabular-binary example presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geofl.cli import app


def _run(name: str, out: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Run preset ``name`` (shipped settings, with report) and return summary ``methods``."""
    result = CliRunner().invoke(app, ["run", name, "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    summary: dict[str, dict[str, dict[str, dict[str, float]]]] = json.loads(
        (out / "summary.json").read_text()
    )
    return summary["methods"]


def _report_has(out: Path, *pngs: str) -> None:
    html = (out / "report" / "index.html").read_text()
    for png in pngs:
        assert png in html, png
        assert (out / "report" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


@pytest.mark.slow
def test_multilabel_example_learns_beyond_label_frequencies(tmp_path: Path) -> None:
    methods = _run("multilabel-example", tmp_path / "ml")
    assert set(methods) == {"fedavg-iid", "fedavg-dir-rarest"}
    for name, m in methods.items():
        assert {"final_test_map", "final_test_micro_f1", "final_test_macro_f1"} <= set(m), name
        # chance mAP is the mean label frequency, about 0.15 on this data
        assert m["final_test_map"]["mean"] > 0.3, name
    _report_has(tmp_path / "ml", "metric_trajectories.png", "per_class_ap.png")
    part = json.loads((tmp_path / "ml/methods/fedavg-dir-rarest/seed-1/partition.json").read_text())
    assert len(part["classes"]) == 13 and len(part["histograms"]) == 5


@pytest.mark.slow
def test_regression_example_beats_the_mean_predictor(tmp_path: Path) -> None:
    methods = _run("regression-example", tmp_path / "reg")
    assert set(methods) == {"fedavg-iid", "fedavg-farms"}
    for name, m in methods.items():
        # yield std is 1.9 t/ha (RMSE of predicting the mean); noise + farm effects ≈ 0.57
        assert 0.5 < m["final_test_rmse"]["mean"] < 1.0, name
        assert m["final_test_r2"]["mean"] > 0.7, name
    _report_has(tmp_path / "reg", "metric_trajectories.png")


@pytest.mark.slow
def test_tabular_binary_example_ranks_stressed_fields_first(tmp_path: Path) -> None:
    methods = _run("tabular-binary-example", tmp_path / "bin")
    assert set(methods) == {"fedavg-iid", "fedavg-farms"}
    for name, m in methods.items():
        assert {"final_test_roc_auc", "final_test_f1", "final_test_accuracy"} <= set(m), name
        assert m["final_test_roc_auc"]["mean"] > 0.9, name  # least squares reaches 0.97
    _report_has(tmp_path / "bin", "metric_trajectories.png")
