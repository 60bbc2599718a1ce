"""Tracking export against the real libraries (issue 17 item 3): a run written to an MLflow
file store and TensorBoard event files in a temp dir, read back through MLflow's client and
TensorBoard's EventAccumulator."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.records.header import resume_identity
from geofl.engine.stop import StopRequest
from geofl.errors import ConfigError, RunStoppedError
from geofl.records import RoundRecord
from geofl.tracking.params import flatten, method_params, round_metrics
from geofl.tracking.state import read_state, require
from geofl.tracking.tensorboard_export import scalar_tag
from tests.conftest import tiny_raw

mlflow_tracking = pytest.importorskip("mlflow.tracking", reason="needs the tracking extra")
event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="needs the tracking extra"
)

SEEDS = [3, 4]


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporter may set MLFLOW_ALLOW_FILE_STORE; undo it after each test."""
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)


def _config(tmp_path: Path, seeds: list[int] = SEEDS) -> Path:
    method = {"name": "fedavg", "label": "FedAvg", "partition": {"name": "iid"}}
    raw = tiny_raw(methods=[method], seeds=seeds)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _client(run_dir: Path) -> Any:
    state = read_state(run_dir)["mlflow"]
    return mlflow_tracking.MlflowClient(tracking_uri=state["uri"]), state


