"""The binary task: one logit, positive weight, metrics against scikit-learn, bad targets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from tests.tasks.helpers import assert_same_metrics

from geofl.errors import ConfigError, RegistryError
from geofl.tasks import TASKS, common
from geofl.tasks.binary import BinaryTask, build_binary, logit_cut

TRAIN = torch.tensor([0, 0, 1, 0])


def _build(targets: torch.Tensor = TRAIN, **params: object) -> BinaryTask:
    task = TASKS.build("binary", params, num_classes=2, train_targets=targets)
    assert isinstance(task, BinaryTask)
    return task


def test_pos_weight_by_hand_and_weighted_loss() -> None:
    assert _build(pos_weight="auto").pos_weight.tolist() == [3.0]
    assert _build(pos_weight="auto", pos_weight_max=2).pos_weight.tolist() == [2.0]
    assert _build(torch.tensor([1, 1]), pos_weight="auto").pos_weight.tolist() == [1.0]
    task = _build(pos_weight=3.0)
    out, y = torch.tensor([[0.0], [0.0]]), torch.tensor([1, 0])
    # positive: −3·log ½; negative: −log ½; mean of the two
    assert float(task.loss(out, y)) == pytest.approx(2 * math.log(2))
    assert task.loss_sum(out[:, 0], y) == pytest.approx(4 * math.log(2))  # [B] output too


def test_predict_and_label_summary() -> None:
    task = _build(threshold=0.3)
    out = torch.tensor([[math.log(0.3 / 0.7) - 1e-4], [math.log(0.3 / 0.7) + 1e-4], [4.0]])
    assert task.predict(out).tolist() == [0, 1, 1]
    assert task.predict(out).dtype == torch.int64
    assert task.label_summary(TRAIN).tolist() == [3, 1]
    assert task.num_outputs == 1


@pytest.mark.parametrize("seed", range(15))
def test_metrics_match_sklearn_over_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 150))
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(np.int64)
    y[:2] = [0, 1]  # both classes present
    logits = np.round(rng.normal(size=n) + y * rng.uniform(0, 2), int(rng.integers(0, 2)))
    task = _build(torch.from_numpy(y), threshold=0.6)
    out, target = torch.from_numpy(logits).float()[:, None], torch.from_numpy(y)

    acc = task.accumulator()
    for idx in torch.tensor_split(torch.arange(n), 5):
        acc.update(out[idx], target[idx], task.loss_sum(out[idx], target[idx]))
    got = acc.compute()
    whole = task.accumulator()
    whole.update(out, target, task.loss_sum(out, target))
    assert_same_metrics(got, whole.compute())

    pred = 1 / (1 + np.exp(-out[:, 0].numpy())) >= 0.6
    assert got["roc_auc"] == pytest.approx(roc_auc_score(y, logits))
    assert got["f1"] == pytest.approx(f1_score(y, pred, zero_division=np.nan), nan_ok=True)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, pred))
    assert got["loss"] == pytest.approx(float(task.loss(out, target)), rel=1e-5)
    assert got.notes == ()


def test_one_class_split_perfect_and_inverted() -> None:
    task = _build()
    acc = task.accumulator()
    acc.update(torch.tensor([1.0, -1.0]), torch.tensor([0, 0]), 0.0)
    m = acc.compute()
    assert math.isnan(m["roc_auc"]) and math.isnan(m["recall"])
    assert m["f1"] == 0.0 and m["accuracy"] == 0.5  # one false alarm
    assert m.notes == ("only class 0 in this split (2 samples): ROC-AUC undefined (NaN)",)
    y = torch.tensor([0, 0, 1, 1])
    for sign, auc in ((1.0, 1.0), (-1.0, 0.0)):
        acc = task.accumulator()
        acc.update(sign * torch.tensor([-2.0, -1.0, 1.0, 2.0]), y, 0.0)
        assert acc.compute()["roc_auc"] == auc
        assert acc.compute()["accuracy"] == auc
    acc = task.accumulator()
    acc.update(torch.zeros(4), y, 0.0)  # all scores equal
    assert acc.compute()["roc_auc"] == 0.5


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (torch.tensor([0.0, 1.0]), "real-valued targets [N] float32 given to the binary task"),
        (torch.zeros(3, 4, dtype=torch.int64), "targets [N, 4] int64 given to the binary task"),
        (torch.tensor([0, 1, 4]), "labels outside {0, 1} (range 0..4)"),
    ],
)
def test_bad_targets_are_refused_in_one_line(targets: torch.Tensor, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _build().check_targets(targets)
    assert err.value.path == "task.name" and message in str(err.value)


def test_builder_and_registry_checks() -> None:
    with pytest.raises(ConfigError, match="needs 2 classes, the dataset has 10"):
        TASKS.build("binary", {}, num_classes=10, train_targets=TRAIN)
    with pytest.raises(ConfigError, match="pos_weight"):
        TASKS.validate("binary", {"pos_weight": [1.0]})  # lists are for multilabel
    with pytest.raises(RegistryError, match="already registered"):
        TASKS.register("binary")(build_binary)
    assert {"binary", "multilabel", "regression"} <= set(TASKS)


@pytest.mark.parametrize("flush", [None, 300])
@pytest.mark.parametrize("pos_weight", ["none", 2.7, 0.3])
@pytest.mark.parametrize(
    "sizes", [[256, 256, 100], [64, 1, 63, 4096], [7], [33] * 9 + [5], [4096] * 9 + [999]]
)
def test_accumulator_owns_the_loss_equal_to_per_batch_loss_sum(
    sizes: list[int], pos_weight: object, flush: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The split's loss is the sum of each batch's ``loss_sum`` (torch's float32
    ``binary_cross_entropy_with_logits``) to float32 rounding, summed in float64 once over
    the split (saturated, zero and large negative logits; with ``flush``, pending batches
    reduced every 300 logits); a loss given to ``update`` is ignored; a NaN logit makes
    the loss NaN."""
    if flush is not None:
        monkeypatch.setattr(common, "FLUSH_ENTRIES", flush)
    gen = torch.Generator().manual_seed(sum(sizes))
    task = _build(pos_weight=pos_weight)
    batches = [
        (torch.randn(b, 1, generator=gen) * 8, (torch.rand(b, generator=gen) < 0.3).long())
        for b in sizes
    ]
    batches[0][0][::3] = 0.0
    batches[0][0][1::5] = 110.0
    batches[-1][0][::4] = -95.0
    acc = task.accumulator()
    assert acc.owns_loss
    want = 0.0
    for out, y in batches:
        acc.update(out, y, 1e9)
        want += task.loss_sum(out, y)
    got = acc.compute()["loss"]
    assert got == pytest.approx(want / sum(sizes), rel=1e-5)
    # float64 reference: the per-sample losses of torch's own call, summed in float64
    logits, labels = torch.cat([o for o, _ in batches])[:, 0], torch.cat([y for _, y in batches])
    per_sample = torch.nn.functional.binary_cross_entropy_with_logits(
        logits.double(), labels.double(), pos_weight=task.pos_weight, reduction="none"
    )
    assert got == pytest.approx(float(per_sample.sum()) / sum(sizes), rel=1e-6)
    nan_acc = task.accumulator()
    bad = batches[-1][0].clone()
    bad[1] = math.nan
    nan_acc.update(bad, batches[-1][1], None)
    assert math.isnan(nan_acc.compute()["loss"])


