"""Multi-label classification: each sample carries any subset of C labels.

Targets are ``[N, C]`` float32 multi-hot vectors, the model emits ``[N, C]`` logits, one
independent sigmoid per class (BigEarthNet-style land-cover labels; paper 001). The loss is
BCE-with-logits averaged over the N·C entries, optionally with positive-class weights; a
label is predicted when its sigmoid reaches ``threshold``.

Metrics of a split (:class:`MultilabelAccumulator`):

* ``map`` (primary, higher is better): macro average precision over the classes with at
  least one positive in the split, AP as ``sklearn.metrics.average_precision_score``
  (ties included, :func:`geofl.tasks.scoring.average_precision`);
* ``micro_f1``: F1 of the TP/FP/FN counts pooled over all classes and samples;
* ``macro_f1``: mean per-class F1 over the same classes as ``map``;
* per class: ``ap``, ``f1`` and ``support`` (positives in the split).

Classes without positives in a split have no recall, so AP and F1 are undefined for them:
their ``ap`` is NaN, their ``f1`` is 0 if the model predicted them (pure false alarms) and
NaN otherwise (``f1_score(..., average=None, zero_division=np.nan)``), they are left out of
``map`` and ``macro_f1`` (``average="macro"`` over ``labels`` = the classes with positives),
their false alarms still count in ``micro_f1``, and :attr:`SplitMetrics.notes` names them.
"""

from __future__ import annotations

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
    parse_pos_weight,
    require_tensor,
)
from geofl.tasks.scoring import average_precision, f1_from_counts

__all__ = ["MultilabelAccumulator", "MultilabelParams", "MultilabelTask", "build_multilabel"]


