"""The multilabel task: loss, positive weights, metrics against scikit-learn, bad targets."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, f1_score
from tests.tasks.helpers import assert_same_metrics

from geofl.errors import ConfigError
from geofl.tasks import TASKS
from geofl.tasks.multilabel import MultilabelTask


def _build(targets: torch.Tensor, **params: object) -> MultilabelTask:
    task = TASKS.build("multilabel", params, num_classes=targets.shape[1], train_targets=targets)
    assert isinstance(task, MultilabelTask)
    return task


TRAIN = torch.tensor(
    [[1, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1]], dtype=torch.float32
)  # class 0: 1 of 5 positive; class 1: none; class 2: all


def test_auto_pos_weight_by_hand() -> None:
    # class 0: n_neg / n_pos = 4 / 1; class 1 (no positives) and class 2 (no negatives): 1
    assert _build(TRAIN, pos_weight="auto").pos_weight.tolist() == [4.0, 1.0, 1.0]
    clipped = _build(TRAIN, pos_weight="auto", pos_weight_max=3.0).pos_weight
    assert clipped.tolist() == [3.0, 1.0, 1.0]
    assert _build(TRAIN, pos_weight=[1, 2.5, 3]).pos_weight.tolist() == [1.0, 2.5, 3.0]
    assert _build(TRAIN, pos_weight=2).pos_weight.tolist() == [2.0, 2.0, 2.0]
    assert _build(TRAIN).pos_weight is None


def test_loss_is_weighted_bce_by_hand() -> None:
    task = _build(TRAIN, pos_weight=[2.0, 1.0, 1.0])
    out = torch.tensor([[0.0, 1.0, -1.0]])
    y = torch.tensor([[1.0, 0.0, 1.0]])
    sig = torch.sigmoid(out)
    # −[w·y·log σ(x) + (1 − y)·log(1 − σ(x))], mean over the 3 entries
    ref = -(2 * math.log(0.5) + math.log(1 - float(sig[0, 1])) + math.log(float(sig[0, 2]))) / 3
    assert float(task.loss(out, y)) == pytest.approx(ref)
    assert task.loss_sum(out.repeat(4, 1), y.repeat(4, 1)) == pytest.approx(4 * ref)


def test_predict_thresholds_the_sigmoid() -> None:
    task = _build(TRAIN, threshold=0.7)
    out = torch.tensor([[math.log(0.7 / 0.3) + 1e-4, 0.0, 5.0]])
    assert task.predict(out).tolist() == [[1.0, 0.0, 1.0]]


def _sklearn_reference(
    logits: np.ndarray, targets: np.ndarray, threshold: float
) -> dict[str, object]:
    present = targets.sum(0) > 0
    pred = (1 / (1 + np.exp(-logits))) >= threshold
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ap = average_precision_score(targets[:, present], logits[:, present], average=None)
        return {
            "map": float(np.mean(ap)),
            "micro_f1": f1_score(targets, pred, average="micro", zero_division=np.nan),
            "macro_f1": f1_score(targets, pred, labels=np.flatnonzero(present), average="macro"),
            "f1": f1_score(targets, pred, average=None, zero_division=np.nan),
        }


@pytest.mark.parametrize("seed", range(15))
def test_metrics_match_sklearn_over_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(8, 120)), int(rng.integers(2, 9))
    prevalence = rng.random(c) * 0.5
    prevalence[rng.integers(0, c)] = 0.0  # at least one class without positives
    targets = (rng.random((n, c)) < prevalence).astype(np.float32)
    logits = np.round(rng.normal(size=(n, c)) * 2, 1).astype(np.float32)  # ties
    task = _build(torch.from_numpy(targets), threshold=0.4)
    out, y = torch.from_numpy(logits), torch.from_numpy(targets)

    acc = task.accumulator()
    for idx in torch.tensor_split(torch.arange(n), 4):
        acc.update(out[idx], y[idx], task.loss_sum(out[idx], y[idx]))
    got = acc.compute()
    whole = task.accumulator()
    whole.update(out, y, task.loss_sum(out, y))
    assert_same_metrics(got, whole.compute())  # several batches == one batch

    ref = _sklearn_reference(logits, targets, 0.4)
    for key in ("map", "micro_f1", "macro_f1"):
        assert got[key] == pytest.approx(ref[key]), key
    np.testing.assert_allclose(got.per_class["f1"], ref["f1"], equal_nan=True)
    assert got["loss"] == pytest.approx(float(task.loss(out, y)), rel=1e-5)
    absent = np.flatnonzero(targets.sum(0) == 0)
    assert np.isnan(np.asarray(got.per_class["ap"])[absent]).all()
    assert got.notes and f"{len(absent)} of {c} classes without positives" in got.notes[0]
    assert got.n == n


def test_small_split_by_hand() -> None:
    task = _build(torch.eye(2))
    y = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    out = torch.tensor([[2.0, -1.0], [1.0, 1.0], [-1.0, -2.0]])  # class 1: one false alarm
    acc = task.accumulator()
    acc.update(out, y, 0.0)
    m = acc.compute()
    # class 0: ranking + (2), − (1), + (−1) → AP = (1/2)(1 + 2/3); F1: TP 1, FP 1, FN 1 → 1/2
    assert m["map"] == pytest.approx(5 / 6)
    assert m["macro_f1"] == pytest.approx(0.5)
    # micro: TP 1, FP 2, FN 1 → 2 / (2 + 2 + 1)
    assert m["micro_f1"] == pytest.approx(0.4)
    assert m.per_class["f1"][1] == 0.0 and math.isnan(m.per_class["ap"][1])
    assert m.per_class["support"] == [2.0, 0.0]
    assert "(class 1)" in m.notes[0]


def test_empty_split_and_label_summary() -> None:
    task = _build(TRAIN)
    assert all(math.isnan(v) for v in task.accumulator().compute().values.values())
    assert task.label_summary(TRAIN).tolist() == [1, 0, 5]
    assert task.collate(TRAIN, torch.tensor([4, 0])).tolist() == [[0, 0, 1], [1, 0, 1]]


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (torch.tensor([0, 2, 1]), "single-label targets [N] int64 given to the multilabel task"),
        (torch.zeros(4, 17), "targets [N, 17] float32 do not match the multilabel task's 3"),
        (torch.zeros(4, 3, dtype=torch.int64), "multi-hot targets must be float 0/1"),
        (torch.full((4, 3), 0.5), "values other than 0 and 1"),
        ([[0, 1, 0]], "needs a target tensor with one row per sample, got list"),
    ],
)
def test_bad_targets_are_refused_in_one_line(targets: object, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        _build(TRAIN).check_targets(targets)
    assert err.value.path == "task.name"
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_parameters() -> None:
    with pytest.raises(ConfigError, match="pos_weight 'sometimes' is not valid"):
        TASKS.validate("multilabel", {"pos_weight": "sometimes"})
    with pytest.raises(ConfigError, match="pos_weight"):
        TASKS.validate("multilabel", {"pos_weight": [1.0, -2.0]})
    with pytest.raises(ConfigError, match="unknown field"):
        TASKS.validate("multilabel", {"treshold": 0.3})
    with pytest.raises(ConfigError, match="3 classes; give one per class") as err:
        _build(TRAIN, pos_weight=[1.0, 2.0])
    assert err.value.path == "task.params.pos_weight"
