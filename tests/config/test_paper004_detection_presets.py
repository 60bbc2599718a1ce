"""The paper-004 detection presets (Tables 3-strong, 4, 7, 8, 10 on detection, and the NEON
real-data comparison) load, keep the paper's values, and run: each shrunk to a few scenes
and one round."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from geofl.config.load import load_config, load_raw
from geofl.engine.experiment import run_experiment

PRESETS = [
    "paper004-detection-table3-strong",
    "paper004-detection-ablation",
    "paper004-detection-table7",
    "paper004-detection-table10",
]


@pytest.mark.parametrize("name", PRESETS)
def test_detection_presets_share_the_strong_setting(name: str) -> None:
    cfg = load_config(name)
    assert cfg.task.name == "detection" and cfg.data.dataset == "synthetic_aerial"
    assert cfg.seeds == [2024] and cfg.federation.num_clients == 10
    assert cfg.federation.participation == 1.0 and cfg.federation.rounds == 32
    assert set(cfg.paper) <= {m.name for m in cfg.methods} and cfg.paper
    for m in cfg.methods:
        assert m.partition.name == "iid" and m.attack is not None
        assert m.attack.name in ("oda", "adaptive_oda")
        p = m.attack.params
        assert p["trigger"] == {"size": 8, "amplitude": 2.0, "opacity": 1.0}
        if p["fraction"] > 0:  # the paper's threat: 20 % of clients, 20 % of their pool
            assert (p["fraction"], p["poison_ratio"]) == (0.2, 0.2)
            assert (p["score_threshold"], p["iou_threshold"]) == (0.25, 0.5)


def test_ablation_rows_switch_the_modules() -> None:
    cfg = load_config("paper004-detection-ablation")
    assert cfg.compare_to == "cgf-hra"
    rows = {
        m.name: (m.algorithm.name, m.algorithm.params, [r.name for r in m.release])
        for m in cfg.methods
    }
    assert rows["fedavg"][0] == "fedavg" and rows["cgf-hra"] == ("dual_shield", {}, [])
    assert rows["cgf-only"][1] == {"hra_weighting": False}
    assert rows["hra-only"][1] == {"cgf_filter": False}
    assert rows["adp-only"][2] == ["adaptive_dp"] and rows["cgf-hra-adp-1"][2] == ["adaptive_dp"]
    eps = {m.name: m.release[0].params["epsilon_round"] for m in cfg.methods if m.release}
    assert eps == {"adp-only": 1000.0, "cgf-hra-adp": 1000.0, "cgf-hra-adp-1": 1.0}
    assert cfg.paper["cgf-only"].final_test_accuracy == "0.53"


def test_table7_families_and_table10_lambdas() -> None:
    methods = load_config("paper004-detection-table7").methods
    t7 = {m.name: m.attack.params for m in methods if m.attack}
    attacks = {m.name: m.attack.name for m in methods if m.attack}
    assert len(t7) == 16  # {FedAvg, FLAME, DUAL-SHIELD, DUAL-SHIELD + ADP} x 4 families
    adaptive = {n: p for n, p in t7.items() if "adaptive" in n}
    assert len(adaptive) == 4
    for p in adaptive.values():
        assert (p["max_distance"], p["reputation_floor"]) == (0.2, 0.3)
    assert {n for n, a in attacks.items() if a == "adaptive_oda"} == set(adaptive)
    scaled = ["fedavg-scaling", "flame-scaling", "shield-scaling", "shield-adp-scaling"]
    assert {n: p.get("boost", 1.0) for n, p in t7.items() if "scaling" in n} == dict.fromkeys(
        scaled, 8.0
    )
    assert {a for n, a in attacks.items() if "adaptive" not in n} == {"oda"}
    assert {p["target"] for n, p in t7.items() if "rare" in n} == {6}  # ground track field
    assert {p["target"] for n, p in t7.items() if "rare" not in n} == {0}
    t10 = load_config("paper004-detection-table10")
    lams = {m.name: m.algorithm.params.get("lam") for m in t10.methods}
    assert lams == {
        "fedavg": None,
        "lambda-0.5": 0.5,
        "lambda-1.0": 1.0,
        "lambda-1.5": 1.5,
        "lambda-2.0": 2.0,
    }
    assert t10.compare_to == "lambda-1.0"


def _run_one_shrunk_round(raw: dict[str, Any], tmp_path: Path) -> None:
    """Run ``raw`` for one round (evaluated); every method's final metrics are in range and
    its threat is the one configured."""
    raw["federation"]["rounds"] = 1
    raw["eval"] = {"every": 1, "batch_size": 16}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    run = run_experiment(load_config(path), tmp_path / "run")
    for m in raw["methods"]:
        final = json.loads((run / "methods" / m["name"] / "seed-2024" / "final.json").read_text())
        test = final["final"]["test"]
        assert 0.0 <= test["map_50"] <= 1.0 and 0.0 <= test["asr"] <= 1.0
        threat = final["threat"]
        assert (threat["attack"], threat["target"]) == (m["attack"]["name"], m["attack"]["target"])
    assert (run / "summary.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_detection_preset_runs_one_shrunk_round(name: str, tmp_path: Path) -> None:
    raw = load_raw(name)
    raw["data"]["params"] = {**raw["data"]["params"], "num_samples": 60}
    raw["model"]["params"] = {**raw["model"]["params"], "head_convs": 1}
    _run_one_shrunk_round(raw, tmp_path)


NEON = Path("/work/shared/data/neon_tree_crowns")


def test_table8_and_neon_presets_compare_three_scenarios() -> None:
    """Table 8's panel C (Faster R-CNN) and the NEON crowns panel: FedAvg clean, FedAvg +
    ODA and DUAL-SHIELD + ODA in table3-strong's threat."""
    for name, model, dataset in (
        ("paper004-detection-table8-two-stage", "faster_rcnn", "synthetic_aerial"),
        ("paper004-detection-neon", "fcos", "neon_tree_crowns"),
    ):
        raw = load_raw(name)
        assert (raw["model"]["name"], raw["data"]["dataset"]) == (model, dataset)
        names = [m["name"] for m in raw["methods"]]
        assert names == ["fedavg-clean", "fedavg", "dual-shield"]
        assert raw["methods"][0]["attack"]["fraction"] == 0.0
        for m in raw["methods"][1:]:
            a = m["attack"]
            threat = (a["name"], a["fraction"], a["poison_ratio"], a["target"])
            assert threat == ("oda", 0.2, 0.2, 0)
        assert raw["methods"][2]["algorithm"] == {"name": "dual_shield"}
        assert raw["federation"]["rounds"] == 32 and raw["compare_to"] == "dual-shield"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["paper004-detection-table8-two-stage", "paper004-detection-neon"])
