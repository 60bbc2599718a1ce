"""Presets of issue 35 (004 Table 6, Fig. 4; 001 DP at q ≤ 0.05) keep their stated settings."""

from __future__ import annotations

import math
import re

import pytest

from geofl.config.load import load_config

#: √(2 ln(1.25/δ)) at δ = 1e-5 (004 Eq. 11), by hand: ln 125000 = 11.7361, ×2 = 23.4722.
EQ11 = math.sqrt(2 * math.log(1.25 / 1e-5))


def test_table6_static_sigma_is_eq_11_for_the_labelled_budget() -> None:
    cfg = load_config("paper004-table6")
    static = [m for m in cfg.methods if m.name.startswith("static-")]
    assert [m.name for m in static] == [f"static-{e}" for e in (1000, 300, 100, 8, 4, 2)]
    for m in static:
        eps = float(m.name.split("-")[1])
        (step,) = m.release
        clip, sigma = step.params["clip"], step.params["sigma"]
        assert sigma == pytest.approx(2 * clip * EQ11 / eps, rel=1e-6)  # σ = 2C/ε·√(2 ln(1.25/δ))
        label = re.search(r"σ = ([0-9.]+)", m.label or "")
        assert label and float(label.group(1)) == pytest.approx(sigma, rel=5e-3)
    adp = {m.name: m.release[0].params["epsilon_round"] for m in cfg.methods if "adp" in m.name}
    assert adp == {f"adp-{e:g}": e for e in (1000.0, 300.0, 100.0, 2.0, 1.0, 0.5)}
    assert cfg.compare_to == "no-dp" and len(cfg.seeds) == 3


def test_fig4_spans_budgets_where_the_curve_moves() -> None:
    cfg = load_config("paper004-fig4")
    (analysis,) = cfg.analyses
    budgets = analysis.params["budgets"]
    assert budgets[0] is None and max(b for b in budgets if b) >= 1e6
    assert {8.0, 1.0} <= set(budgets)  # the paper's end of the range is kept
    assert analysis.params["repeats"] >= 3


def test_paper001_dp_utility_has_q_at_most_five_percent() -> None:
    cfg = load_config("paper001-dp-utility")
    train_share = 1 - cfg.data.split.val - cfg.data.split.test
    per_client = cfg.data.params["num_samples"] * train_share / cfg.federation.num_clients
    assert cfg.train.batch_size / per_client <= 0.05  # q = B/|D_k| on the average client
    sigmas = sorted(
        m.trainer.params["noise_multiplier"] for m in cfg.methods if m.name.startswith("fedavg-dp")
    )
    assert sigmas == [0.5, 0.8, 1.0, 1.5, 2.0]
    names = {m.name for m in cfg.methods}
    assert {"flspdp1", "dpftrl1", "fednova-dp1"} <= names
    nova = next(m for m in cfg.methods if m.name == "fednova-dp1")
    assert nova.algorithm.name == "fednova" and nova.trainer.name == "dp_sgd"
    assert cfg.train.optimizer == "sgd"  # FedNova refuses Adam
