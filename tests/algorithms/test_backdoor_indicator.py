"""BackdoorIndicator (Li et al. 2024; 004 Table 3 baseline): indicator set, planting,
scores on hand-built models, and the strategy dropping an update that keeps the indicator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from tests.conftest import tiny_raw
from torch import nn
from typer.testing import CliRunner

from geofl.algorithms.backdoor_indicator import BackdoorIndicatorParams, BackdoorIndicatorStrategy
from geofl.cli import app
from geofl.config.load import load_config, load_raw
from geofl.errors import ConfigError
from geofl.models.base import FlatModel
from geofl.models.cnn import SmallCNNParams, build_small_cnn
from geofl.server.aggregators import build_mean
from geofl.server.indicator import (
    IndicatorSet,
    IndicatorSettings,
    indicator_scores,
    make_indicator_set,
    plant_indicator,
)
from geofl.server.strategy import UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import uniform_weights
from geofl.update import UpdateMeta

SHAPE = (3, 8, 8)
C = 4


def _cnn(norm: str = "batch") -> FlatModel:
    params = SmallCNNParams(width=8, blocks=2, norm=norm)  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(0)
    return FlatModel(build_small_cnn(params, in_channels=3, num_classes=C, generator=gen))


class _Bias(nn.Module):
    """Predicts from a bias only (and a zero-initialised linear map): every input gets the
    same logits, so the predicted label is the argmax of the bias."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3 * 8 * 8, C)
        nn.init.zeros_(self.lin.weight)
        nn.init.zeros_(self.lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.flatten(1))


def test_indicator_set_is_balanced_seeded_and_ood_shaped() -> None:
    s = IndicatorSettings(num_samples=10)
    a = make_indicator_set(SHAPE, C, s, torch.Generator().manual_seed(1))
    b = make_indicator_set(SHAPE, C, s, torch.Generator().manual_seed(1))
    assert a.inputs.shape == (10, *SHAPE) and torch.equal(a.inputs, b.inputs)
    assert torch.bincount(a.labels, minlength=C).tolist() == [3, 3, 2, 2]  # 10 over 4 labels
    blobs = make_indicator_set(SHAPE, C, IndicatorSettings(ood="blobs"), torch.Generator())
    assert blobs.inputs.flatten(1).std(1).allclose(torch.ones(200), atol=1e-4)


def test_scores_by_hand_on_a_constant_predictor() -> None:
    """Labels [0, 0, 1, 1, 2, 3]; a model predicting label 1 everywhere has TPR 2/2 = 1 (both
    samples assigned 1 are 'correct'), one predicting 3 has 1/1, one predicting 0 has 2/2;
    each also predicts every other sample as its label, FPR 1."""
    model = FlatModel(_Bias())
    ind = IndicatorSet(torch.randn(6, *SHAPE), torch.tensor([0, 0, 1, 1, 2, 3]))
    base = torch.zeros(model.spec.numel)
    bias_off = model.spec.offsets[model.spec.names.index("lin.bias")]
    towards = torch.zeros(3, model.spec.numel)
    towards[0, bias_off + 1] = 1.0  # predict 1
    towards[1, bias_off + 3] = 1.0  # predict 3
    towards[2, bias_off + 0] = 1.0  # predict 0
    scores = indicator_scores(model, base, towards, ind, C, score="label")
    assert scores.tolist() == [1.0, 1.0, 1.0]
    # TPR − FPR: a constant predictor is no indicator (1 − 1 = 0)
    assert indicator_scores(model, base, towards, ind, C).tolist() == [0.0, 0.0, 0.0]
    # a partially right model: weight makes sample-dependent predictions
    model2 = FlatModel(_Bias())
    w_off = model2.spec.offsets[model2.spec.names.index("lin.weight")]
    x = torch.zeros(6, *SHAPE)
    x[:, 0, 0, 0] = torch.tensor([1.0, -1.0, 1.0, 1.0, 1.0, 1.0])  # sample 1 differs
    ind2 = IndicatorSet(x, torch.tensor([0, 0, 1, 1, 2, 3]))
    up = torch.zeros(1, model2.spec.numel)
    up[0, w_off + 0] = 1.0  # logit 0 = x[0,0,0]: +1 → label 0, −1 → label 0 loses to 0-ties
    up[0, bias_off + 1] = 0.5  # logit 1 = 0.5: sample 1 (logit 0 = −1) → label 1
    # predictions: [0, 1, 0, 0, 0, 0] → top label 0; samples assigned 0: #0 right, #1 wrong
    assert indicator_scores(model2, base, up, ind2, C, score="label").tolist() == [0.5]
    # FPR: samples #2–#5 (assigned 1, 1, 2, 3) predicted 0: 4 of 4 → 0.5 − 1.0
    assert indicator_scores(model2, base, up, ind2, C).tolist() == [-0.5]


