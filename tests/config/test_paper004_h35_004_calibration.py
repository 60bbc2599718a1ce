"""The paper-004 classification presets run the calibrated attack (issue 35 item 1).

The stated threat (004 §2.3/§3.1: 20 % of K = 10 clients, 20 % of their pool) left the
undefended federation at ASR ≈ 0.3 with a 3×3 ±2σ trigger. The free parameters the paper does
not fix — trigger size and amplitude, and the colluding attackers' scaling factor γ (§2.3
"collude on the trigger, the target class, and the scaling factor") — are calibrated on
undefended FedAvg only; the clean row probes the same trigger on the clean model (the
occlusion control).
"""

from __future__ import annotations

import pytest

from geofl.config.load import load_config

CALIBRATED = {"size": 4, "position": "bottom_right", "amplitude": 4.0, "opacity": 1.0}

PRESETS = [
    "paper004-table3",
    "paper004-ablation",
    "paper004-table5",
    "paper004-table5-scale",
    "paper004-table7",
    "paper004-table10",
]


@pytest.mark.parametrize("name", PRESETS)
def test_backdoor_rows_use_the_calibrated_trigger_and_boost(name: str) -> None:
    rows = [m for m in load_config(name).methods if m.attack and m.attack.name == "backdoor"]
    assert rows
    for m in rows:
        assert m.attack is not None
        p = m.attack.params
        assert p["trigger"] == CALIBRATED, m.name
        if p["fraction"] > 0:  # the paper's stated part of the threat is unchanged
            assert (p["poison_ratio"], p["target"]) == (0.2, 0)
            assert p["schedule"] == {"start": 1, "period": 1}
            assert p["boost"] in (4.0, 8.0), m.name  # 8: Table 7's scaling family


def test_table3_clean_row_probes_the_same_trigger_without_attackers() -> None:
    methods = {m.name: m for m in load_config("paper004-table3").methods}
    clean, attacked = methods["fedavg-clean"].attack, methods["fedavg"].attack
    assert clean is not None and attacked is not None
    assert clean.name == attacked.name == "backdoor"
    assert clean.params["fraction"] == 0.0
    assert clean.params["trigger"] == attacked.params["trigger"]
    assert clean.params["target"] == attacked.params["target"]


def test_table7_scaling_family_keeps_x8_on_the_calibrated_trigger() -> None:
    t7 = {m.name: m.attack for m in load_config("paper004-table7").methods if m.attack}
    boosts = {n: a.params.get("boost", 1.0) for n, a in t7.items()}
    assert boosts["fedavg-scaling"] == 8.0 and boosts["fedavg-trigger"] == 4.0
    assert boosts["fedavg-adaptive"] == 4.0
