"""Classification metrics from a confusion matrix, and the rolling-std stability measure.

All metrics derive from one ``[C, C]`` confusion matrix so that a whole evaluation costs a
single ``bincount``.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import torch

__all__ = [
    "Metrics",
    "confusion_matrix",
    "metrics_from_confusion",
    "rolling_std",
]


class Metrics(TypedDict):
    """Evaluation result on one split.

    Keys:
        accuracy: fraction of correct predictions in [0, 1].
        macro_f1: unweighted mean over classes of per-class F1 (classes absent from both
            targets and predictions count as F1 = 0 only if present in targets; see
            :func:`metrics_from_confusion`).
        loss: mean cross-entropy.
        per_class_accuracy: recall of each class (NaN where the class has no samples).
        n: number of evaluated samples.
    """

    accuracy: float
    macro_f1: float
    loss: float
    per_class_accuracy: list[float]
    n: int


def confusion_matrix(targets: torch.Tensor, preds: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``[C, C]`` int64 counts; row = true class, column = predicted class.

    Args:
        targets: ``[N]`` int64 true labels.
        preds: ``[N]`` int64 predicted labels.
        num_classes: C.
    """
    flat = targets.to(torch.long) * num_classes + preds.to(torch.long)
    return torch.bincount(flat, minlength=num_classes * num_classes).reshape(
        num_classes, num_classes
    )


def metrics_from_confusion(cm: torch.Tensor, loss_sum: float) -> Metrics:
    """Accuracy, macro-F1, per-class accuracy and mean loss from a confusion matrix.

    Macro-F1 averages F1_c = 2·TP_c / (2·TP_c + FP_c + FN_c) over the classes that occur
    in the targets (classes with no true samples are excluded, as scikit-learn does when
    ``labels`` is restricted to the present classes).

    Args:
        cm: ``[C, C]`` confusion matrix (rows true, columns predicted).
        loss_sum: Sum of per-sample losses over the evaluated samples.
    """
    cmf = cm.to(torch.float64)
    n = float(cmf.sum())
    tp = torch.diagonal(cmf)
    support = cmf.sum(dim=1)
    predicted = cmf.sum(dim=0)
    present = support > 0
    denom = 2 * tp + (predicted - tp) + (support - tp)
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp_min(1e-300), torch.zeros_like(tp))
    recall = torch.where(present, tp / support.clamp_min(1.0), torch.full_like(tp, float("nan")))
    return Metrics(
        accuracy=float(tp.sum() / n) if n else float("nan"),
        macro_f1=float(f1[present].mean()) if bool(present.any()) else float("nan"),
        loss=loss_sum / n if n else float("nan"),
        per_class_accuracy=[float(x) for x in recall],
        n=int(n),
    )


def rolling_std(values: np.ndarray, window: int = 10) -> np.ndarray:
    """Rolling (population) standard deviation over a trailing window (000 Fig. 6).

    Position ``t`` holds ``std(values[t - window + 1 : t + 1])``; the first ``window - 1``
    positions, which lack a full window, are NaN.

    Args:
        values: ``[T]`` series, e.g. test accuracy per evaluated round.
        window: Window length (≥ 1).

    Returns:
        ``[T]`` float64 array.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    x = np.asarray(values, dtype=np.float64)
    out = np.full(x.shape, np.nan)
    if x.size >= window:
        views = np.lib.stride_tricks.sliding_window_view(x, window)
        out[window - 1 :] = views.std(axis=1)
    return out
