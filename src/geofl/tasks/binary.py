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

import functools
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator

from geofl.device import like
from geofl.errors import ConfigError
from geofl.tasks.base import TASKS, Direction, SplitMetrics, declare_metrics
from geofl.tasks.common import (
    TARGETS_FIELD,
    BatchStore,
    PosWeight,
    auto_pos_weight,
    describe,
    numpy_float,
    parse_pos_weight,
    require_tensor,
)
from geofl.tasks.scoring import roc_auc, roc_auc_1d

__all__ = [
    "BinaryAccumulator",
    "BinaryParams",
    "BinaryTask",
    "bce_total",
    "build_binary",
    "logit_cut",
]


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
        return output.reshape(-1)
    if output.ndim != 1:
        raise ValueError(f"binary task: model output must be [B, 1] or [B], got {output.shape}")
    return output


@functools.lru_cache(maxsize=64)
def logit_cut(threshold: float, dtype: torch.dtype = torch.float32) -> float:
    """The logit at or above which a sample is positive: σ(z) ≥ t ⟺ z ≥ log(t / (1 − t)).

    σ is increasing, so thresholding the logit is the rule itself, without rounding σ(z) to
    the logits' precision first (which moves samples within a rounding step of the cut).
    The cut is computed in float64 and, for float32 logits, rounded up to the next float32
    (a float32 z reaches the float64 cut exactly when it reaches that float32 value), so
    comparing it with a float32 tensor or array is exact.

    Args:
        threshold: t in (0, 1).
        dtype: The logits' dtype (float32 or float64).
    """
    cut = math.log(threshold / (1.0 - threshold))
    if dtype == torch.float64:
        return cut
    c32 = np.float32(cut)
    if float(c32) < cut:
        c32 = np.nextafter(c32, np.float32(np.inf))
    return float(c32)


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
        return F.binary_cross_entropy_with_logits(
            z, target.to(z.dtype), pos_weight=like(self.pos_weight, z)
        )

    def loss_sum(self, output: torch.Tensor, target: torch.Tensor) -> float:
        """Summed per-sample BCE-with-logits of a batch (the accumulator's loss is the sum
        of these over the batches, computed per split by :func:`bce_total`)."""
        with torch.no_grad():
            z = _logit(output)
            total = F.binary_cross_entropy_with_logits(
                z, target.to(z.dtype), pos_weight=like(self.pos_weight, z), reduction="sum"
            )
        return float(total)

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        """``[B]`` int64 labels: 1 where ``sigmoid(logit) ≥ threshold``, decided on the
        logit (:func:`logit_cut`)."""
        z = numpy_float(_logit(output))
        return (z >= logit_cut(self.threshold, z.dtype)).to(torch.int64)

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


def bce_total(terms: tuple[float, ...], pos_weight: float | None) -> float:
    """Summed BCE-with-logits of a split from its :func:`~geofl.tasks.kernels.binary_terms`.

    Per sample torch's ``binary_cross_entropy_with_logits`` computes

        ℓ = (1 − y)·z − w·log σ(z),    w = 1 + (p − 1)·y

    (ATen's ``Loss.cpp``; p = ``pos_weight``, 1 if None), so over a split

        Σℓ = Σz − Σ_{y=1} z − Σ log σ(z) − (p − 1)·Σ_{y=1} log σ(z).

    log σ is torch's kernel; the sums are float64 over the whole split, so the total does
    not depend on how the split was cut into batches (it agrees with the sum of per-batch
    float32 ``loss_sum`` calls to float32 rounding, ``tests/tasks/test_binary.py``).

    Args:
        terms: ``(Σz, Σ_{y=1} z, Σ log σ(z), Σ_{y=1} log σ(z), …)``.
        pos_weight: Weight p of the positive term, or None.
    """
    sum_z, pos_z, sum_ls, pos_ls = terms[:4]
    total = sum_z - pos_z - sum_ls
    if pos_weight is not None:
        total -= (pos_weight - 1.0) * pos_ls
    return total


class BinaryAccumulator:
    """Keeps a split's logits and labels (ROC-AUC ranks the whole split).

    It owns the loss (``owns_loss``): ``update`` only keeps the batch; once the pending
    batches hold :data:`~geofl.tasks.common.FLUSH_ENTRIES` logits (and in
    :meth:`compute`) they are reduced by one compiled call
    (:func:`~geofl.tasks.kernels.binary_terms`: the float64 sums of the BCE,
    :func:`bce_total`, and the confusion counts at the threshold, decided on the logit as
    :meth:`BinaryTask.predict` does, :func:`logit_cut`), and their logits and labels are
    kept as ``[n]`` logits and ``[n]`` bool (5 bytes per sample in float32, the memory exact
    ROC-AUC needs). :meth:`compute` then ranks the split once. Nothing follows the batches,
    so the metrics do not depend on the evaluation batch size (to the bit, below the flush
    size).

    Args:
        threshold: Sigmoid threshold of a positive prediction.
        pos_weight: ``[1]`` weight of the positive term of the loss, or None.
    """

    owns_loss = True

    def __init__(self, threshold: float, pos_weight: torch.Tensor | None = None) -> None:
        self.threshold = threshold
        self.pos_weight = pos_weight
        self._pos_weight = None if pos_weight is None else float(pos_weight)
        self._store = BatchStore(owns_loss=True)
        self._loss = 0.0
        self._counts = [0, 0, 0]  # TP, predicted positives, positives
        self._logits: list[torch.Tensor] = []
        self._truth: list[np.ndarray] = []

    def update(self, output: torch.Tensor, target: torch.Tensor, loss_sum: float | None) -> None:
        """Add a batch: ``[B, 1]``/``[B]`` logits, ``[B]`` labels (the loss is ignored)."""
        if self._store.add(output, target, None):
            self._reduce()

    def _reduce(self) -> None:
        """Sum the pending batches' loss and counts; keep their logits and labels."""
        from geofl.tasks.kernels import binary_terms

        outputs, targets = self._store.take()
        logits = numpy_float(_logit(outputs))
        truth = targets.numpy() != 0
        cut = logit_cut(self.threshold, logits.dtype)
        terms = binary_terms(logits.numpy(), F.logsigmoid(logits).numpy(), truth, cut)
        self._loss += bce_total(terms, self._pos_weight)
        self._counts = [a + int(b) for a, b in zip(self._counts, terms[4:], strict=True)]
        self._logits.append(logits)
        self._truth.append(truth)

    def compute(self) -> SplitMetrics:
        """ROC-AUC, F1, precision, recall, accuracy and mean loss of the split."""
        nan = float("nan")
        if self._store.n == 0:
            keys = ("roc_auc", "f1", "precision", "recall", "accuracy", "loss")
            return SplitMetrics(dict.fromkeys(keys, nan))
        if self._store.pending:
            self._reduce()
        if len(self._logits) > 1:
            self._logits, self._truth = [torch.cat(self._logits)], [np.concatenate(self._truth)]
        logits, truth = self._logits[0], self._truth[0]
        n = int(truth.size)
        tp, predicted, n_pos = self._counts
        fp, fn = predicted - tp, n_pos - tp
        auc = roc_auc_1d(logits.numpy(), truth)
        values = {
            "roc_auc": float(roc_auc(logits, torch.from_numpy(truth))) if auc is None else auc,
            # f1_from_counts' float64 arithmetic on three Python ints (same bits, no tensors)
            "f1": 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else nan,
            "precision": tp / (tp + fp) if tp + fp else nan,
            "recall": tp / n_pos if n_pos else nan,
            "accuracy": (n - fp - fn) / n,
            "loss": self._loss / n,
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