@pytest.mark.parametrize("seed", range(6))
def test_metrics_do_not_depend_on_the_evaluation_batch_size(seed: int) -> None:
    """The split's logits are reduced together: the same metrics, to the bit, however the
    split is cut into batches (under the flush size)."""
    gen = torch.Generator().manual_seed(seed)
    task = _build(pos_weight=2.0)
    out, y = torch.randn(1000, 1, generator=gen) * 3, (torch.rand(1000, generator=gen) < 0.4).long()
    got = []
    for size in (1000, 256, 7):
        acc = task.accumulator()
        for o, t in zip(out.split(size), y.split(size), strict=True):
            acc.update(o, t, None)
        got.append(acc.compute().values)
    assert got[0] == got[1] == got[2]


@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.9, 0.123456789])
def test_threshold_on_the_logit_is_exact(threshold: float) -> None:
    """``logit_cut``: a float32 logit is positive exactly when, in float64, it reaches
    log(t / (1 − t)) (checked on the float32 neighbours of the cut), and the accumulator's
    predictions are ``BinaryTask.predict``'s."""
    cut64 = math.log(threshold / (1 - threshold))
    c32 = logit_cut(threshold)
    assert np.float32(c32) == c32 and c32 >= cut64
    below = float(np.nextafter(np.float32(c32), np.float32(-np.inf)))
    assert below < cut64
    assert logit_cut(threshold, torch.float64) == cut64
    task = _build(threshold=threshold)
    z = torch.tensor([below, c32, float(np.nextafter(np.float32(c32), np.float32(np.inf)))])
    assert task.predict(z[:, None]).tolist() == [0, 1, 1]
    acc = task.accumulator()
    acc.update(z[:, None], torch.tensor([0, 1, 1]), None)
    assert acc.compute()["accuracy"] == 1.0
