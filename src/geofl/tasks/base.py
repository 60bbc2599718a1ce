"""The learning-task protocol: what a task owns, and the task registry.

A task is everything in a round that depends on *what* is learned rather than *how* it is
federated: the loss, the prediction rule, how metrics accumulate over the batches of a
split, which metric picks the best model (and in which direction), and the discrete label
summary that partitioners (Dirichlet label skew), consistency weighting (000 Eq. 9–16) and
client metadata (``label_histogram``) read. The engine, the local trainer, evaluation and
the reports talk to a :class:`Task`; nothing below this protocol knows about argmax or
cross-entropy.

Targets per task (``N`` samples, ``C`` classes):

====================  ==============================  ==========================
task                  targets                         model output
====================  ==============================  ==========================
``classification``    ``[N]`` int64 in ``[0, C)``     ``[N, C]`` logits
``multilabel``        ``[N, C]`` float32 multi-hot    ``[N, C]`` logits
``regression``        ``[N]`` or ``[N, T]`` float32   ``[N]`` / ``[N, T]``
``binary``            ``[N]`` int64 in ``{0, 1}``     ``[N, 1]`` or ``[N]`` logit
====================  ==============================  ==========================

How object detection fits (the detection issue adds it; sketch, not code)::

    class DetectionTask:
        name = "detection"; primary_metric = "map_50"; higher_is_better = True
        # targets: a list of N dicts {"boxes": [n_i, 4] float32 xyxy, "labels": [n_i] int64}
        def collate(self, samples): return images, list_of_target_dicts
        def loss(self, output, targets):  # torchvision detectors return a loss dict in
            return sum(output.values())   # train mode; the trainer calls model(x, targets)
        def predict(self, output): return output  # eval mode: boxes, scores, labels
        def accumulator(self): return CocoMapAccumulator(...)  # keeps every detection of
            # the split (mAP needs the whole split's ranking), computes mAP@[.5:.95], AP50
        def label_summary(self, targets): counts of box labels per class → Dirichlet skew
            and consistency weighting work unchanged on detection datasets.

The only additions detection needs are :meth:`Task.collate` (already part of the protocol,
identity for tensor targets) and a model that consumes targets in training, which the
trainer reaches through :attr:`Task.model_takes_targets`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import torch

from geofl.errors import RegistryError
from geofl.registry import Registry

__all__ = [
    "TASKS",
    "TASK_METRICS",
    "WHOLE_SAMPLE_TASKS",
    "MetricAccumulator",
    "SplitMetrics",
    "Task",
    "TaskBuilder",
    "WholeSampleLabels",
    "declare_metrics",
    "declare_whole_sample_labels",
    "metric_direction",
]

Direction = Literal["max", "min"]


@dataclass(frozen=True)
class SplitMetrics:
    """Metrics of one model on one split.

    Attributes:
        values: Scalar metrics by name (``"accuracy"``, ``"macro_f1"``, ``"map"``,
            ``"rmse"``, …); every task reports ``"loss"`` (mean per-sample loss) here.
        per_class: Per-class vectors by name (``"accuracy"`` = recall per class for
            classification, ``"ap"``/``"f1"`` for multi-label), NaN where undefined.
        n: Number of evaluated samples.
        notes: Human-readable caveats for reports (e.g. ``"3 classes without positives
            in this split: excluded from mAP"``).
    """

    values: Mapping[str, float]
    per_class: Mapping[str, Sequence[float]] = field(default_factory=dict)
    n: int = 0
    notes: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> float:
        return self.values[name]


class MetricAccumulator(Protocol):
    """Per-batch accumulation of a split's metrics (one instance per evaluation).

    Attributes:
        owns_loss: True if the accumulator computes each batch's summed loss itself (with
            the arithmetic of :meth:`Task.loss_sum`, so the value is the same to the bit)
            from the outputs it keeps; the caller then skips ``Task.loss_sum`` and passes
            ``loss_sum=None`` (a float given is ignored). False: ``loss_sum`` is required.
            Owning the loss lets a task with cheap per-sample metrics (regression) do its
            per-batch work once per split, vectorised, instead of a dozen small tensor
            operations per batch (``benchmarks/bench_task_metrics.py``).
    """

    owns_loss: bool

    def update(self, output: torch.Tensor, target: Any, loss_sum: float | None) -> None:
        """Add one batch: model ``output``, its ``target`` and the batch's summed loss
        (None only for an accumulator that :attr:`owns_loss`)."""
        ...

    def compute(self) -> SplitMetrics:
        """The split's metrics from everything added so far."""
        ...


