"""The paper-004 presets (Tables 3, 4, 5, 7, 10 on classification) load and keep the paper's
setup: matched seeds, the threat model, the rows each table needs; BackdoorIndicator's
load-time check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from geofl.config.load import load_config, load_raw
from geofl.errors import ConfigError


def _methods(name: str) -> dict[str, dict[str, object]]:
    cfg = load_config(name)
    return {m.name: m.model_dump() for m in cfg.methods}


@pytest.mark.parametrize(
    "name",
    [
        "paper004-table3",
        "paper004-ablation",
        "paper004-table5",
        "paper004-table5-scale",
        "paper004-table7",
        "paper004-table10",
    ],
)
def test_paper004_presets_share_the_threat_model_and_the_matched_seeds(name: str) -> None:
    cfg = load_config(name)
    assert cfg.seeds[:3] == [2024, 2025, 2026]
    assert cfg.federation.num_clients == 10 and cfg.federation.participation == 1.0
    assert set(cfg.paper) <= {m.name for m in cfg.methods} and cfg.paper
    for m in cfg.methods:
        if m.attack is None:
            continue
        assert m.attack.params["target"] == 0 and m.attack.params["poison_ratio"] == 0.2
        assert m.partition.name == "dirichlet"


def test_table3_has_the_paper_rows_and_compares_to_dual_shield() -> None:
    cfg = load_config("paper004-table3")
    assert cfg.seeds == [2024, 2025, 2026, 2027, 2028] and cfg.compare_to == "dual-shield"
    algos = {m.name: (m.algorithm.name, m.aggregator.name) for m in cfg.methods}
    assert algos == {
        "fedavg-clean": ("fedavg", "mean"),
        "fedavg": ("fedavg", "mean"),
        "krum": ("fedavg", "krum"),
        "median": ("fedavg", "median"),
        "flame": ("flame", "mean"),
        "backdoor-indicator": ("backdoor_indicator", "mean"),
        "dual-shield": ("dual_shield", "mean"),
    }
    # the clean row keeps the probe (fraction 0): the trigger's effect on the clean model
    assert [m.attack.params["fraction"] for m in cfg.methods if m.attack] == [0.0] + [0.2] * 6


def test_ablation_switches_and_table5_axes_and_table7_families() -> None:
    abl = {m.name: m for m in load_config("paper004-ablation").methods}
    assert abl["cgf-only"].algorithm.params == {"hra_weighting": False}
    assert abl["hra-only"].algorithm.params == {"cgf_filter": False}
    assert [r.name for r in abl["adp-only"].release] == ["adaptive_dp"]
    assert abl["cgf-hra-adp-1"].release[0].params["epsilon_round"] == 1.0
    t5 = load_config("paper004-table5").methods
    alphas = {m.partition.params["alpha"] for m in t5}
    fracs = {m.attack.params["fraction"] for m in t5 if m.attack is not None}
    assert alphas == {1.0, 0.5, 0.1, 0.05} and fracs == {0.1, 0.2, 0.3, 0.4}
    t7 = load_config("paper004-table7").methods
    families = {(m.attack.name, m.attack.params.get("boost", 1.0)) for m in t7 if m.attack}
    assert families == {
        ("backdoor", 4.0),
        ("backdoor", 8.0),
        ("edge_case", 1.0),
        ("adaptive_cgf", 4.0),
    }
    lams = [m.algorithm.params.get("lam") for m in load_config("paper004-table10").methods]
    assert lams == [None, 0.5, 1.0, 1.5, 2.0]


def test_uc_merced_and_the_scale_panels_are_one_set_away() -> None:
    sets = ["federation.num_clients=50", "data.params.num_samples=10000", "train.local_epochs=5"]
    cfg = load_config("paper004-table5-scale", sets)
    assert cfg.federation.num_clients == 50 and cfg.train.local_epochs == 5
    uc = load_config(
        "paper004-table3",
        ["data.dataset=ucmerced", "data.params={root: ../shared/data/ucmerced_landuse, size: 32}"],
    )
    assert uc.data.dataset == "ucmerced"


def test_backdoor_indicator_refuses_a_task_without_single_labels(tmp_path: Path) -> None:
    raw = load_raw("paper004-table3")
    raw["methods"] = [{"name": "bi", "algorithm": {"name": "backdoor_indicator"}}]
    raw["compare_to"], raw["paper"] = None, {}
    raw["task"] = {"name": "multilabel"}
    path = tmp_path / "bi.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"methods\.0\.algorithm.*single classes"):
        load_config(path)


def test_detection_table3_has_the_paper_rows_under_oda() -> None:
    cfg = load_config("paper004-detection-table3")
    assert cfg.task.name == "detection" and cfg.data.dataset == "synthetic_aerial"
    assert cfg.compare_to == "dual-shield" and cfg.federation.num_clients == 10
    algos = {m.name: (m.algorithm.name, m.aggregator.name) for m in cfg.methods}
    assert algos == {
        "fedavg-clean": ("fedavg", "mean"),
        "fedavg": ("fedavg", "mean"),
        "krum": ("fedavg", "krum"),
        "median": ("fedavg", "median"),
        "flame": ("flame", "mean"),
        "dual-shield": ("dual_shield", "mean"),
    }
    for m in cfg.methods:  # the clean reference keeps the probe (fraction 0) for its ASR
        assert m.attack is not None and m.attack.name == "oda"
        p = m.attack.params
        assert p["fraction"] == (0.0 if m.name == "fedavg-clean" else 0.2)
        assert p["target"] == 0 and p["trigger"] == {"size": 5, "amplitude": 2.0, "opacity": 1.0}
    oda = next(m for m in cfg.methods if m.name == "fedavg").attack
    assert oda is not None and oda.params["poison_ratio"] == 0.2
    assert (oda.params["score_threshold"], oda.params["iou_threshold"]) == (0.25, 0.5)
    assert cfg.paper["fedavg"].final_test_accuracy == "0.55" and set(cfg.paper) == set(algos)
