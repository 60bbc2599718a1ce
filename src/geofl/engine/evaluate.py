"""Batched evaluation of a model on a held-out split."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from geofl.data.base import Inputs
from geofl.tasks.metrics import Metrics, confusion_matrix, metrics_from_confusion

__all__ = ["evaluate"]


def evaluate(
    model: nn.Module,
    images: Inputs,
    labels: torch.Tensor,
    num_classes: int,
    batch_size: int = 1024,
) -> Metrics:
    """Accuracy, macro-F1, per-class accuracy and mean cross-entropy.

    Args:
        model: Classifier; put in eval mode for the call and restored afterwards.
        images: ``[N, C, H, W]`` float32, in memory or stored (read per batch).
        labels: ``[N]`` int64.
        num_classes: C.
        batch_size: Evaluation batch size.
    """
    was_training = model.training
    model.eval()
    cm = torch.zeros(num_classes, num_classes, dtype=torch.long)
    loss_sum = 0.0
    with torch.inference_mode():
        for start in range(0, labels.shape[0], batch_size):
            x = images[start : start + batch_size]
            y = labels[start : start + batch_size]
            logits = model(x)
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            cm += confusion_matrix(y, logits.argmax(dim=1), num_classes)
    model.train(was_training)
    return metrics_from_confusion(cm, loss_sum)
