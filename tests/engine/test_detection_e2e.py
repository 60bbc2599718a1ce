"""End to end through ``geofl run``: the detection preset, shrunk, runs and reproduces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geofl.cli import app

SMALL = [
    "--set",
    "data.params.num_samples=40",
    "--set",
    "data.params.size=64",
    "--set",
    "federation.num_clients=2",
    "--set",
    "federation.rounds=2",
    "--set",
    "train.local_steps=2",
    "--set",
    "train.batch_size=4",
    "--set",
    "eval.every=1",
    "--set",
    "methods.0.partition.min_samples=4",
]


def _run(out: Path) -> dict[str, object]:
    args = ["run", "detection-example", "--out", str(out), "--no-progress", *SMALL]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    final: dict[str, object] = json.loads(
        (out / "methods/fedavg-dir/seed-1/final.json").read_text()
    )
    return final


@pytest.mark.slow
def test_detection_example_runs_and_reproduces(tmp_path: Path) -> None:
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b")
    test = a["final"]["test"]  # type: ignore[index]
    assert {"map_50", "map", "map_75", "loss", "per_class_ap_50"} <= set(test)
    assert len(test["per_class_ap_50"]) == 10 and test["loss"] > 0
    assert a["final"] == b["final"]  # same config and seed → identical metrics
    part = json.loads((tmp_path / "a/methods/fedavg-dir/seed-1/partition.json").read_text())
    assert len(part["classes"]) == 10 and len(part["histograms"]) == 2
