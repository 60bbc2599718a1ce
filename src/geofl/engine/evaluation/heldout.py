"""Batched evaluation of a model on a held-out split, through the task's accumulator."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from geofl.data.base import Inputs
from geofl.device import CPU, module_device, to_device
from geofl.tasks.base import MetricAccumulator, SplitMetrics, Task

__all__ = ["accumulate", "evaluate"]


def evaluate(
    model: nn.Module,
    inputs: Inputs,
    targets: Any,
    task: Task,
    batch_size: int = 1024,
) -> SplitMetrics:
    """The task's metrics of ``model`` on one split.

    Batches are contiguous slices in order; each adds its output, its targets and its
    summed loss to one accumulator (:meth:`~geofl.tasks.base.Task.accumulator`); an
    accumulator that owns the loss computes it itself (``MetricAccumulator.owns_loss``).

    Args:
        model: The model; put in eval mode for the call and restored afterwards.
        inputs: ``[N, C, H, W]`` images or ``[N, F]`` features, float32, in memory or
            stored (read per batch).
        targets: The split's targets (``[N]`` class ids, ``[N, C]`` multi-hot, ...).
        task: The learning task.
        batch_size: Evaluation batch size.
    """
    return accumulate(model, inputs, targets, task, batch_size).compute()


def accumulate(
    model: nn.Module,
    inputs: Inputs,
    targets: Any,
    task: Task,
    batch_size: int = 1024,
) -> MetricAccumulator:
    """The task's accumulator after every batch of :func:`evaluate` (not yet computed):
    what a site of a federated evaluation reports from
    (:mod:`geofl.engine.site_reports.evaluation`)."""
    was_training = model.training
    model.eval()
    acc = task.accumulator()
    n = int(inputs.shape[0])
    device = module_device(model)
    with torch.inference_mode():
        for start in range(0, n, batch_size):
            x = to_device(inputs[start : start + batch_size], device)
            y = task.collate(targets, torch.arange(start, min(start + batch_size, n)))
            y = to_device(y, device)
            # Detectors given targets in eval mode return detections and their loss.
            output = model(x, y) if task.model_takes_targets else model(x)
            loss = None if acc.owns_loss else task.loss_sum(output, y)
            acc.update(to_device(output, CPU), to_device(y, CPU), loss)
    model.train(was_training)
    return acc
