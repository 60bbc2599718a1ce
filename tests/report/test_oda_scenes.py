"""The 004 Fig. 5 analogue: outcome colours by hand, and the figure of a tiny ODA run
(scenes rebuilt from the run directory agree with the run's own per-object ASR)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.oda_scenes import collect_oda_scenes
from geofl.errors import RunDirError
from geofl.report.oda_scenes import OdaScene, defended_outcomes, draw_oda_scenes


def test_defended_outcomes_follow_fig5_colour_key() -> None:
    attacked = np.array([False, True, True, False])
    defended = np.array([False, False, True, True])
    assert defended_outcomes(attacked, defended) == ["correct", "restored", "residual", "removed"]


def test_draw_writes_a_png_and_refuses_no_scene(tmp_path: Path) -> None:
    img = np.zeros((32, 32, 3))
    scene = OdaScene(
        0,
        img,
        img,
        np.array([[2.0, 2, 10, 10]]),
        np.zeros((0, 4)),
        np.array([True]),
        np.array([False]),
    )
    out = draw_oda_scenes([scene], tmp_path / "f.png", ("A", "D"), "airplane")
    assert out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="at least one scene"):
        draw_oda_scenes([], tmp_path / "g.png", ("A", "D"), "airplane")


def _tiny_run(tmp_path: Path) -> Path:
    oda = {"name": "oda", "fraction": 0.2, "poison_ratio": 0.5, "target": 0, "trigger": {"size": 5}}
    raw = {
        "name": "tiny-fig5",
        "seeds": [1],
        "task": {"name": "detection"},
        "data": {
            "dataset": "synthetic_aerial",
            "params": {"num_samples": 40, "size": 64, "seed": 0},
            "split": {"val": 0.1, "test": 0.2},
        },
        "model": {"name": "fcos", "params": {"width": 8, "fpn_channels": 32, "head_convs": 1}},
        "train": {"optimizer": "adam", "lr": 5.0e-4, "batch_size": 4, "local_steps": 1},
        "federation": {"num_clients": 5, "rounds": 1},
        "eval": {"every": 1, "batch_size": 1},  # 1-image batches: the fpn_channels 32 fix
        "methods": [
            {"name": "fedavg", "partition": {"name": "iid"}, "attack": oda},
            {"name": "clean", "partition": {"name": "iid"}},
            {
                "name": "dual-shield",
                "partition": {"name": "iid"},
                "attack": oda,
                "algorithm": {"name": "dual_shield"},
            },
        ],
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    return run_experiment(load_config(path), tmp_path / "run")


def test_scenes_of_a_run_match_its_asr_and_draw(tmp_path: Path) -> None:
    run = _tiny_run(tmp_path)
    scenes, name = collect_oda_scenes(run, "fedavg", "dual-shield", 1, count=100)
    assert name == "airplane" and scenes
    for m, attr in (("fedavg", "attacked_missed"), ("dual-shield", "defended_missed")):
        final = json.loads((run / "methods" / m / "seed-1" / "final.json").read_text())
        missed = sum(int(getattr(s, attr).sum()) for s in scenes)
        total = sum(len(s.target_boxes) for s in scenes)
        assert missed / total == pytest.approx(final["final"]["test"]["asr"])  # Eq. 15 again
    for s in scenes:
        assert s.clean.shape == s.triggered.shape == (64, 64, 3)
        assert not np.array_equal(s.clean, s.triggered)  # the trigger is on
    out = draw_oda_scenes(scenes[:2], tmp_path / "fig5.png", ("FedAvg", "DS"), name)
    assert out.stat().st_size > 0
    with pytest.raises(RunDirError, match="no object-disappearance attack"):
        collect_oda_scenes(run, "clean", "dual-shield", 1)
