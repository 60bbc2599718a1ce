"""Learning tasks (loss, prediction, metrics, label summary); importing registers them."""

from typing import TYPE_CHECKING

from geofl.tasks import binary, classification, detection, multilabel, regression
from geofl.tasks.base import TASKS, MetricAccumulator, SplitMetrics, Task, TaskBuilder

__all__ = [
    "TASKS",
    "MetricAccumulator",
    "SplitMetrics",
    "Task",
    "TaskBuilder",
    "binary",
    "classification",
    "detection",
    "multilabel",
    "regression",
]

if TYPE_CHECKING:  # mypy proves that every task class implements the Task protocol
    _IMPLEMENTATIONS: tuple[type[Task], ...] = (
        binary.BinaryTask,
        classification.ClassificationTask,
        detection.DetectionTask,
        multilabel.MultilabelTask,
        regression.RegressionTask,
    )