class Task(Protocol):
    """What a learning task owns (see the module docstring for targets and outputs).

    Attributes:
        name: Registry key (``"classification"``, ``"multilabel"``, …).
        primary_metric: Key in :attr:`SplitMetrics.values` that selects the best model and
            drives early stopping.
        direction: ``"max"`` if a larger primary metric is better, else ``"min"``.
        num_outputs: Width of the model's output layer.
        model_takes_targets: True if the model consumes targets in training (detection).
    """

    name: str
    primary_metric: str
    direction: Direction
    num_outputs: int
    model_takes_targets: bool

    def loss(self, output: torch.Tensor, target: Any) -> torch.Tensor:
        """Mean training loss of a batch (a scalar that ``backward`` can be called on)."""
        ...

    def loss_sum(self, output: torch.Tensor, target: Any) -> float:
        """Summed per-sample loss of a batch, for evaluation (no graph)."""
        ...

    def predict(self, output: torch.Tensor) -> torch.Tensor:
        """Predictions from model output (class ids, multi-hot, values in target units)."""
        ...

    def accumulator(self) -> MetricAccumulator:
        """A fresh accumulator for one split."""
        ...

    def label_summary(self, targets: Any) -> np.ndarray:
        """``[C]`` int64 counts of the discrete attribute that label-skew partitioners,
        consistency weighting and ``UpdateMeta.label_histogram`` use."""
        ...

    def collate(self, targets: Any, index: torch.Tensor) -> Any:
        """The targets of the samples ``index`` (``targets[index]`` for tensor targets)."""
        ...

    def fitted_state(self) -> dict[str, Any]:
        """What the task fitted on the train split that inference needs (JSON values;
        ``{}`` for tasks that fit nothing), recorded in ``model.json``."""
        ...


@runtime_checkable
class WholeSampleLabels(Protocol):
    """A task whose samples can each be given, and read back as, one class.

    What a server-side probe that assigns classes to whole inputs needs (the OOD indicator
    of BackdoorIndicator, :mod:`geofl.server.indicator`): classification (the sample's
    label) and detection (one box over the image's centre; the class of the most confident
    detection) implement it; tasks without single classes (multi-label, regression) do not.
    """

    def whole_sample_targets(self, labels: torch.Tensor, shape: tuple[int, ...]) -> Any:
        """Targets, in the task's own format, that assign ``labels`` (``[n]`` int64 in
        ``[0, C)``) to whole inputs of ``shape`` (``(C_in, H, W)``)."""
        ...

    def whole_sample_labels(self, output: Any) -> torch.Tensor:
        """``[n]`` int64: the class the model's (eval-mode) ``output`` gives each whole
        sample, in ``[0, C]`` where ``C`` (:attr:`Task.num_outputs`) means none."""
        ...


class TaskBuilder(Protocol):
    """``(params, *, num_classes, train_targets) -> Task`` as registered in :data:`TASKS`.

    The builder sees the training targets so that a task can fit statistics on the train
    split only (regression's standardisation), never on validation or test data.
    """

    def __call__(self, params: Any, *, num_classes: int, train_targets: Any) -> Task: ...


#: Learning tasks by name (``config: task: {name: multilabel, ...}``).
TASKS: Registry[Task] = Registry("task")


#: Scalar metrics each task reports (keys of :attr:`SplitMetrics.values`) and the direction in
#: which each improves, by task name: what config loading checks ``eval.select_by``,
#: ``eval.early_stopping.metric`` and ``eval.target.metric`` against.
TASK_METRICS: dict[str, Mapping[str, Direction]] = {}


def declare_metrics(task: str, metrics: Mapping[str, Direction]) -> None:
    """State the scalar metrics ``task`` reports (next to its registration).

    Raises:
        RegistryError: if ``task`` already declared its metrics.
    """
    if task in TASK_METRICS:
        raise RegistryError(f"task {task!r} already declared its metrics")
    TASK_METRICS[task] = dict(metrics)


#: Tasks that implement :class:`WholeSampleLabels`, by name (what config loading checks).
WHOLE_SAMPLE_TASKS: set[str] = set()


def declare_whole_sample_labels(task: str) -> None:
    """State that ``task`` implements :class:`WholeSampleLabels` (next to its registration)."""
    WHOLE_SAMPLE_TASKS.add(task)


def metric_direction(task: Task, metric: str) -> Direction | None:
    """Which way ``metric`` of ``task`` improves, or None if the task does not report it.

    The primary metric has the task's direction and ``loss`` (every task reports it) is
    ``min``; other metrics need the task's :func:`declare_metrics`.
    """
    if metric == task.primary_metric:
        return task.direction
    declared = TASK_METRICS.get(task.name)
    if declared is not None:
        return declared.get(metric)
    return "min" if metric == "loss" else None
