"""Attack success rate (ASR) of a backdoor on the global model (004 Eq. 15, for classes).

004 counts triggered objects whose detection is suppressed; the classification analogue is
the fraction of triggered test samples whose true label is *not* the target that the model
classifies *as* the target. Samples already of the target class are left out (they say
nothing about the backdoor). For rare-class hiding (``edge_case``) the probed samples are
the clean test samples of the source class. Clean data accuracy (CDA) is the task's test
accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import nn

from geofl.attacks.trigger import AnyTrigger
from geofl.data.base import Inputs
from geofl.tasks.base import SplitMetrics

__all__ = [
    "ASR_METRIC",
    "AsrProbe",
    "BackdoorProbe",
    "Predict",
    "argmax_classes",
    "attack_success_rate",
]

#: Key of the ASR among a split's metric values (``rounds.jsonl`` ``test.asr``).
ASR_METRIC = "asr"

#: Model output ``[B, …]`` → ``[B]`` int64 predicted class ids (a task's ``predict``).
Predict = Callable[[torch.Tensor], torch.Tensor]


def argmax_classes(output: torch.Tensor) -> torch.Tensor:
    """``[B]`` the class with the highest score of ``[B, C]`` output (classification)."""
    return output.argmax(dim=1)


class AsrProbe(Protocol):
    """Measures an attack's success on the test split next to the task's metrics: the
    classification backdoor (:class:`BackdoorProbe`) or the object-disappearance attack
    (:class:`~geofl.attacks.object_asr.ObjectDisappearanceProbe`, 004 Eq. 15)."""

    def extend(
        self, metrics: SplitMetrics, model: nn.Module, inputs: Inputs, batch_size: int
    ) -> SplitMetrics:
        """``metrics`` with the ASR of ``model`` added under :data:`ASR_METRIC`."""
        ...


def attack_success_rate(predicted: torch.Tensor, true: torch.Tensor, target: int) -> float:
    """Fraction of samples with ``true ≠ target`` predicted as ``target``; NaN if none.

    Args:
        predicted: ``[N]`` predicted class ids on the (triggered) samples.
        true: ``[N]`` their true class ids.
        target: The attack's target class.

    Example:
        >>> attack_success_rate(torch.tensor([0, 0, 1, 0]), torch.tensor([1, 0, 2, 2]), 0)
        0.6666666666666666
    """
    keep = true != target
    n = int(keep.sum())
    if n == 0:
        return math.nan
    return int((predicted[keep] == target).sum()) / n


@dataclass(frozen=True)
class BackdoorProbe:
    """Which test samples are probed, and how.

    Attributes:
        index: ``[M]`` int64 indices into the test split (true label ≠ target).
        target: The target class.
        trigger: Stamped on every probed sample, or None (edge-case: clean samples).
        predict: Output → class ids, the task's own rule (None: arg-max). A binary model
            has one logit, whose arg-max is always class 0, so it needs the task's
            threshold (issue 32 item 3: the tractors' crop-stress task).
    """

    index: torch.Tensor
    target: int
    trigger: AnyTrigger | None
    predict: Predict | None = None

    def measure(self, model: nn.Module, inputs: Inputs, batch_size: int) -> float:
        """ASR of ``model`` on the probed samples of ``inputs`` (``[N, C, H, W]`` or ``[N, F]``).

        Deterministic: fixed samples, fixed trigger, the model in eval mode (restored after).
        """
        if len(self.index) == 0:
            return math.nan
        was_training = model.training
        model.eval()
        hits, predict = 0, self.predict or argmax_classes
        with torch.inference_mode():
            for start in range(0, len(self.index), batch_size):
                x = inputs[self.index[start : start + batch_size]]
                if self.trigger is not None:
                    x = self.trigger.stamp(x)
                hits += int((predict(model(x)) == self.target).sum())
        model.train(was_training)
        return hits / len(self.index)

    def extend(
        self, metrics: SplitMetrics, model: nn.Module, inputs: Inputs, batch_size: int
    ) -> SplitMetrics:
        """``metrics`` with the ASR added under :data:`ASR_METRIC`."""
        asr = self.measure(model, inputs, batch_size)
        return replace(metrics, values={**metrics.values, ASR_METRIC: asr})