def test_table8_and_neon_presets_run_one_shrunk_round(name: str, tmp_path: Path) -> None:
    raw = load_raw(name)
    if raw["data"]["dataset"] == "neon_tree_crowns":
        if not NEON.is_dir():
            pytest.skip(f"{NEON} is absent (the project's real-data folder)")
        raw["data"]["params"] = {**raw["data"]["params"], "root": str(NEON), "tile": 400}
    else:
        raw["data"]["params"] = {**raw["data"]["params"], "num_samples": 40}
        small = {"head_dim": 64, "proposals": 50, "rois_per_image": 32}
        raw["model"]["params"] = {**raw["model"]["params"], **small}
    _run_one_shrunk_round(raw, tmp_path)


@pytest.mark.slow
def test_pretrained_detector_starts_the_federated_presets(tmp_path: Path) -> None:
    """The warm-start recipe: a shrunk central pretraining run, its final detector saved as
    a state dict, and a federated preset starting from it (the detectors' own tests check
    that the loaded tensors are the file's)."""
    import torch

    import geofl

    raw = load_raw("paper004-detection-pretrain")
    assert raw["federation"]["num_clients"] == 1 and raw["data"]["params"]["seed"] == 1
    raw["data"]["params"] = {**raw["data"]["params"], "num_samples": 40}
    raw["federation"]["rounds"] = 1
    raw["eval"] = {"every": 1, "batch_size": 16}
    path = tmp_path / "pre.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    run = run_experiment(load_config(path), tmp_path / "pre")
    weights = tmp_path / "fcos.pt"
    pretrained = geofl.load_model(run, which="final").net.state_dict()
    torch.save(pretrained, weights)
    warm = load_raw("paper004-detection-table3-strong")
    warm["model"]["params"] = {**warm["model"]["params"], "weights": str(weights)}
    warm["methods"] = warm["methods"][:2]
    warm["compare_to"], warm["paper"] = None, {}
    warm["data"]["params"] = {**warm["data"]["params"], "num_samples": 60}
    _run_one_shrunk_round(warm, tmp_path)