def _rounds(run_dir: Path, seed: int) -> list[dict[str, Any]]:
    path = run_dir / "methods" / "fedavg" / f"seed-{seed}" / "rounds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _events(path: Path) -> Any:
    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``geofl run tiny.yaml --track mlflow --track tensorboard`` (2 seeds × 3 rounds)."""
    tmp = tmp_path_factory.mktemp("tracked")
    out = tmp / "run"
    mp = pytest.MonkeyPatch()
    mp.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    mp.delenv("MLFLOW_DISABLE_TELEMETRY", raising=False)
    try:
        result = CliRunner().invoke(
            app,
            [
                "run",
                str(_config(tmp)),
                "--out",
                str(out),
                "--no-progress",
                "--track",
                "mlflow",
                "--track",
                "tensorboard",
            ],
        )
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    assert "report logged to mlflow" in result.output
    return out


def test_mlflow_runs_params_and_metric_history(tracked: Path) -> None:
    client, state = _client(tracked)
    assert state["uri"] == (tracked / "mlruns").resolve().as_uri()  # file store in the run dir
    runs = {r.info.run_id: r for r in client.search_runs([state["experiment_id"]])}
    assert client.get_experiment(state["experiment_id"]).name == "tiny"
    parent = runs[state["parent"]]
    children = [
        r for r in runs.values() if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    ]
    assert len(runs) == 3 and len(children) == 2
    assert all(r.info.status == "FINISHED" for r in runs.values())
    # params: the resolved config, flattened; children get their method entry and seed
    assert parent.data.params["federation.rounds"] == "3"
    assert parent.data.params["methods.0.partition.name"] == "iid"
    assert parent.data.params["seeds"] == "[3, 4]"
    for child in children:
        seed = int(child.data.params["seed"])
        assert child.data.params["method.label"] == "FedAvg"
        assert child.data.params["data.dataset"] == "synthetic"
        history = sorted(
            (m.step, m.value) for m in client.get_metric_history(child.info.run_id, "test_accuracy")
        )
        rounds = _rounds(tracked, seed)
        assert [step for step, _ in history] == [r["round"] for r in rounds] == [1, 2, 3]
        assert [v for _, v in history] == pytest.approx([r["test"]["accuracy"] for r in rounds])
        final = json.loads((tracked / "methods/fedavg" / f"seed-{seed}/final.json").read_text())
        assert child.data.metrics["final_test_accuracy"] == pytest.approx(
            final["final"]["test"]["accuracy"]
        )
        files = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert files == {"final.json", "partition.json"}
    summary = json.loads((tracked / "summary.json").read_text())
    mean = summary["methods"]["fedavg"]["final_test_accuracy"]["mean"]
    assert parent.data.metrics["fedavg/final_test_accuracy"] == pytest.approx(mean)


def test_mlflow_parent_holds_the_run_files_and_the_report(tracked: Path) -> None:
    client, state = _client(tracked)
    top = {a.path for a in client.list_artifacts(state["parent"])}
    assert {"config.yaml", "run.json", "summary.json", "report"} <= top
    report = {a.path for a in client.list_artifacts(state["parent"], "report")}
    assert "report/index.html" in report and "report/accuracy_trajectories.png" in report
    local = Path(client.download_artifacts(state["parent"], "summary.json", str(tracked / "dl")))
    assert json.loads(local.read_text()) == json.loads((tracked / "summary.json").read_text())


def test_tensorboard_event_files(tracked: Path) -> None:
    for seed in SEEDS:
        acc = _events(tracked / "tensorboard" / "fedavg" / f"seed-{seed}")
        scalars = acc.Tags()["scalars"]
        assert {"test/accuracy", "val/loss", "train/loss", "bytes/up"} <= set(scalars)
        events = acc.Scalars("test/accuracy")
        rounds = _rounds(tracked, seed)
        assert [e.step for e in events] == [r["round"] for r in rounds]
        expected = [r["test"]["accuracy"] for r in rounds]
        assert [e.value for e in events] == pytest.approx(expected, rel=1e-6)  # float32
        assert "final/final_test_accuracy" in scalars
        text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
        assert "name: tiny" in text and "seeds:" in text
    report = _events(tracked / "tensorboard" / "report")
    assert {"accuracy_trajectories", "convergence"} <= set(report.Tags()["images"])
    image = report.Images("convergence")[0]
    assert image.width > 100 and image.height > 100


def test_resume_with_tracking_switched_on_backfills_earlier_rounds(tmp_path: Path) -> None:
    cfg_path = _config(tmp_path, seeds=[3])
    out = tmp_path / "run"
    stop = StopRequest()
    stop.request(signal.SIGTERM)  # stop after the first round's durable write
    with pytest.raises(RunStoppedError):
        run_experiment(load_config(cfg_path, []), out, stop=stop)
    cfg = load_config(cfg_path, ["tracking.mlflow=true", "tracking.tensorboard=true"])
    run_experiment(cfg, out, resume=True)  # tracking is not part of the resume identity
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"  # no network at run time
    client, state = _client(out)
    child = state["runs"]["fedavg/3"]
    assert [m.step for m in client.get_metric_history(child, "test_accuracy")] == [1, 2, 3]
    acc = _events(out / "tensorboard" / "fedavg" / "seed-3")
    assert [e.step for e in acc.Scalars("test/accuracy")] == [1, 2, 3]


def test_resume_identity_ignores_tracking() -> None:
    a = {"name": "x", "data": {"cache": "mmap", "dataset": "d"}, "tracking": {"mlflow": True}}
    assert resume_identity(a) == {"name": "x", "data": {"dataset": "d"}}


@pytest.mark.parametrize("missing", ["mlflow", "tensorboard"])
def test_missing_library_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import fails, find_spec says absent
    if missing == "tensorboard":  # PyTorch's writer module may be imported already
        monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    result = CliRunner().invoke(
        app, ["run", str(_config(tmp_path)), "--out", str(tmp_path / "o"), "--track", missing]
    )
    assert result.exit_code == 2
    assert f"tracking.{missing}: needs {missing}, which is not installed" in result.output
    assert "pip install 'geofl[tracking]'" in result.output
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match=f"tracking.{missing}: needs {missing}"):
        require(
            "torch.utils.tensorboard" if missing == "tensorboard" else missing,
            f"tracking.{missing}",
        )


def test_unknown_tracker_flag(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(_config(tmp_path)), "--track", "wandb"])
    assert result.exit_code == 2
    assert "--track: unknown tracker 'wandb'; use mlflow or tensorboard" in result.output


def test_flatten_and_method_params() -> None:
    resolved = {
        "name": "x",
        "seeds": [1, 2],
        "federation": {"rounds": 3, "sampling": {"name": "fixed"}},
        "methods": [{"name": "a", "partition": {"name": "iid"}}, {"name": "b", "label": None}],
        "tracking": None,
    }
    flat = flatten(resolved)
    assert flat["seeds"] == "[1, 2]" and flat["federation.sampling.name"] == "fixed"
    assert flat["methods.1.label"] == "null" and flat["methods.0.partition.name"] == "iid"
    params = method_params(resolved, "a", 7)
    assert params["method.partition.name"] == "iid" and params["seed"] == "7"
    assert not any(k.startswith(("methods.", "seeds")) for k in params)


def test_round_metrics_keep_finite_scalars() -> None:
    record = RoundRecord.from_json(
        {
            "round": 2,
            "status": "aggregated",
            "participants": [0, 1],
            "weights": [0.5, 0.5],
            "rejected": [{"client": 2, "reason": "norm"}],
            "train_loss": float("nan"),
            "train_accuracy": 0.5,
            "bytes_up": 100,
            "bytes_down": 200,
            "time_s": {"total": 1.5},
            "test": {"accuracy": 0.75, "loss": 0.5, "per_class_accuracy": [1.0, 0.5], "n": 8},
        }
    )
    assert round_metrics(record) == {
        "test_accuracy": 0.75,
        "test_loss": 0.5,
        "train_accuracy": 0.5,
        "bytes_up": 100.0,
        "bytes_down": 200.0,
        "participants": 2.0,
        "rejected": 1.0,
        "time_s": 1.5,
    }
    assert scalar_tag("test_accuracy") == "test/accuracy" and scalar_tag("wall") == "wall"


def test_geofl_report_adds_the_rerendered_report(tracked: Path) -> None:
    (tracked / "report" / "index.html").unlink()
    result = CliRunner().invoke(app, ["report", str(tracked)])
    assert result.exit_code == 0, result.output
    assert "report logged to mlflow" in result.output
    assert "report logged to tensorboard" in result.output
    client, state = _client(tracked)
    report = {a.path for a in client.list_artifacts(state["parent"], "report")}
    assert "report/index.html" in report
