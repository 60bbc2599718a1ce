"""Per-region metrics (003 Table 12, ``eval.group_by``) against scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, mean_absolute_error, roc_auc_score
from torch import nn

from geofl.data.base import ArrayDataset
from geofl.engine.evaluation.groups import check_group_key, group_values, with_group_metrics
from geofl.errors import ConfigError
from geofl.tasks.base import SplitMetrics
from geofl.tasks.binary import BinaryTask
from geofl.tasks.regression import RegressionParams, build_regression


def _data(n: int, kind: str) -> ArrayDataset:
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(n, 3)).astype(np.float32))
    region = rng.integers(0, 3, n)
    if kind == "binary":
        noise = rng.normal(scale=1.0 + region, size=n)  # noisier labels in regions 1, 2
        y = torch.from_numpy(((x[:, 0].numpy() + noise) > 0.8).astype(np.int64))
        return ArrayDataset(
            x, y, ("no", "yes"), ("a", "b", "c"), {"region": region}, target_kind="binary"
        )
    y = torch.from_numpy(
        (3 * x[:, 0].numpy() + rng.normal(size=n) * (1 + region)).astype(np.float32)
    )
    return ArrayDataset(x, y, ("y",), ("a", "b", "c"), {"region": region}, target_kind="real")


def _model() -> nn.Module:
    lin = nn.Linear(3, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.5, 0.2, -0.1]]))
        lin.bias.fill_(-0.3)
    return lin


def test_per_region_auc_f1_and_std_match_sklearn() -> None:
    data, model = _data(3000, "binary"), _model()
    base = SplitMetrics({"roc_auc": 0.0, "loss": 0.0}, n=len(data))
    out = with_group_metrics(base, model, data, BinaryTask(), "region", batch_size=256)
    with torch.no_grad():
        score = model(data.inputs)[:, 0].numpy()
    y, region = data.targets.numpy(), data.metadata["region"]
    aucs = []
    for r in range(3):
        m = region == r
        aucs.append(roc_auc_score(y[m], score[m]))
        assert out.values[f"roc_auc_region_{r}"] == pytest.approx(aucs[-1], abs=1e-12)
        assert out.values[f"f1_region_{r}"] == pytest.approx(
            f1_score(y[m], score[m] >= 0), abs=1e-12
        )
    assert out.values["roc_auc_region_std"] == pytest.approx(np.std(aucs), abs=1e-12)
    assert out.values["roc_auc_region_min"] == pytest.approx(min(aucs), abs=1e-12)
    assert "loss_region_0" not in out.values and out.values["roc_auc"] == 0.0  # kept as given


def test_per_region_mae_matches_sklearn_for_regression() -> None:
    data, model = _data(2000, "real"), _model()
    task = build_regression(RegressionParams(), num_classes=1, train_targets=data.targets)
    base = SplitMetrics({"rmse": 0.0}, n=len(data))
    out = with_group_metrics(base, model, data, task, "region", batch_size=300)
    with torch.no_grad():
        pred = task.predict(model(data.inputs)).numpy()
    y, region = data.targets.numpy(), data.metadata["region"]
    for r in range(3):
        m = region == r
        assert out.values[f"mae_region_{r}"] == pytest.approx(
            mean_absolute_error(y[m], pred[m]), rel=1e-5
        )
    rmses = [out.values[f"rmse_region_{r}"] for r in range(3)]
    assert out.values["rmse_region_std"] == pytest.approx(np.std(rmses))


def test_table_12_std_is_population_std() -> None:
    per = [(str(r), SplitMetrics({"roc_auc": a})) for r, a in enumerate((0.88, 0.83, 0.74))]
    assert group_values(per, "region", "roc_auc")["roc_auc_region_std"] == pytest.approx(
        0.058, abs=5e-4
    )
    per = [(str(r), SplitMetrics({"roc_auc": a})) for r, a in enumerate((0.92, 0.90, 0.88))]
    assert group_values(per, "region", "roc_auc")["roc_auc_region_std"] == pytest.approx(
        0.016, abs=5e-4
    )


def test_undefined_group_metric_is_left_out_of_the_spread() -> None:
    per = [
        ("0", SplitMetrics({"roc_auc": 0.9})),
        ("1", SplitMetrics({"roc_auc": float("nan")})),
        ("2", SplitMetrics({"roc_auc": 0.7})),
    ]
    out = group_values(per, "region", "roc_auc")
    assert out["roc_auc_region_std"] == pytest.approx(0.1) and out["roc_auc_region_min"] == 0.7


def test_unknown_group_key_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"eval\.group_by.*'farm' is not per-sample metadata"):
        check_group_key(_data(10, "binary"), "farm")
