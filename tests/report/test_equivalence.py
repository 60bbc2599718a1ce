"""TOST equivalence and the verdicts of the paired statistics, against hand numbers.

Hand numbers use df = 2, where Student's t has a closed form: F(t) = ½ + t / (2√(t² + 2)),
and df = 1 (Cauchy): F(t) = ½ + atan(t)/π. scipy is the cross-check, not the source.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats
from tests.report.conftest import write_fake_run

from geofl.report import write_summary
from geofl.report.html import write_report
from geofl.report.paired import (
    EQUIVALENCE_MARGIN,
    equivalence_test,
    holm,
    paired_html,
    paired_statistics,
    verdict,
)


def _f2(t: float) -> float:
    """CDF of Student's t with 2 degrees of freedom."""
    return 0.5 + t / (2 * math.sqrt(t * t + 2))


def test_tost_against_hand_computation() -> None:
    # d = [0.01, 0.00, 0.02]: Δ = 0.01, sd = 0.01, se = 0.01/√3; margin 0.05.
    res = equivalence_test([0.61, 0.60, 0.62], [0.60, 0.60, 0.60], margin=0.05)
    se = 0.01 / math.sqrt(3)
    t_low, t_high = (0.01 + 0.05) / se, (0.01 - 0.05) / se  # 10.392, −6.928
    p_low, p_high = 1 - _f2(t_low), _f2(t_high)
    assert res["tost_p"] == pytest.approx(max(p_low, p_high))
    assert res["tost_p"] == pytest.approx(0.010102, abs=1e-6)  # p_high dominates
    # 90 % CI: t_{0.95,2} solves t/√(t² + 2) = 0.9: t² = 2·0.81/0.19
    q = math.sqrt(2 * 0.81 / 0.19)  # 2.919986
    assert res["ci90_low"] == pytest.approx(0.01 - q * se)
    assert res["ci90_high"] == pytest.approx(0.01 + q * se)
    assert res["margin"] == 0.05


def test_tost_agrees_with_two_one_sided_scipy_tests() -> None:
    a = [0.55, 0.61, 0.58, 0.63, 0.57]
    b = [0.56, 0.59, 0.60, 0.61, 0.58]
    d = [x - y for x, y in zip(a, b, strict=True)]
    lo = stats.ttest_1samp([v + 0.04 for v in d], 0.0, alternative="greater").pvalue
    hi = stats.ttest_1samp([v - 0.04 for v in d], 0.0, alternative="less").pvalue
    assert equivalence_test(a, b, margin=0.04)["tost_p"] == pytest.approx(max(lo, hi))


def test_tost_decision_is_the_90_percent_ci_inside_the_margin() -> None:
    wide = equivalence_test([0.2, 0.9, 0.4], [0.5, 0.5, 0.5])  # spread ≫ margin
    assert wide["tost_p"] > 0.05
    assert wide["ci90_low"] < -EQUIVALENCE_MARGIN or wide["ci90_high"] > EQUIVALENCE_MARGIN
    tight = equivalence_test([0.501, 0.499, 0.5005], [0.5, 0.5, 0.5])
    assert tight["tost_p"] < 0.05
    assert -0.05 < tight["ci90_low"] < tight["ci90_high"] < 0.05


def test_tost_degenerate_cases() -> None:
    assert math.isnan(equivalence_test([0.5], [0.4])["tost_p"])
    assert equivalence_test([0.5, 0.6], [0.49, 0.59])["tost_p"] == 0.0  # sd 0, |Δ| < m
    assert equivalence_test([0.5, 0.6], [0.4, 0.5])["tost_p"] == 1.0  # sd 0, |Δ| ≥ m
    with pytest.raises(ValueError, match="margin > 0"):
        equivalence_test([0.5, 0.6], [0.5, 0.6], margin=0.0)


def test_verdicts_claim_equality_only_by_tost() -> None:
    assert verdict(0.01, 0.9) == "differs"
    assert verdict(0.9, 0.01) == "equivalent"
    assert verdict(0.9, 0.3) == "inconclusive"  # large p, wide CI: not "equal"
    assert verdict(math.nan, math.nan) == "inconclusive"


def test_paired_statistics_hold_tost_with_holm_per_metric() -> None:
    # The 004 K = 25 case: 4 comparisons with raw p 0.83, 0.029, 0.72, 0.71 → Holm 0.116.
    assert holm([0.83, 0.029, 0.72, 0.71])[1] == pytest.approx(0.116)
    values = {
        "asr": {
            "base": {1: 0.30, 2: 0.50, 3: 0.40},
            "same": {1: 0.301, 2: 0.499, 3: 0.4005},  # d tiny: equivalent
            "noisy": {1: 0.10, 2: 0.90, 3: 0.35},  # d = −.2, .4, −.05: inconclusive
        }
    }
    asr = paired_statistics(values, "base")["metrics"]["asr"]
    raw = [asr[m]["tost_p"] for m in ("same", "noisy")]
    assert [asr[m]["tost_holm_p"] for m in ("same", "noisy")] == pytest.approx(holm(raw))
    assert asr["same"]["verdict"] == "equivalent"
    assert asr["noisy"]["verdict"] == "inconclusive"
    assert asr["noisy"]["holm_p"] > 0.05  # not significant, and still not "equal"
    html = paired_html(paired_statistics(values, "base"), {})
    assert "TOST ±0.05" in html and "<b>equivalent</b>" in html and "<b>inconclusive</b>" in html


def test_summary_json_carries_the_tost_and_verdict(tmp_path: Path) -> None:
    run = write_fake_run(tmp_path)
    cfg = run / "config.yaml"
    cfg.write_text(cfg.read_text() + "compare_to: fedavg\n")
    paired = write_summary(run)["paired"]
    assert paired["margin"] == EQUIVALENCE_MARGIN and paired["alpha"] == 0.05
    # finals (conftest): fedavg 0.90/0.94, consistency 0.92/0.93 → d = .02, −.01, Δ .005,
    # sd .0212132, se .015, df 1 (Cauchy: F(t) = ½ + atan(t)/π).
    row = paired["metrics"]["accuracy"]["consistency"]
    t_low, t_high = (0.005 + 0.05) / 0.015, (0.005 - 0.05) / 0.015
    p = max(0.5 - math.atan(t_low) / math.pi, 0.5 + math.atan(t_high) / math.pi)
    assert row["tost_p"] == pytest.approx(p)  # 0.1024: 2 seeds cannot show ±0.05
    assert row["verdict"] == "inconclusive"
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["paired"]["metrics"]["accuracy"]["consistency"]["verdict"] == "inconclusive"
    assert "TOST ±0.05" in write_report(run).read_text()


def test_no_tost_on_metrics_without_a_stated_margin() -> None:
    values = {"rmse": {"base": {1: 3.0, 2: 3.1, 3: 2.9}, "x": {1: 3.0, 2: 3.1, 3: 2.9001}}}
    row = paired_statistics(values, "base")["metrics"]["rmse"]["x"]
    assert math.isnan(row["tost_p"]) and math.isnan(row["margin"])
    assert row["verdict"] == "inconclusive"  # ±0.05 means nothing in RMSE units
    html = paired_html(paired_statistics(values, "base"), {})
    assert "no equivalence margin for this metric" in html
