"""The task seam through the engine: a second task runs end to end, its primary metric (to
be minimised) picks the best model, and task/model/data mismatches stop at load time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from pydantic import BaseModel
from tests.conftest import tiny_raw
from torch.nn import functional as F
from typer.testing import CliRunner

from geofl.cli import app
from geofl.cli.progress import ProgressSubscriber
from geofl.config.load import load_config
from geofl.data.base import DATASETS, ArrayDataset
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.events import RunInfo, metric_text
from geofl.models.base import MODELS
from geofl.records import RoundRecord, RoundStatus
from geofl.registry import NoParams
from geofl.report import write_report
from geofl.tasks.base import TASKS, Direction, SplitMetrics, Task

runner = CliRunner()


class _SquaredError:
    """RMSE of the first output column against the targets (as floats)."""

    owns_loss = False

    def __init__(self) -> None:
        self.se, self.loss, self.n = 0.0, 0.0, 0

    def update(self, output: torch.Tensor, target: Any, loss_sum: float | None) -> None:
        err = output[:, 0].double() - target.double()
        self.se += float(err.square().sum())
        self.loss += float(loss_sum or 0.0)
        self.n += int(target.shape[0])

    def compute(self) -> SplitMetrics:
        n = max(self.n, 1)
        return SplitMetrics({"rmse": math.sqrt(self.se / n), "loss": self.loss / n}, n=self.n)


class _ClassIdRegression:
    """A stand-in regression task: regress the class id as a number (MSE; RMSE, minimised).

    It keeps the dataset's discrete classes for the label summary, so partitions and the
    consistency weighting see the same histograms as classification.
    """

    name = "test_regression"
    primary_metric = "rmse"
    direction: Direction = "min"
    num_outputs = 1
    model_takes_targets = False

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes

    def loss(self, output: torch.Tensor, target: Any) -> torch.Tensor:
        return F.mse_loss(output[:, 0], target.to(output.dtype))

    def loss_sum(self, output: torch.Tensor, target: Any) -> float:
        return float(F.mse_loss(output[:, 0], target.to(output.dtype), reduction="sum"))

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        return output[:, 0]

    def accumulator(self) -> _SquaredError:
        return _SquaredError()

    def label_summary(self, targets: Any) -> np.ndarray:
        return np.bincount(targets.numpy(), minlength=self.num_classes).astype(np.int64)

    def collate(self, targets: Any, index: torch.Tensor) -> Any:
        return targets[index]

    def fitted_state(self) -> dict[str, Any]:
        return {}


if "test_regression" not in TASKS:

    @TASKS.register("test_regression")
    def _build(_: NoParams, *, num_classes: int, train_targets: Any) -> Task:
        return _ClassIdRegression(num_classes)


def _run(tmp_path: Path, **over: Any) -> Path:
    raw = tiny_raw(**over)
    raw["federation"]["rounds"] = 4
    raw["methods"].append(
        {
            "name": "consistency",
            "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5},
            "weighting": {"name": "consistency", "beta": 5.0},
        }
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    return run_experiment(load_config(path), tmp_path / "run")


def test_a_second_task_runs_end_to_end_and_its_metric_picks_the_best_model(
    tmp_path: Path,
) -> None:
    run_dir = _run(tmp_path, task={"name": "test_regression"})
    info = json.loads((run_dir / "run.json").read_text())
    assert info["task"] == {"name": "test_regression", "primary_metric": "rmse", "direction": "min"}
    for seed_dir in sorted((run_dir / "methods").glob("*/seed-*")):
        rounds = [json.loads(x) for x in (seed_dir / "rounds.jsonl").read_text().splitlines()]
        assert all("train_rmse" in r and "train_accuracy" not in r for r in rounds)
        assert all(set(r["test"]) == {"rmse", "loss", "n"} for r in rounds)
        val = [r["val"]["rmse"] for r in rounds]
        assert int(np.argmin(val)) != int(np.argmax(val))  # the direction matters here
        final = json.loads((seed_dir / "final.json").read_text())
        best = final["best_val"]
        assert best["round"] == rounds[int(np.argmin(val))]["round"]  # min, not max
        assert best["val_rmse"] == min(val)
        assert torch.load(seed_dir / "best.pt")["round"] == best["round"]
    summary = json.loads((run_dir / "summary.json").read_text())
    ms = summary["methods"]["consistency"]
    assert {"final_test_rmse", "final_test_loss", "best_val_test_rmse"} <= set(ms)
    assert "final_test_accuracy" not in ms and ms["final_test_rmse"]["n"] == 1
    # the consistency weighting read the task's label summaries (finite, not uniform)
    log = (run_dir / "methods/consistency/seed-3/rounds.jsonl").read_text().splitlines()
    weights = [json.loads(x)["weights"] for x in log]
    assert all(math.isfinite(w) for ws in weights for w in ws)
    html = write_report(run_dir).read_text()
    assert "final test RMSE" in html and "final test acc" not in html
    assert (run_dir / "report" / "metric_trajectories.png").exists()


def test_classification_runs_keep_their_historical_keys(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["task"] == {
        "name": "classification",
        "primary_metric": "accuracy",
        "direction": "max",
    }
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert "task" not in config  # the default task leaves the resolved config as it was
    rec = json.loads((run_dir / "methods/fedavg/seed-3/rounds.jsonl").read_text().splitlines()[0])
    assert list(rec["test"]) == ["accuracy", "macro_f1", "loss", "per_class_accuracy", "n"]
    assert "train_accuracy" in rec
    final = json.loads((run_dir / "methods/fedavg/seed-3/final.json").read_text())
    assert list(final["best_val"]) == ["round", "val_accuracy", "val", "test"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert list(summary["methods"]["fedavg"])[:6] == [
        "seeds_done",
        "incomplete",
        "final_test_accuracy",
        "final_test_macro_f1",
        "final_test_loss",
        "best_val_test_accuracy",
    ]


# ------------------------------------------------------------- the real multilabel task
class _TinyParams(BaseModel):
    kind: str = "multi_hot"
    tabular: bool = False


def _tiny_dataset(params: _TinyParams, *, cache_dir: Path) -> ArrayDataset:
    """120 8×8 3-band patches (or 3 features); targets of ``kind`` that the inputs predict:
    label c is on when band c's mean is above its median."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(120, 3, 8, 8, generator=g) + torch.rand(120, 3, 1, 1, generator=g)
    means = x.mean(dim=(2, 3))
    multi_hot = (means > means.median(dim=0).values).to(torch.float32)
    inputs = means if params.tabular else x
    targets = {
        "multi_hot": multi_hot,
        "real": means[:, 0].contiguous(),
        "class": multi_hot[:, 0].to(torch.int64),
    }[params.kind]
    classes = {"multi_hot": ("a", "b", "c"), "real": ("yield",), "class": ("off", "on")}
    return ArrayDataset(
        inputs,
        targets,
        classes[params.kind],
        ("R", "G", "B"),
        name="tiny",
        target_kind=params.kind,  # type: ignore[arg-type]
    )


