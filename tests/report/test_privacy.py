"""Pieces of the privacy sections: ε wording, number formats, weights matrix, bad inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from geofl.errors import RunDirError
from geofl.report import write_report
from geofl.report.fragments import fmt_e, fmt_number, fmt_sci
from geofl.report.privacy import epsilon_sentence
from geofl.report.privacy_plots import (
    plot_aggregation_weights,
    plot_attack_auc,
    risk_levels,
    weight_matrix,
)
from geofl.report.summary import load_run, summarize_run
from geofl.tasks.metrics import rolling_std

from .conftest import METHODS, privacy_entry

MakeRunDir = Any
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_number_formats() -> None:
    assert fmt_sci(5.5e7) == "5.5 × 10⁷"
    assert fmt_sci(5.04e7) == "5.0 × 10⁷"
    assert fmt_sci(1e-5) == "10⁻⁵"
    assert fmt_sci(math.inf) == "∞"
    assert fmt_number(3.214) == "3.21"
    assert fmt_number(1.2e8, 2) == "1.2 × 10⁸"
    assert fmt_e(2.5e-4) == "2.5e-4"
    assert fmt_e(8.75e-4) == "8.8e-4"
    assert fmt_e(0.5) == "0.5"


def test_epsilon_sentence_wording() -> None:
    assert epsilon_sentence("X", []) is None  # no noise: no sentence
    plain = epsilon_sentence("X", [privacy_entry(10.0)])
    assert plain == (
        "X: ε = 10 at δ = 10⁻⁵ (max over clients and seeds; RDP; noise multiplier z = σ/(2C) "
        "between 2.5e-4 and 8.8e-4)."
    )
    weak = epsilon_sentence("X", [privacy_entry(10.5), privacy_entry(2.0)])
    assert weak is not None
    assert weak.startswith("X: ε = 10 at δ = 10⁻⁵")  # max over seeds, 2 significant digits
    assert weak.endswith("no meaningful formal guarantee: the perturbation is a heuristic defence.")
    infinite = epsilon_sentence("X", [privacy_entry(math.inf)])  # strict JSON: nulls
    assert infinite is not None
    assert infinite.startswith("X: ε = ∞ at")
    assert "no meaningful formal guarantee" in infinite
    nothing = epsilon_sentence("X", [privacy_entry(None)])
    assert nothing == "X: ε not available (no client's release was accounted)."
    one_z = {**privacy_entry(4.0), "noise_multiplier_max": 2.5e-4, "accountant": "pld"}
    assert "PLD; noise multiplier z = σ/(2C) = 2.5e-4)." in (epsilon_sentence("X", [one_z]) or "")


def test_weight_matrix_and_risk_levels(make_run_dir: MakeRunDir) -> None:
    fedavg = {"fedavg": METHODS["fedavg"]}
    run_dir = make_run_dir(methods=fedavg, seeds=(0,), rounds=6, privacy={"fedavg": {0: 1e7}})
    run = load_run(run_dir).methods["fedavg"][0]
    rounds, grid = weight_matrix(run, 12)
    assert rounds.tolist() == [1, 2, 3, 4, 5, 6]
    assert grid.shape == (12, 6)
    assert math.isnan(grid[3, 4])  # client 3 rejected in round 5
    assert np.isnan(grid[10:]).all()  # clients 10, 11 never participated
    np.testing.assert_allclose(np.nansum(grid, axis=0), 1.0)
    record = run.rounds[4]
    assert grid[record.participants[-1], 4] == record.weights[-1]
    assert risk_levels(run) == {i: ("high", "mid", "low")[i % 3] for i in range(10)}


def test_privacy_plots_without_data(tmp_path: Path) -> None:
    plot_attack_auc({}, tmp_path / "a.png")
    plot_attack_auc({"m": {"high_risk": 0.7, "low_entropy": math.nan}}, tmp_path / "b.png")
    plot_aggregation_weights({}, tmp_path / "c.png")
    for name in "abc":
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC


def test_corrupt_attack_file_says_what_to_do(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(methods={"fedavg": METHODS["fedavg"]}, seeds=(0,), rounds=2)
    (run_dir / "analysis").mkdir()
    (run_dir / "analysis" / "attribute_inference.json").write_text(json.dumps([1, 2]))
    with pytest.raises(RunDirError, match="re-run the attribute_inference analysis"):
        write_report(run_dir)


def test_invalid_config_yaml_says_what_to_do(run_dir: Path) -> None:
    (run_dir / "config.yaml").write_text("methods: [unclosed\n")
    with pytest.raises(RunDirError, match=r"config\.yaml: invalid YAML .*re-run"):
        load_run(run_dir)


def test_rolling_std_skips_rounds_without_evaluation(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(methods={"fedavg": METHODS["fedavg"]}, seeds=(0,), rounds=24)
    path = run_dir / "methods" / "fedavg" / "seed-0" / "rounds.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        if r["round"] % 2 and r["round"] != 24:  # eval.every = 2
            del r["val"], r["test"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    stat = summarize_run(run_dir)["methods"]["fedavg"]["final_rolling_std"]
    evaluated = [r["test"]["accuracy"] for r in records if "test" in r]
    assert len(evaluated) == 12
    assert stat["values"] == pytest.approx([float(rolling_std(evaluated, 10)[-1])])


def test_dp_sgd_epsilon_sentence_names_sigma_not_the_update_noise_ratio() -> None:
    from geofl.report.privacy import epsilon_sentence

    p = {
        "epsilon_max": 3.41,
        "epsilon_per_client": {"0": 3.41},
        "delta": 1e-5,
        "accountant": "rdp",
        "noise_multiplier_min": 1.0,
        "noise_multiplier_max": 1.0,
        "record_level": True,
    }
    text = epsilon_sentence("FL-SPDP", [p])
    assert text is not None
    assert "ε = 3.41" in text and "DP-SGD noise multiplier σ = 1" in text
    assert "σ/(2C)" not in text and "heuristic" not in text
