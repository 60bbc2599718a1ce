"""Single-label classification: cross-entropy, argmax, confusion-matrix metrics.

Today's (paper 000) task, and the default: every preset and YAML without a ``task`` section
runs it. Its numbers are bit-identical to the classification code it replaced: the loss is
``F.cross_entropy`` on the same batches, the evaluation sums per-batch summed losses in the
same order, and every split metric derives from one ``[C, C]`` confusion matrix
(:func:`~geofl.tasks.metrics.metrics_from_confusion`).

Targets: ``[N]`` int64 class ids in ``[0, C)``; model output: ``[N, C]`` logits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from geofl.errors import ConfigError
from geofl.registry import NoParams
from geofl.tasks.base import (
    TASKS,
    Direction,
    SplitMetrics,
    Task,
    declare_metrics,
    declare_whole_sample_labels,
)
from geofl.tasks.common import batch_loss
from geofl.tasks.metrics import confusion_matrix, metrics_from_confusion

__all__ = ["ClassificationTask", "ConfusionAccumulator", "check_class_targets"]


class ConfusionAccumulator:
    """Accumulates a ``[C, C]`` confusion matrix and the summed loss of a split.

    Args:
        num_classes: C.
    """

    owns_loss = False

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.cm = torch.zeros(num_classes, num_classes, dtype=torch.long)
        self.loss_sum = 0.0

    def update(self, output: torch.Tensor, target: Any, loss_sum: float | None) -> None:
        """Add a batch: ``output`` ``[B, C]`` logits, ``target`` ``[B]`` int64 class ids."""
        self.cm += confusion_matrix(target, output.argmax(dim=1), self.num_classes)
        self.loss_sum += batch_loss(loss_sum)

    def compute(self) -> SplitMetrics:
        """``accuracy``, ``macro_f1``, ``loss`` and per-class ``accuracy`` (recall; NaN for
        classes without samples in the split)."""
        m = metrics_from_confusion(self.cm, self.loss_sum)
        return SplitMetrics(
            values={"accuracy": m["accuracy"], "macro_f1": m["macro_f1"], "loss": m["loss"]},
            per_class={"accuracy": m["per_class_accuracy"]},
            n=m["n"],
        )


def check_class_targets(targets: torch.Tensor, num_classes: int, *, task: str) -> None:
    """Refuse targets a single-label classifier cannot learn.

    Args:
        targets: The training targets (``[N]`` int64 class ids expected).
        num_classes: C, the number of class names of the dataset.
        task: The task's name, for the message.

    Raises:
        ConfigError: naming ``task.name``: multi-hot ``[N, C]`` targets, real-valued
            targets, or class ids outside ``[0, C)``.
    """
    shape = "x".join(str(s) for s in targets.shape)
    if targets.ndim != 1:
        raise ConfigError(
            "task.name",
            f"{task} needs one class id per sample, but the dataset's targets are [{shape}] "
            f"{_dtype(targets)} (multi-hot or multi-output); use task: {{name: multilabel}} "
            "for multi-hot targets or {name: regression} for real values",
        )
    if targets.dtype.is_floating_point or targets.dtype == torch.bool:
        raise ConfigError(
            "task.name",
            f"{task} needs int64 class ids, but the dataset's targets are {_dtype(targets)} "
            "values; use task: {name: regression} for real-valued targets",
        )
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= num_classes):
        raise ConfigError(
            "task.name",
            f"{task} needs class ids in [0, {num_classes}), but the targets span "
            f"[{int(targets.min())}, {int(targets.max())}]; check the dataset's classes",
        )


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class ClassificationTask:
    """Cross-entropy on ``[B, C]`` logits, argmax prediction, accuracy as primary metric.

    Args:
        num_classes: C, the width of the model's output layer.
    """

    name = "classification"
    primary_metric = "accuracy"
    direction: Direction = "max"
    model_takes_targets = False

    def __init__(self, num_classes: int) -> None:
        self.num_outputs = num_classes

    def loss(self, output: torch.Tensor, target: Any) -> torch.Tensor:
        """Mean cross-entropy of ``output`` ``[B, C]`` against ``target`` ``[B]``."""
        return F.cross_entropy(output, target)

    def loss_sum(self, output: torch.Tensor, target: Any) -> float:
        """Summed cross-entropy of a batch (evaluation; call under no-grad)."""
        return float(F.cross_entropy(output, target, reduction="sum"))

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64 class ids from ``[B, C]`` logits."""
        return output.argmax(dim=1)

    def whole_sample_targets(self, labels: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """The labels themselves (``[n]`` int64)."""
        return labels

    def whole_sample_labels(self, output: torch.Tensor) -> torch.Tensor:
        """``[n]`` argmax of ``[n, C]`` logits (never C: a classifier always picks one)."""
        return output.argmax(dim=1)

    def accumulator(self) -> ConfusionAccumulator:
        """A fresh confusion-matrix accumulator."""
        return ConfusionAccumulator(self.num_outputs)

    def label_summary(self, targets: Any) -> np.ndarray:
        """``[C]`` int64 class counts of ``targets`` (``[N]`` class ids)."""
        ids = np.asarray(targets.numpy() if isinstance(targets, torch.Tensor) else targets)
        return np.bincount(ids, minlength=self.num_outputs).astype(np.int64)

    def collate(self, targets: Any, index: torch.Tensor) -> Any:
        """``targets[index]``."""
        return targets[index]

    def fitted_state(self) -> dict[str, Any]:
        """Nothing is fitted on the train split."""
        return {}


declare_metrics("classification", {"accuracy": "max", "macro_f1": "max", "loss": "min"})
declare_whole_sample_labels("classification")


@TASKS.register("classification", params=NoParams)
def build_classification(_: NoParams, *, num_classes: int, train_targets: Any) -> Task:
    """Single-label classification: cross-entropy, accuracy / macro-F1 (000 §4.1)."""
    check_class_targets(torch.as_tensor(train_targets), num_classes, task="classification")
    return ClassificationTask(num_classes)
