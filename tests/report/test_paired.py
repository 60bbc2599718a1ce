"""Paired statistics of 004 Table 3 (Δ, d_z, 95 % CI, raw and Holm p) against hand numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.report.conftest import write_fake_run

from geofl.report import write_summary
from geofl.report.html import write_report
from geofl.report.paired import final_values, holm, paired_html, paired_statistics, paired_test


def test_holm_on_a_hand_example() -> None:
    # sorted: 0.005 (×4 = 0.02), 0.01 (×3 = 0.03), 0.03 (×2 = 0.06), 0.04 (×1 = 0.04 → 0.06)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])  # capped by monotonicity, then 1
    assert holm([0.7, 0.9]) == [1.0, 1.0]
    out = holm([0.02, math.nan, 0.04])  # NaN kept, not counted: m = 2
    assert out[0] == pytest.approx(0.04) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert holm([]) == []


def test_paired_test_against_hand_computation() -> None:
    # d = [0.05, 0.04, 0.06]: Δ = 0.05, sd = 0.01, d_z = 5, t = 0.05 / (0.01/√3) = 5√3
    res = paired_test([0.60, 0.62, 0.65], [0.55, 0.58, 0.59])
    assert res["n"] == 3
    assert res["mean_diff"] == pytest.approx(0.05)
    assert res["sd_diff"] == pytest.approx(0.01)
    assert res["d_z"] == pytest.approx(5.0)
    t = 5 * math.sqrt(3)
    assert res["t"] == pytest.approx(t)
    # df = 2: F(t) = ½ + t / (2√(t² + 2)), so two-sided p = 1 − t/√(t² + 2) and
    # t_{0.975,2} solves t/√(t² + 2) = 0.95: t² = 2·0.9025/0.0975.
    assert res["p"] == pytest.approx(1 - t / math.sqrt(t * t + 2))
    q = math.sqrt(2 * 0.9025 / 0.0975)  # 4.302653
    half = q * 0.01 / math.sqrt(3)
    assert res["ci_low"] == pytest.approx(0.05 - half) and res["ci_high"] == pytest.approx(
        0.05 + half
    )
    assert res["ci_low"] == pytest.approx(0.025159, abs=1e-6)


def test_paired_test_degenerate_cases() -> None:
    one = paired_test([0.5], [0.4])
    assert (
        one["mean_diff"] == pytest.approx(0.1) and math.isnan(one["p"]) and math.isnan(one["d_z"])
    )
    same = paired_test([0.5, 0.6], [0.4, 0.5])  # every d = 0.1: sd 0, p 0, d_z undefined
    assert same["p"] == 0.0 and same["sd_diff"] == 0.0 and math.isnan(same["d_z"])
    zero = paired_test([0.5, 0.6], [0.5, 0.6])
    assert math.isnan(zero["p"])
    assert math.isnan(paired_test([], [])["mean_diff"])


def test_paired_statistics_match_seeds_and_correct_per_metric() -> None:
    values = {
        "accuracy": {
            "base": {1: 0.5, 2: 0.6, 3: 0.7},
            "a": {1: 0.6, 2: 0.8, 3: 0.9},  # d = .1, .2, .2
            "b": {1: 0.4, 3: 0.5, 4: 0.9},  # shared seeds 1, 3: d = −.1, −.2
        },
        "asr": {"base": {1: 0.9, 2: 0.8}, "a": {1: 0.1, 2: math.nan}},
    }
    out = paired_statistics(values, "base")
    acc = out["metrics"]["accuracy"]
    assert out["baseline"] == "base" and list(acc) == ["a", "b"]
    assert acc["a"]["seeds"] == [1, 2, 3] and acc["b"]["seeds"] == [1, 3]
    assert acc["b"]["mean_diff"] == pytest.approx(-0.15)
    assert [acc[m]["holm_p"] for m in "ab"] == pytest.approx(holm([acc["a"]["p"], acc["b"]["p"]]))
    asr = out["metrics"]["asr"]["a"]
    assert asr["n"] == 1 and asr["seeds"] == [1] and math.isnan(asr["p"])  # NaN seed dropped


def test_final_values_reads_final_json() -> None:
    finals = {"m": {1: {"final": {"test": {"accuracy": 0.5, "asr": None}}}, 2: {}}}
    vals = final_values(finals, ("accuracy", "asr"))
    assert list(vals) == ["accuracy"]  # no finite ASR anywhere: left out
    assert vals["accuracy"]["m"][1] == 0.5 and math.isnan(vals["accuracy"]["m"][2])


def _run_with_baseline(tmp_path: Path) -> Path:
    run = write_fake_run(tmp_path)
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text() + "compare_to: fedavg\n")
    for method, asr in (("fedavg", (0.9, 0.8)), ("consistency", (0.2, 0.1))):
        for seed, value in enumerate(asr):
            path = run / "methods" / method / f"seed-{seed}" / "final.json"
            final = json.loads(path.read_text())
            final["final"]["test"]["asr"] = value
            path.write_text(json.dumps(final))
    return run


def test_summary_and_report_carry_the_paired_statistics(tmp_path: Path) -> None:
    run = _run_with_baseline(tmp_path)
    paired = write_summary(run)["paired"]
    acc = paired["metrics"]["accuracy"]
    # finals (conftest): fedavg 0.90/0.94, consistency 0.92/0.93, centralized 0.97/0.96.
    # n = 2, df = 1 (Cauchy): two-sided p = 1 − (2/π)·atan|t|.
    # consistency: d = .02, −.01 → Δ .005, sd .0212132, t = 1/3; centralized: Δ .045, t = 1.8
    p_cons = 1 - 2 / math.pi * math.atan(1 / 3)
    p_cent = 1 - 2 / math.pi * math.atan(1.8)
    assert acc["consistency"]["p"] == pytest.approx(p_cons)
    assert acc["centralized"]["p"] == pytest.approx(p_cent)
    assert acc["centralized"]["holm_p"] == pytest.approx(2 * p_cent)  # 0.6457
    assert acc["consistency"]["holm_p"] == pytest.approx(p_cons)  # max(0.6457, 0.7952)
    assert acc["consistency"]["d_z"] == pytest.approx(0.005 / (0.03 / math.sqrt(2)))
    asr = paired["metrics"]["asr"]
    assert list(asr) == ["centralized", "consistency"]  # run.json order
    assert asr["consistency"]["mean_diff"] == pytest.approx(-0.7)
    assert asr["centralized"]["n"] == 0
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["paired"]["metrics"]["asr"]["centralized"]["p"] is None  # NaN → null
    html = write_report(run).read_text()
    assert "paired statistics vs fedavg" in html and "Holm p" in html
    assert "final ASR (%)" in html


def test_no_baseline_no_paired_statistics(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path)
    assert "paired" not in write_summary(run)
    assert paired_html({}, {}) == ""


def test_one_seed_says_paired_tests_need_two(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path, seeds=(0,), labels={"fedavg": "FedAvg"})
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text() + "compare_to: fedavg\n")
    html = write_report(run).read_text()
    assert "Paired t-tests against FedAvg need at least two matched seeds" in html
    assert "too few matched seeds" not in html and '<table class="paired">' not in html
