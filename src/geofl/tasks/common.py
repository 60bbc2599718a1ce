"""Pieces the multi-label, binary and regression tasks share.

Positive-class weights for BCE-with-logits, the target checks that turn a task/data
mismatch into a one-line :class:`~geofl.errors.ConfigError`, and the batch store the
rank-based accumulators (AP, ROC-AUC) keep until the end of a split.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from geofl.errors import ConfigError

__all__ = [
    "FLUSH_ENTRIES",
    "TARGETS_FIELD",
    "BatchStore",
    "PosWeight",
    "auto_pos_weight",
    "batch_loss",
    "describe",
    "numpy_float",
    "parse_pos_weight",
    "require_tensor",
]

#: Config path that target mismatches are reported under (the task is the thing to change).
TARGETS_FIELD = "task.name"

PosWeight = str | float | list[float]


def parse_pos_weight(value: Any, *, allow_list: bool) -> PosWeight:
    """Validate a ``pos_weight`` parameter: ``"none"``, ``"auto"``, a positive number or
    (multi-label) a list of positive numbers, one per class.

    Used as a pydantic ``mode="before"`` validator so that a bad value gets one message
    that lists every accepted form (pydantic's union errors name only the first branch).

    Raises:
        ValueError: naming what was given and what is accepted.
    """
    forms = "'none', 'auto', a positive number" + (
        " or a list of positive numbers, one per class" if allow_list else ""
    )
    if value in ("none", "auto"):
        return str(value)
    if allow_list and isinstance(value, list) and value and all(_positive(v) for v in value):
        return [float(v) for v in value]
    if _positive(value):
        return float(value)
    raise ValueError(f"pos_weight {value!r} is not valid; give {forms}")


def _positive(v: Any) -> bool:
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(float(v))
        and float(v) > 0
    )


def auto_pos_weight(n_pos: torch.Tensor, n_total: int, max_weight: float) -> torch.Tensor:
    """``n_neg / n_pos`` per class, clipped to ``max_weight``.

    The weight that makes positives and negatives of a class contribute equally to
    BCE-with-logits (``pos_weight`` of ``torch.nn.BCEWithLogitsLoss``). A class with no
    positives or no negatives in the training targets has nothing to balance and gets 1.

    Args:
        n_pos: ``[C]`` positive counts per class (training split).
        n_total: Training samples N.
        max_weight: Upper clip, so that a class with one positive in 10⁵ samples does not
            get a weight of 10⁵ (the gradient of its few positives would dominate).

    Returns:
        ``[C]`` float32 weights.
    """
    pos = n_pos.to(torch.float64)
    neg = n_total - pos
    w = (neg / pos.clamp_min(1.0)).clamp(max=max_weight)
    return torch.where((pos > 0) & (neg > 0), w, torch.ones_like(w)).to(torch.float32)


def describe(targets: torch.Tensor) -> str:
    """``"[N, 17] float32"``-style description of a target tensor for error messages."""
    dims = ", ".join(["N", *(str(d) for d in targets.shape[1:])])
    return f"[{dims}] {str(targets.dtype).removeprefix('torch.')}"


def require_tensor(task: str, targets: Any) -> torch.Tensor:
    """``targets`` if it is a tensor of at least one dimension, else a one-line ConfigError."""
    if not isinstance(targets, torch.Tensor) or targets.ndim == 0:
        kind = type(targets).__name__ if not isinstance(targets, torch.Tensor) else "a scalar"
        raise ConfigError(
            TARGETS_FIELD,
            f"the {task} task needs a target tensor with one row per sample, got {kind}",
        )
    return targets


def numpy_float(t: torch.Tensor) -> torch.Tensor:
    """``t`` if it is float32 or float64, else as float32: model outputs numpy can read
    (numpy has no bfloat16), with the precision they were computed in."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def batch_loss(loss_sum: float | None) -> float:
    """The summed loss a non-owning accumulator was given (see ``MetricAccumulator``).

    Raises:
        ValueError: if it is None (only accumulators that own the loss accept that).
    """
    if loss_sum is None:
        raise ValueError(
            "this accumulator does not compute the loss: pass the batch's Task.loss_sum"
        )
    return float(loss_sum)


#: Output entries (samples × outputs) an accumulator lets pending batches hold before it
#: reduces them (:meth:`BatchStore.add` says so): a bound on its memory for splits of any size.
FLUSH_ENTRIES = 1 << 17


class BatchStore:
    """Outputs and targets of a split's batches, concatenated once when reduced.

    Rank-based metrics (AP, ROC-AUC) need the whole split's scores, and sums over a whole
    split cost a fixed number of library calls instead of a dozen per batch; appending
    detached batch tensors to a list and concatenating once costs one copy per sample.
    An accumulator that reduces as it goes (:meth:`take`) does so when :meth:`add` says
    the store is full, which bounds what is pending to :data:`FLUSH_ENTRIES` output entries
    plus one batch.

    Args:
        owns_loss: True if the owner computes the loss (``add`` then ignores ``loss_sum``).
    """

    def __init__(self, *, owns_loss: bool = False) -> None:
        self._outputs: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []
        self.n = 0
        self.pending_entries = 0
        self.loss_sum = 0.0
        self.owns_loss = owns_loss

    @property
    def pending(self) -> bool:
        """True if batches were added since the last :meth:`take`."""
        return bool(self._outputs)

    def add(self, output: torch.Tensor, target: torch.Tensor, loss_sum: float | None) -> bool:
        """Keep one batch (no copy of the data; detached if it carries a graph).

        Returns:
            True once the pending batches hold :data:`FLUSH_ENTRIES` output entries (an
            owner that reduces as it goes then calls :meth:`take`).
        """
        self._outputs.append(output.detach() if output.requires_grad else output)
        self._targets.append(target)
        self.n += target.shape[0]
        self.pending_entries += output.numel()
        if not self.owns_loss:
            self.loss_sum += batch_loss(loss_sum)
        return self.pending_entries >= FLUSH_ENTRIES

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(outputs, targets)`` of every batch, concatenated along dim 0."""
        if not self._outputs:
            raise ValueError("no batches were added")
        if len(self._outputs) == 1:  # what cat would give: the values, contiguous
            return self._outputs[0].contiguous(), self._targets[0].contiguous()
        return torch.cat(self._outputs), torch.cat(self._targets)

    def take(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(outputs, targets)`` of the pending batches (concatenated, on the CPU), which
        the store then forgets (:attr:`n` keeps counting every sample added)."""
        outputs, targets = self.tensors()
        self._outputs, self._targets = [], []
        self.pending_entries = 0
        return outputs.cpu(), targets.cpu()

    def mean_loss(self) -> float:
        """Mean per-sample loss (NaN for an empty split)."""
        return self.loss_sum / self.n if self.n else float("nan")