if "test_tiny" not in DATASETS:
    DATASETS.register("test_tiny", params=_TinyParams)(_tiny_dataset)


def test_the_multilabel_task_runs_end_to_end_through_the_engine(tmp_path: Path) -> None:
    raw = tiny_raw(
        task={"name": "multilabel", "pos_weight": "auto"},
        data={"dataset": "test_tiny", "params": {"kind": "multi_hot"}},
        model={"name": "small_cnn", "params": {"width": 8, "blocks": 1}},
    )
    raw["federation"] = {"num_clients": 3, "rounds": 3}
    raw["methods"][1]["partition"] = {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}
    raw["methods"].append(
        {"name": "consistency", "weighting": {"name": "consistency"}, "partition": {"name": "iid"}}
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    run_dir = run_experiment(load_config(path), tmp_path / "run")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["task"] == {"name": "multilabel", "primary_metric": "map", "direction": "max"}
    for seed_dir in sorted((run_dir / "methods").glob("*/seed-*")):
        rounds = [json.loads(x) for x in (seed_dir / "rounds.jsonl").read_text().splitlines()]
        assert all({"map", "micro_f1", "macro_f1", "loss"} <= set(r["test"]) for r in rounds)
        assert all(len(r["test"]["per_class_ap"]) == 3 and "train_map" in r for r in rounds)
        best = json.loads((seed_dir / "final.json").read_text())["best_val"]
        assert best["val_map"] == max(r["val"]["map"] for r in rounds)
    # clients share positives-per-label histograms: [C] counts the weighting used
    weights = json.loads(
        (run_dir / "methods/consistency/seed-3/rounds.jsonl").read_text().splitlines()[-1]
    )["weights"]
    assert len(weights) == 3 and math.isclose(sum(weights), 1.0)
    summary = json.loads((run_dir / "summary.json").read_text())["methods"]["fedavg"]
    assert summary["final_test_map"]["n"] == 1 and 0.0 < summary["final_test_map"]["mean"] <= 1
    html = write_report(run_dir).read_text()
    assert "final test mAP (%)" in html and (run_dir / "report/per_class_ap.png").exists()


# ---------------------------------------------------------------- load-time mismatches


def _tabular_model(_: NoParams, **kwargs: Any) -> torch.nn.Module:
    return torch.nn.Linear(3, 2)


if "test_tabular_model" not in MODELS:
    MODELS.register("test_tabular_model", traits=("tabular",))(_tabular_model)


def _cli(tmp_path: Path, raw: dict[str, Any]) -> tuple[int, str, Path]:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    return result.exit_code, result.output, out


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        ({"kind": "real"}, "task.name", "float32 values; use task: {name: regression}"),
        ({"kind": "multi_hot"}, "task.name", "[120x3] float32 (multi-hot or multi-output)"),
        ({"kind": "class", "tabular": True}, "model.name", "small_cnn takes images"),
    ],
)
def test_task_model_data_mismatches_exit_2_with_one_line_before_the_run_dir(
    tmp_path: Path, data: dict[str, Any], field: str, needle: str
) -> None:
    raw = tiny_raw(data={"dataset": "test_tiny", "params": data})
    code, output, out = _cli(tmp_path, raw)
    assert code == 2, output
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), output
    assert needle in lines[0] and not out.exists()