def test_planting_restores_the_running_statistics() -> None:
    model = _cnn(norm="batch")
    params = model.snapshot()
    s = IndicatorSettings(num_samples=16, plant_epochs=2, batch_size=8)
    ind = make_indicator_set(SHAPE, C, s, torch.Generator().manual_seed(2))
    planted = plant_indicator(model, params, ind, s, torch.Generator().manual_seed(3))
    buffers = [i for i, t in enumerate(model.spec.trainable) if not t]
    assert buffers  # the batch-norm running statistics travel in the flat vector
    changed = []
    for i, trainable in enumerate(model.spec.trainable):
        off, n = model.spec.offsets[i], int(torch.tensor(model.spec.shapes[i]).prod())
        same = torch.equal(planted[off : off + n], params[off : off + n])
        if trainable:
            changed.append(not same)
        else:
            assert same, model.spec.names[i]
    assert any(changed)


def test_planting_teaches_the_indicator_and_undoing_it_scores_low() -> None:
    model = _cnn(norm="group")
    params = model.snapshot()
    s = IndicatorSettings(num_samples=32, plant_epochs=60, plant_lr=0.05, mu=0.0, batch_size=32)
    ind = make_indicator_set(SHAPE, C, s, torch.Generator().manual_seed(2))
    planted = plant_indicator(model, params, ind, s, torch.Generator().manual_seed(3))
    model.load(planted)
    model.module.eval()
    with torch.no_grad():
        acc = float((model.module(ind.inputs).argmax(1) == ind.labels).float().mean())
    assert acc > 0.9  # memorised
    keep = torch.zeros(1, planted.numel())  # an update that keeps the planted model
    undo = (params - planted)[None]  # one that erases the planting
    kept_score = indicator_scores(model, planted, keep, ind, C)
    undone_score = indicator_scores(model, planted, undo, ind, C)
    assert float(kept_score[0]) > 0.9 > float(undone_score[0])


def test_strategy_drops_updates_that_keep_the_indicator() -> None:
    """Round 3 with a planted broadcast: two updates undo the planting (benign: the
    indicator fades), one keeps it (flagged); the aggregate is the mean of the other two."""
    model = _cnn(norm="group")
    params = BackdoorIndicatorParams(
        num_samples=32, plant_epochs=60, plant_lr=0.05, mu=0.0, batch_size=32, start_round=1
    )
    tier = FlatTier(uniform_weights, build_mean(None), ())  # type: ignore[arg-type]
    strat = BackdoorIndicatorStrategy(tier, 1.0, params, lambda: _cnn("group"), SHAPE, C, seed=5)
    w0 = model.snapshot()
    d = w0.numel()
    metas = [UpdateMeta(client_id=i, num_samples=10, round=1) for i in range(3)]
    r1 = strat.aggregate(1, w0, UpdateBatch(torch.zeros(3, d), metas, num_clients=3))
    assert r1.info["indicator.planted"] == 1.0 and "indicator.flagged" not in r1.info
    planted = r1.params
    assert not torch.equal(planted, w0)
    undo = w0 - planted
    ups = torch.stack([undo, torch.zeros(d), undo * 1.1])
    r2 = strat.aggregate(2, planted, UpdateBatch(ups, metas, num_clients=3))
    assert r2.kept.tolist() == [True, False, True]
    assert r2.info["indicator.flagged"] == 1.0
    assert r2.info["indicator.score.1"] > 0.9 > r2.info["indicator.score.0"]
    assert torch.allclose(r2.aggregate, (undo + undo * 1.1) / 2, atol=1e-6)
    assert r2.weights.tolist() == pytest.approx([0.5, 0.0, 0.5])


