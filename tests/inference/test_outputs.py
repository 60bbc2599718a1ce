"""Prediction columns per task (``geofl predict``'s CSV layout) on hand-made outputs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from geofl.errors import RunDirError
from geofl.inference.outputs import prediction_columns
from geofl.models.spec import ModelSpec


def _spec(task: dict[str, Any], classes: tuple[str, ...] = ("a", "b", "c")) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "geofl_version": "0",
            "method": "m",
            "seed": 1,
            "model": {"name": "small_cnn", "in_channels": 1, "num_outputs": max(len(classes), 2)},
            "task": task,
            "classes": classes,
            "input": {"dataset": "x", "dataset_bands": ["g"], "bands": ["g"], "patch_size": [4, 4]},
            "normalization": {"kind": "none"},
        }
    )


def test_classification_argmax_and_probabilities() -> None:
    out = torch.tensor([[0.0, 2.0, 1.0], [5.0, 5.0, -1.0]])
    cols = prediction_columns(out, _spec({"name": "classification"}))
    assert cols.prediction == ["b", "a"]  # a tie goes to the first class, as in evaluation
    assert cols.names == ["prob:a", "prob:b", "prob:c"]
    torch.testing.assert_close(cols.values, torch.softmax(out, 1))


def test_multilabel_threshold_from_task_params() -> None:
    out = torch.tensor([[2.0, -2.0, 0.1], [-3.0, -3.0, -3.0]])
    cols = prediction_columns(out, _spec({"name": "multilabel", "params": {"threshold": 0.55}}))
    assert cols.prediction == ["a", ""] and cols.names == ["score:a", "score:b", "score:c"]
    torch.testing.assert_close(cols.values, torch.sigmoid(out))


def test_regression_undoes_the_recorded_standardisation() -> None:
    spec = _spec(
        {
            "name": "regression",
            "params": {"targets": ["height", "age"]},
            "state": {"target_mean": [10.0, 1.0], "target_std": [2.0, 0.5]},
        },
        classes=(),
    )
    cols = prediction_columns(torch.tensor([[1.0, -2.0]]), spec)
    assert cols.names == ["value:height", "value:age"] and cols.prediction == ["12;0"]
    torch.testing.assert_close(cols.values, torch.tensor([[12.0, 0.0]]))


def test_unknown_task_is_one_line() -> None:
    with pytest.raises(RunDirError, match="task 'detection' has no prediction columns"):
        prediction_columns(torch.zeros(1, 3), _spec({"name": "detection"}))