def test_images_with_a_tabular_model_exit_2_naming_the_model(tmp_path: Path) -> None:
    raw = tiny_raw(model={"name": "test_tabular_model", "params": {}})
    code, output, out = _cli(tmp_path, raw)
    assert code == 2, output
    assert output.strip().startswith("error: model.name: test_tabular_model takes tabular")
    assert len(output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(
    ("targets", "needle"),
    [
        (torch.zeros(6, 3), "[6x3] float32 (multi-hot or multi-output)"),
        (torch.tensor([0.5, 1.0]), "float32 values"),
        (torch.tensor([0, 3]), "class ids in [0, 3)"),
    ],
)
def test_classification_refuses_targets_it_cannot_learn(targets: torch.Tensor, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        TASKS.build("classification", {}, num_classes=3, train_targets=targets)
    assert err.value.path == "task.name" and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_task_parameters_are_validated_by_the_registry(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(task={"name": "classification", "smoothing": 1})))
    with pytest.raises(ConfigError, match=r"^task\.smoothing: unknown field"):
        load_config(path)
    path.write_text(yaml.safe_dump(tiny_raw(task={"name": "nope"})))
    with pytest.raises(ConfigError, match=r"^task\.name: unknown task 'nope'"):
        load_config(path)


def test_displays_show_the_tasks_primary_metric() -> None:
    assert metric_text("accuracy", 0.83214) == "acc 83.21%"
    assert metric_text("rmse", 1.23456) == "rmse 1.235"
    progress = ProgressSubscriber()
    info = RunInfo("m", 1, 2, 1, 3, Path("."), primary_metric="rmse")
    progress.on_run_start(info)
    test = SplitMetrics({"rmse": 0.5, "loss": 0.25}, n=4)
    progress.on_round_end(info, RoundRecord(1, RoundStatus.AGGREGATED, [0], [1.0], test=test))
    (task,) = progress.progress.tasks
    assert task.fields["metric"] == "test rmse 0.5" and task.completed == 1