def test_end_to_end_run_records_scores_and_is_deterministic(tmp_path: Path) -> None:
    raw = tiny_raw()
    raw["federation"]["rounds"] = 3
    raw["methods"] = [
        {
            "name": "bi",
            "partition": {"name": "iid"},
            "algorithm": {
                "name": "backdoor_indicator",
                "num_samples": 16,
                "plant_epochs": 1,
                "start_round": 1,
                "threshold": 0.5,
            },
            "attack": {"name": "backdoor", "fraction": 0.25, "target": 0},
        }
    ]
    path = tmp_path / "bi.yaml"
    path.write_text(yaml.safe_dump(raw))
    finals = []
    for run in ("a", "b"):
        out = tmp_path / run
        result = CliRunner().invoke(
            app, ["run", str(path), "--out", str(out), "--no-progress", "--no-report"]
        )
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (out / "methods/bi/seed-3/rounds.jsonl").open()]
        assert [r["strategy"]["indicator.planted"] for r in rows] == [1.0, 1.0, 1.0]
        assert "indicator.score.0" not in rows[0]["strategy"]  # round 1: nothing planted yet
        scored = {k for k in rows[1]["strategy"] if k.startswith("indicator.score.")}
        assert len(scored) == 4
        finals.append(json.loads((out / "summary.json").read_text()))
    acc = [f["methods"]["bi"]["final_test_accuracy"]["values"] for f in finals]
    assert acc[0] == acc[1]


@pytest.mark.parametrize(
    ("params", "field"), [({"threshold": 0.0}, "threshold"), ({"ood": "cifar"}, "ood")]
)
def test_bad_params_name_the_field(tmp_path: Path, params: dict[str, object], field: str) -> None:
    raw = tiny_raw()
    raw["methods"][1]["algorithm"] = {"name": "backdoor_indicator", **params}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"methods\.1\.algorithm\.{field}"):
        load_config(path)


@pytest.mark.slow
def test_detection_run_plants_and_screens_with_boxes(tmp_path: Path) -> None:
    """On detection the same strategy plants centre boxes of the assigned classes with the
    detector's own loss and scores each update by its most confident detections (no branch
    on the task in the defense): two rounds of a shrunk FCOS run under ODA record planting
    and one score per client, within [-1, 1]."""
    raw = load_raw("paper004-detection-table3-strong")
    raw["data"]["params"] = {**raw["data"]["params"], "num_samples": 40}
    raw["model"]["params"] = {**raw["model"]["params"], "head_convs": 1}
    raw["federation"].update(rounds=2, num_clients=5)
    raw["eval"] = {"every": 2, "batch_size": 16}
    oda = raw["methods"][1]["attack"]
    indicator = {
        "name": "backdoor_indicator",
        "num_samples": 6,
        "plant_epochs": 1,
        "start_round": 1,
        "batch_size": 6,
    }
    raw["methods"] = [
        {"name": "bi", "partition": {"name": "iid"}, "algorithm": indicator, "attack": oda}
    ]
    raw["compare_to"], raw["paper"] = None, {}
    path = tmp_path / "bi.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    result = CliRunner().invoke(
        app, ["run", str(path), "--out", str(tmp_path / "run"), "--no-progress", "--no-report"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(x) for x in (tmp_path / "run/methods/bi/seed-2024/rounds.jsonl").open()]
    assert [r["strategy"]["indicator.planted"] for r in rows] == [1.0, 1.0]
    scores = {k: v for k, v in rows[1]["strategy"].items() if k.startswith("indicator.score.")}
    assert len(scores) == 5 and all(-1.0 <= v <= 1.0 for v in scores.values())
    assert 0.0 <= rows[1]["test"]["map_50"] <= 1.0