class MultilabelParams(BaseModel):
    """Parameters of the ``multilabel`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(
        0.5, gt=0, lt=1, description="a label is predicted when its sigmoid is ≥ this"
    )
    pos_weight: PosWeight = Field(
        "none",
        description="BCE positive-class weights: 'none', 'auto' (n_neg/n_pos per class from "
        "the training targets, clipped to pos_weight_max), a number, or one number per class",
    )
    pos_weight_max: float = Field(
        100.0, ge=1, description="upper clip of the 'auto' weights (one positive in 10⁵ …)"
    )

    @field_validator("pos_weight", mode="before")
    @classmethod
    def _pos_weight(cls, value: Any) -> PosWeight:
        return parse_pos_weight(value, allow_list=True)


class MultilabelTask:
    """Sigmoid + BCE-with-logits over C independent labels (see the module docstring).

    Args:
        num_classes: C, the width of targets and model output.
        threshold: Sigmoid threshold of a positive prediction.
        pos_weight: ``[C]`` positive-class weights of the loss, or None.
    """

    name = "multilabel"
    primary_metric = "map"
    direction: Direction = "max"
    model_takes_targets = False

    def __init__(
        self, num_classes: int, threshold: float = 0.5, pos_weight: torch.Tensor | None = None
    ) -> None:
        self.num_outputs = num_classes
        self.threshold = threshold
        self.pos_weight = pos_weight

    def check_targets(self, targets: Any) -> None:
        """Refuse targets this task cannot learn from, with a one-line error.

        Accepts ``[N, C]`` float multi-hot with exactly 0/1 entries and C = ``num_outputs``.

        Raises:
            ConfigError: under ``task.name``, e.g. "single-label targets [N] int64 given to
                the multilabel task; …".
        """
        t = require_tensor(self.name, targets)
        if t.ndim == 1:
            raise ConfigError(
                TARGETS_FIELD,
                f"single-label targets {describe(t)} given to the multilabel task; "
                "use task classification or give [N, C] multi-hot targets",
            )
        if t.ndim != 2 or t.shape[1] != self.num_outputs:
            raise ConfigError(
                TARGETS_FIELD,
                f"targets {describe(t)} do not match the multilabel task's "
                f"{self.num_outputs} classes; give [N, {self.num_outputs}] multi-hot targets",
            )
        if not t.is_floating_point():
            raise ConfigError(
                TARGETS_FIELD,
                f"multi-hot targets must be float 0/1, got {describe(t)}; convert them to float32",
            )
        if t.numel() and not bool(((t == 0) | (t == 1)).all()):
            raise ConfigError(
                TARGETS_FIELD,
                "multi-hot targets hold values other than 0 and 1 (soft labels are not "
                "supported); binarise them",
            )

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean BCE-with-logits over the ``[B, C]`` entries (weighted positives)."""
        return F.binary_cross_entropy_with_logits(
            output, target.to(output.dtype), pos_weight=like(self.pos_weight, output)
        )

    def loss_sum(self, output: torch.Tensor, target: torch.Tensor) -> float:
        """Σ over samples of the per-sample loss (mean over the C labels), so that the
        split's mean per-sample loss equals the training loss' definition."""
        with torch.no_grad():
            total = F.binary_cross_entropy_with_logits(
                output,
                target.to(output.dtype),
                pos_weight=like(self.pos_weight, output),
                reduction="sum",
            )
        return float(total) / self.num_outputs

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        """``[B, C]`` float32 multi-hot: ``sigmoid(output) ≥ threshold``."""
        return (torch.sigmoid(output) >= self.threshold).to(torch.float32)

    def accumulator(self) -> MultilabelAccumulator:
        """A fresh accumulator for one split."""
        return MultilabelAccumulator(self.num_outputs, self.threshold)

    def label_summary(self, targets: torch.Tensor) -> np.ndarray:
        """``[C]`` int64 positive count per class."""
        counts: np.ndarray = (targets != 0).sum(dim=0).to(torch.int64).numpy()
        return counts

    def collate(self, targets: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``targets[index]``."""
        return targets[index]

    def fitted_state(self) -> dict[str, Any]:
        """Nothing is fitted on the train split."""
        return {}


class MultilabelAccumulator:
    """Keeps a split's ``[N, C]`` logits and targets; AP needs the split's full ranking.

    Args:
        num_classes: C.
        threshold: Sigmoid threshold of a positive prediction (F1).
    """

    owns_loss = False

    def __init__(self, num_classes: int, threshold: float) -> None:
        self.num_classes = num_classes
        self.threshold = threshold
        self._store = BatchStore()

    def update(self, output: torch.Tensor, target: torch.Tensor, loss_sum: float | None) -> None:
        """Add a batch: ``[B, C]`` logits, ``[B, C]`` multi-hot targets, summed loss."""
        self._store.add(output, target, loss_sum)

    def compute(self) -> SplitMetrics:
        """mAP, micro/macro-F1, per-class AP/F1/support and the mean loss."""
        nan = float("nan")
        if self._store.n == 0:
            return SplitMetrics({"map": nan, "micro_f1": nan, "macro_f1": nan, "loss": nan})
        logits, targets = self._store.tensors()
        truth = targets != 0
        pred = torch.sigmoid(logits) >= self.threshold
        tp = (pred & truth).sum(dim=0)
        support = truth.sum(dim=0)
        fp = pred.sum(dim=0) - tp
        fn = support - tp
        present = support > 0
        ap = average_precision(logits, truth)
        f1 = f1_from_counts(tp, fp, fn)
        micro = f1_from_counts(tp.sum(), fp.sum(), fn.sum())
        values = {
            "map": float(ap[present].mean()) if bool(present.any()) else nan,
            "micro_f1": float(micro),
            "macro_f1": float(f1[present].mean()) if bool(present.any()) else nan,
            "loss": self._store.mean_loss(),
        }
        per_class = {
            "ap": ap.tolist(),
            "f1": f1.tolist(),
            "support": support.to(torch.float64).tolist(),
        }
        return SplitMetrics(values, per_class, self._store.n, _absent_note(~present))


def _absent_note(absent: torch.Tensor, shown: int = 20) -> tuple[str, ...]:
    """The note naming the classes without positives in a split (empty if none)."""
    ids = torch.nonzero(absent).flatten().tolist()
    if not ids:
        return ()
    listed = ", ".join(str(i) for i in ids[:shown]) + (", …" if len(ids) > shown else "")
    return (
        f"{len(ids)} of {absent.numel()} classes without positives in this split "
        f"(class {listed}): AP undefined, excluded from map and macro_f1; "
        "their false positives count in micro_f1",
    )


declare_metrics("multilabel", {"map": "max", "micro_f1": "max", "macro_f1": "max", "loss": "min"})


@TASKS.register("multilabel", params=MultilabelParams)
def build_multilabel(
    params: MultilabelParams, *, num_classes: int, train_targets: torch.Tensor
) -> MultilabelTask:
    """Multi-label classification: sigmoid + BCE, mAP / micro- and macro-F1."""
    task = MultilabelTask(num_classes, params.threshold)
    task.check_targets(train_targets)
    pw = params.pos_weight
    if pw == "auto":
        n_pos = (train_targets != 0).sum(dim=0)
        task.pos_weight = auto_pos_weight(n_pos, train_targets.shape[0], params.pos_weight_max)
    elif isinstance(pw, list):
        if len(pw) != num_classes:
            raise ConfigError(
                "task.params.pos_weight",
                f"{len(pw)} weights given for {num_classes} classes; give one per class",
            )
        task.pos_weight = torch.tensor(pw, dtype=torch.float32)
    elif isinstance(pw, float):
        task.pos_weight = torch.full((num_classes,), pw, dtype=torch.float32)
    return task
