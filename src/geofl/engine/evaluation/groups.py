"""Per-group metrics of a split: each region's metrics and their spread (003 Table 12).

With ``eval.group_by: region`` every evaluated split also reports, for each value ``g`` of
the per-sample metadata ``region``, the task's scalar metrics on the samples of that group
(``roc_auc_region_0``, ``f1_region_0``, …; the training loss is left out) and, for the
primary metric, the population standard deviation (ddof 0) and the minimum over the groups
(``roc_auc_region_std``, ``roc_auc_region_min``). 003 Table 12's "Std. dev. across
regions" is ddof 0: its FedAvg column (0.88, 0.83, 0.74) gives 0.058. Groups whose metric
is undefined (e.g. ROC-AUC of a region without positives, NaN) are left out of the
spread.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import nn

from geofl.data.base import ArrayDataset
from geofl.engine.evaluation.heldout import evaluate
from geofl.errors import ConfigError
from geofl.tasks.base import SplitMetrics, Task

__all__ = ["check_group_key", "group_values", "with_group_metrics"]


def check_group_key(data: ArrayDataset, key: str) -> None:
    """Refuse an ``eval.group_by`` key the dataset does not carry.

    Raises:
        ConfigError: naming ``eval.group_by`` and the available metadata keys.
    """
    if key not in data.metadata:
        raise ConfigError(
            "eval.group_by",
            f"{key!r} is not per-sample metadata of dataset {data.name!r}; "
            f"available: {sorted(data.metadata)}",
        )


def group_values(
    metrics: list[tuple[str, SplitMetrics]], key: str, primary: str
) -> dict[str, float]:
    """Flatten per-group metrics into scalars (see the module docstring).

    Args:
        metrics: ``(group value, metrics on that group)`` in group order.
        key: The metadata key (part of every name).
        primary: The task's primary metric, whose spread is reported.
    """
    out: dict[str, float] = {}
    for g, m in metrics:
        out.update({f"{name}_{key}_{g}": v for name, v in m.values.items() if name != "loss"})
    scores = np.array([m.values[primary] for _, m in metrics], dtype=np.float64)
    scores = scores[np.isfinite(scores)]
    out[f"{primary}_{key}_std"] = float(scores.std()) if scores.size else float("nan")
    out[f"{primary}_{key}_min"] = float(scores.min()) if scores.size else float("nan")
    return out


def with_group_metrics(
    metrics: SplitMetrics,
    model: nn.Module,
    split: ArrayDataset,
    task: Task,
    key: str,
    batch_size: int,
) -> SplitMetrics:
    """``metrics`` of ``split`` with the per-group values of ``key`` added."""
    group = np.asarray(split.metadata[key])
    per_group = []
    for g in np.unique(group):
        idx = torch.from_numpy(np.flatnonzero(group == g))
        sub = split.subset(idx)
        per_group.append((str(g), evaluate(model, sub.inputs, sub.targets, task, batch_size)))
    extra = group_values(per_group, key, task.primary_metric)
    return replace(metrics, values={**metrics.values, **extra})
