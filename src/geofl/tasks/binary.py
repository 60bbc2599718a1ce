"""Binary classification with one logit (tabular features, paper 003).

Targets are ``[N]`` int64 in {0, 1}; the model emits one logit per sample (``[N, 1]`` or
``[N]``). The loss is BCE-with-logits, optionally with a positive-class weight; a sample is
predicted positive when its sigmoid reaches ``threshold``.

Metrics of a split (:class:`BinaryAccumulator`): ``roc_auc`` (primary, higher is better;
``sklearn.metrics.roc_auc_score`` semantics with ties counted ½,
:func:`geofl.tasks.scoring.roc_auc`), ``f1`` of the positive class, ``precision``,
``recall`` and ``accuracy`` at the threshold, and the mean ``loss``. A split with one class
only has no ROC curve: ``roc_auc`` is NaN and :attr:`SplitMetrics.notes` says so; F1 is
NaN when there are neither positives nor predicted positives (``zero_division=np.nan``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator

from geofl.errors import ConfigError
from geofl.tasks.base import TASKS, Direction, SplitMetrics, declare_metrics
from geofl.tasks.common import (
    TARGETS_FIELD,
    BatchStore,
    PosWeight,
    auto_pos_weight,
    describe,
    parse_pos_weight,
    require_tensor,
)
from geofl.tasks.scoring import roc_auc

__all__ = ["BinaryAccumulator", "BinaryParams", "BinaryTask", "bce_sums", "build_binary"]


class BinaryParams(BaseModel):
    """Parameters of the ``binary`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(0.5, gt=0, lt=1, description="positive when sigmoid ≥ this")
    pos_weight: PosWeight = Field(
        "none",
        description="BCE positive-class weight: 'none', 'auto' (n_neg/n_pos of the training "
        "targets, clipped to pos_weight_max) or a positive number",
    )
    pos_weight_max: float = Field(100.0, ge=1, description="upper clip of the 'auto' weight")

    @field_validator("pos_weight", mode="before")
    @classmethod
    def _pos_weight(cls, value: Any) -> PosWeight:
        return parse_pos_weight(value, allow_list=False)


def _logit(output: torch.Tensor) -> torch.Tensor:
    """``[B]`` logits from ``[B, 1]`` or ``[B]`` model output."""
    if output.ndim == 2 and output.shape[1] == 1:
        return output[:, 0]
    if output.ndim != 1:
        raise ValueError(f"binary task: model output must be [B, 1] or [B], got {output.shape}")
    return output


class BinaryTask:
    """One logit, sigmoid + BCE-with-logits (see the module docstring).

    Args:
        threshold: Sigmoid threshold of a positive prediction.
        pos_weight: ``[1]`` weight of the positive term of the loss, or None.
    """

    name = "binary"
    primary_metric = "roc_auc"
    direction: Direction = "max"
    num_outputs = 1
    model_takes_targets = False

    def __init__(self, threshold: float = 0.5, pos_weight: torch.Tensor | None = None) -> None:
        self.threshold = threshold
        self.pos_weight = pos_weight

    def check_targets(self, targets: Any) -> None:
        """Refuse targets this task cannot learn from, with a one-line error.

        Accepts ``[N]`` integer (or bool) labels in {0, 1}.

        Raises:
            ConfigError: under ``task.name``, e.g. "float targets [N] float32 given to the
                binary task; …".
        """
        t = require_tensor(self.name, targets)
        if t.ndim != 1:
            raise ConfigError(
                TARGETS_FIELD,
                f"targets {describe(t)} given to the binary task, which needs [N] 0/1 labels; "
                "use task multilabel for multi-hot targets",
            )
        if t.is_floating_point():
            raise ConfigError(
                TARGETS_FIELD,
                f"real-valued targets {describe(t)} given to the binary task; use task "
                "regression, or give int64 0/1 labels",
            )
        if t.numel() and not bool(((t == 0) | (t == 1)).all()):
            raise ConfigError(
                TARGETS_FIELD,
                f"labels outside {{0, 1}} (range {int(t.min())}..{int(t.max())}) given to the "
                "binary task; use task classification for more than two classes",
            )

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean BCE-with-logits over the batch."""
        z = _logit(output)
        return F.binary_cross_entropy_with_logits(z, target.to(z.dtype), pos_weight=self.pos_weight)

    def loss_sum(self, output: torch.Tensor, target: torch.Tensor) -> float:
        """Summed per-sample BCE-with-logits of a batch (the accumulator's loss is the sum
        of these over the batches, computed per split by :func:`bce_sums`)."""
        with torch.no_grad():
            z = _logit(output)
            total = F.binary_cross_entropy_with_logits(
                z, target.to(z.dtype), pos_weight=self.pos_weight, reduction="sum"
            )
        return float(total)

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64 labels: 1 where ``sigmoid(logit) ≥ threshold``."""
        return (torch.sigmoid(_logit(output)) >= self.threshold).to(torch.int64)

    def accumulator(self) -> BinaryAccumulator:
        """A fresh accumulator for one split."""
        return BinaryAccumulator(self.threshold, self.pos_weight)

    def label_summary(self, targets: torch.Tensor) -> np.ndarray:
        """``[2]`` int64: ``[n0, n1]``."""
        counts: np.ndarray = torch.bincount(targets.to(torch.int64), minlength=2).numpy()
        return counts

    def collate(self, targets: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``targets[index]``."""
        return targets[index]

    def fitted_state(self) -> dict[str, Any]:
        """Nothing is fitted on the train split."""
        return {}


def bce_sums(
    logits: torch.Tensor, targets: torch.Tensor, sizes: list[int], pos_weight: torch.Tensor | None
) -> float:
    """Σ over consecutive blocks of ``sizes`` samples of each block's summed BCE-with-logits.

    Equal to the in-order sum of ``binary_cross_entropy_with_logits(block, reduction="sum")``
    per block, to the bit, in two operations per block: torch computes that loss as

        ℓ = (1 − y)·z − log σ(z)·((p − 1)·y + 1)        (p: ``pos_weight``, 1 if None)

    (``binary_cross_entropy_with_logits`` in ATen's ``Loss.cpp``), whose only
    transcendental part, log σ, runs per block, as a batch's own call runs it (a
    vectorised kernel can round its tail elements differently from its body); the
    products and differences are IEEE operations, exact whatever the blocking, so they run
    once on the whole split; each block's float32 sum is then that of the batch.
    ``tests/tasks/test_binary.py`` checks the equality against per-batch
    :meth:`BinaryTask.loss_sum` (torch's own call).

    Args:
        logits: ``[N]`` logits.
        targets: ``[N]`` 0/1 labels in the logits' dtype.
        sizes: Block sizes, summing to N.
        pos_weight: ``[1]`` weight of the positive term, or None.
    """
    with torch.no_grad():
        log_sig = torch.cat([F.logsigmoid(block) for block in torch.split(logits, sizes)])
        if pos_weight is not None:
            log_sig.mul_((pos_weight - 1).mul(targets).add_(1))
        loss = (1 - targets).mul_(logits).sub_(log_sig)
        block_sums = [block.sum() for block in torch.split(loss, sizes)]
    total = 0.0
    for value in torch.stack(block_sums).tolist():
        total += value
    return total


class BinaryAccumulator:
    """Keeps a split's logits and labels (ROC-AUC ranks the whole split).

    It owns the loss (``owns_loss``): ``update`` only keeps the batch, and :meth:`compute`
    sums the BCE of each batch's block of the concatenated split (:func:`bce_sums`) — the
    value per-batch ``loss_sum`` calls give, at a fraction of their per-batch cost.

    Args:
        threshold: Sigmoid threshold of a positive prediction.
        pos_weight: ``[1]`` weight of the positive term of the loss, or None.
    """

    owns_loss = True

    def __init__(self, threshold: float, pos_weight: torch.Tensor | None = None) -> None:
        self.threshold = threshold
        self.pos_weight = pos_weight
        self._store = BatchStore(owns_loss=True)

    def update(self, output: torch.Tensor, target: torch.Tensor, loss_sum: float | None) -> None:
        """Add a batch: ``[B, 1]``/``[B]`` logits, ``[B]`` labels (the loss is ignored)."""
        self._store.add(output, target, loss_sum)

    def compute(self) -> SplitMetrics:
        """ROC-AUC, F1, precision, recall, accuracy and mean loss of the split."""
        nan = float("nan")
        keys = ("roc_auc", "f1", "precision", "recall", "accuracy")
        if self._store.n == 0:
            return SplitMetrics({**dict.fromkeys(keys, nan), "loss": nan})
        outputs, targets = self._store.tensors()
        logits = _logit(outputs)
        loss_sum = bce_sums(logits, targets.to(logits.dtype), self._store.sizes, self.pos_weight)
        truth = targets != 0
        pred = torch.sigmoid(logits) >= self.threshold
        truth_np, pred_np = truth.numpy(), pred.numpy()
        n, n_pos = int(truth_np.size), int(np.count_nonzero(truth_np))
        tp = int(np.count_nonzero(truth_np & pred_np))
        fp, fn = int(np.count_nonzero(pred_np)) - tp, n_pos - tp
        values = {
            "roc_auc": float(roc_auc(logits, truth)),
            # f1_from_counts' float64 arithmetic on three Python ints (same bits, no tensors)
            "f1": 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else nan,
            "precision": tp / (tp + fp) if tp + fp else nan,
            "recall": tp / n_pos if n_pos else nan,
            "accuracy": (n - fp - fn) / n,
            "loss": loss_sum / n,
        }
        notes: tuple[str, ...] = ()
        if n_pos in (0, n):
            notes = (
                f"only class {int(n_pos == n)} in this split ({n} samples): "
                "ROC-AUC undefined (NaN)",
            )
        return SplitMetrics(values, {}, n, notes)


declare_metrics(
    "binary",
    {
        "roc_auc": "max",
        "f1": "max",
        "precision": "max",
        "recall": "max",
        "accuracy": "max",
        "loss": "min",
    },
)


@TASKS.register("binary", params=BinaryParams)
def build_binary(
    params: BinaryParams, *, num_classes: int, train_targets: torch.Tensor
) -> BinaryTask:
    """Binary classification with one logit: BCE, ROC-AUC / F1 / accuracy."""
    if num_classes > 2:
        raise ConfigError(
            TARGETS_FIELD,
            f"the binary task needs 2 classes, the dataset has {num_classes}; "
            "use task classification",
        )
    task = BinaryTask(params.threshold)
    task.check_targets(train_targets)
    pw = params.pos_weight
    if pw == "auto":
        n_pos = (train_targets != 0).sum().reshape(1)
        task.pos_weight = auto_pos_weight(n_pos, train_targets.shape[0], params.pos_weight_max)
    elif isinstance(pw, float):
        task.pos_weight = torch.tensor([pw], dtype=torch.float32)
    return task
