"""``model.json`` and ``geofl.load_model``: a run's model outside the run, exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from tests.inference.conftest import MS_BANDS, TrainedRun

import geofl
from geofl.data.base import SENTINEL2_BANDS
from geofl.engine.evaluation.heldout import evaluate
from geofl.engine.experiment import prepare_split
from geofl.errors import RunDirError
from geofl.inference import GeoflModel, prediction_columns
from geofl.io import to_jsonable
from geofl.models.spec import MODEL_SPEC_FILE, ModelSpec, read_model_spec
from geofl.records import metrics_to_json
from geofl.rundir import seed_dir
from geofl.tasks import TASKS


def _as_logged(metrics: object) -> object:
    """``metrics`` as ``final.json`` stores them (through strict JSON)."""
    return json.loads(json.dumps(to_jsonable(metrics)))


def _final(run: TrainedRun) -> dict[str, object]:
    sdir = seed_dir(run.run_dir, run.cfg.methods[0].name, run.cfg.seeds[0])
    data: dict[str, object] = json.loads((sdir / "final.json").read_text())
    return data


def test_model_json_records_what_inference_needs(ms_run: TrainedRun) -> None:
    cfg = ms_run.cfg
    spec = read_model_spec(seed_dir(ms_run.run_dir, "fedavg", 3) / MODEL_SPEC_FILE)
    assert (spec.method, spec.seed, spec.geofl_version) == ("fedavg", 3, geofl.__version__)
    assert spec.model.name == "small_cnn" and spec.model.params == {"width": 8, "blocks": 2}
    assert (spec.model.in_channels, spec.model.num_outputs) == (4, 10)
    assert spec.task.name == "classification" and spec.task.params == {}
    assert spec.input.dataset_bands == SENTINEL2_BANDS
    assert spec.input.bands == tuple(MS_BANDS) and spec.input.patch_size == (16, 16)
    assert (spec.input.format, spec.input.scale) == ("uint16_bands", 10000.0)
    # The statistics are exactly those the run subtracted and divided by.
    from geofl.engine.experiment import load_dataset

    data = prepare_split(load_dataset(cfg), cfg, 3)
    assert data.mean is not None and data.std is not None
    assert spec.normalization.kind == "standardize"
    assert torch.equal(torch.tensor(spec.normalization.mean), data.mean.flatten())
    assert torch.equal(torch.tensor(spec.normalization.std), data.std.flatten())


@pytest.mark.parametrize(("which", "key"), [("best", "best_val"), ("final", "final")])
def test_load_model_reproduces_the_runs_test_metrics_exactly(
    ms_run: TrainedRun, which: str, key: str
) -> None:
    model = geofl.load_model(ms_run.run_dir, which=which)  # type: ignore[arg-type]
    assert isinstance(model, GeoflModel) and not model.training
    assert model.classes == ms_run.raw_test.classes and model.task.name == "classification"
    raw = ms_run.raw_test  # all 13 bands, reflectance scale, not normalised
    task = TASKS.build("classification", {}, num_classes=10, train_targets=raw.targets)
    metrics = evaluate(model, raw.inputs, raw.targets, task, ms_run.cfg.eval.batch_size)
    final = _final(ms_run)[key]
    assert isinstance(final, dict)
    assert _as_logged(metrics_to_json(metrics)) == final["test"]
    assert model.round == (final["round"] if which == "best" else 2)


def test_load_model_accepts_inputs_already_reduced_to_the_trained_bands(
    ms_run: TrainedRun,
) -> None:
    model = geofl.load_model(ms_run.run_dir, "fedavg", 3)
    raw = ms_run.raw_test.inputs[:8]
    chosen = raw[:, [SENTINEL2_BANDS.index(b) for b in MS_BANDS]]
    with torch.inference_mode():
        assert torch.equal(model(raw), model(chosen))
        cols = prediction_columns(model(raw), model.spec)
    assert cols.names == [f"prob:{c}" for c in model.classes]
    torch.testing.assert_close(cols.values.sum(1), torch.ones(8))
    with pytest.raises(geofl.errors.DataError, match=r"inputs have 5 bands; the model takes 13"):
        model(raw[:, :5])


def test_choices_are_listed_when_a_run_has_several(ms_run: TrainedRun, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ms_run.run_dir, run)
    shutil.copytree(run / "methods" / "fedavg", run / "methods" / "other")
    shutil.copytree(run / "methods" / "fedavg" / "seed-3", run / "methods" / "fedavg" / "seed-7")
    with pytest.raises(RunDirError, match=r"holds 2 methods \(fedavg, other\); choose one with"):
        geofl.load_model(run)
    with pytest.raises(RunDirError, match=r"fedavg holds 2 seeds \(3, 7\); choose one with --seed"):
        geofl.load_model(run, method="fedavg")
    with pytest.raises(RunDirError, match=r"no method 'nope'; choose --method from: fedavg, other"):
        geofl.load_model(run, method="nope")
    assert geofl.load_model(run, "other").spec.method == "fedavg"  # a copy: same content
    assert geofl.load_model(run, "fedavg", 7).round >= 1


def test_old_run_without_model_json_is_one_line(ms_run: TrainedRun, tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(ms_run.run_dir, run)
    (seed_dir(run, "fedavg", 3) / MODEL_SPEC_FILE).unlink()
    with pytest.raises(RunDirError, match="written before geofl recorded") as info:
        geofl.load_model(run)
    assert "\n" not in str(info.value) and "geofl run" in str(info.value)


def test_damaged_files_are_one_line(ms_run: TrainedRun, tmp_path: Path) -> None:
    run = tmp_path / "bad"
    shutil.copytree(ms_run.run_dir, run)
    sdir = seed_dir(run, "fedavg", 3)
    spec = json.loads((sdir / MODEL_SPEC_FILE).read_text())
    spec["normalization"]["std"] = spec["normalization"]["std"][:2]
    (sdir / MODEL_SPEC_FILE).write_text(json.dumps(spec))
    with pytest.raises(RunDirError, match=r"model\.json: normalization: 4 means but 2 stds"):
        geofl.load_model(run)
    (sdir / MODEL_SPEC_FILE).write_text("{not json")
    with pytest.raises(RunDirError, match=r"model\.json cannot be read"):
        geofl.load_model(run)
    shutil.copy(seed_dir(ms_run.run_dir, "fedavg", 3) / MODEL_SPEC_FILE, sdir)
    (sdir / "best.pt").write_bytes(b"garbage")
    with pytest.raises(RunDirError, match=r"best\.pt is damaged"):
        geofl.load_model(run)
    with pytest.raises(RunDirError, match="not a geofl run directory"):
        geofl.load_model(tmp_path)


def test_ledger_free_resume_keeps_metrics_and_model_json(
    ms_run: TrainedRun, tmp_path: Path
) -> None:
    """Resuming a finished seed rewrites nothing; a killed one rewrites the same spec."""
    from geofl.engine.experiment import run_experiment

    run = tmp_path / "run"
    shutil.copytree(ms_run.run_dir, run)
    sdir = seed_dir(run, "fedavg", 3)
    before = (sdir / MODEL_SPEC_FILE).read_bytes()
    (sdir / "final.json").unlink()  # as if killed after the last checkpoint
    run_experiment(ms_run.cfg, run, resume=True)
    assert (sdir / MODEL_SPEC_FILE).read_bytes() == before
    assert json.loads((sdir / "final.json").read_text())["final"] == _final(ms_run)["final"]


def test_tabular_inputs_select_features_and_standardise() -> None:
    """``[B, F]`` features (a tabular dataset's model.json has no patch size)."""
    spec = ModelSpec.model_validate(
        {
            "geofl_version": "0",
            "method": "m",
            "seed": 1,
            "model": {"name": "mlp", "in_channels": 2, "num_outputs": 1},
            "task": {"name": "binary"},
            "classes": ["no", "yes"],
            "input": {"dataset": "tab", "dataset_bands": ["a", "b", "c"], "bands": ["c", "a"]},
            "normalization": {"kind": "standardize", "mean": [1.0, 2.0], "std": [2.0, 4.0]},
        }
    )
    net = torch.nn.Identity()
    model = GeoflModel(net, spec, round_idx=1, which="best")
    x = torch.tensor([[2.0, 5.0, 3.0], [0.0, 0.0, 1.0]])
    assert model.patch_size is None
    assert torch.equal(model(x), torch.tensor([[1.0, 0.0], [0.0, -0.5]]))
    assert torch.equal(model(x[:, [2, 0]]), model(x))
    with pytest.raises(geofl.errors.DataError, match=r"inputs must be \[B, F\]"):
        model(x[:, :, None, None])
