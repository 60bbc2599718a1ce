"""Target kinds of a dataset and the discrete attributes derived from them.

A dataset's ``targets`` tensor means different things per learning task (see
:mod:`geofl.tasks.base`); :data:`TargetKind` names which, because dtype and shape alone
are ambiguous (``[N]`` int64 is a class id *or* a 0/1 label, ``[N, C]`` float32 is a
multi-hot vector *or* ``C`` real-valued targets):

==============  ===========================  ================================================
kind            targets                      ``classes`` names
==============  ===========================  ================================================
``class``       ``[N]`` int64 in ``[0, C)``  the ``C`` classes
``binary``      ``[N]`` int64 in ``{0, 1}``  the two outcomes, negative first
``multi_hot``   ``[N, C]`` float32 in {0,1}  the ``C`` labels (columns)
``real``        ``[N]`` / ``[N, T]`` float   the ``T`` target variables (``T = 1`` for ``[N]``)
``boxes``       ``[N, M, 5]`` float32        the ``C`` object classes
==============  ===========================  ================================================

``boxes`` (object detection) pads each image's objects to ``M`` rows ``(x1, y1, x2, y2,
label)`` in pixels, label in ``[0, C)``; padding rows are ``(0, 0, 0, 0, -1)``. A crowd
region of class ``c`` (COCO ``iscrowd: 1``) is a row with label ``-2 - c``
(:func:`crowd_label`): it is no object (not counted, not a training target) but reaches the
COCO evaluator, which ignores the detections it covers. One tensor
keeps subsets, splits and client slices the plain row indexing of every other kind; the
detection task turns a batch's rows into torchvision's per-image ``{"boxes", "labels"}``.

Splits and label-skew partitioners need one *discrete* value per sample. The **label
attribute** (:func:`label_codes`) is the class id for ``class`` and ``binary`` targets, the
**rarest present label** for ``multi_hot`` targets (the label, among those a sample carries,
with the fewest positives in the pool, ties to the lower index; samples with no label get
the extra code ``C``), the **dominant class** of ``boxes`` targets (the class with the most
objects in the image, ties to the lower index; images without objects get ``C``), and an
**equal-frequency quantile bin** of the first target column for
``real`` targets. A metadata attribute is discretised the same way: integer, boolean and
string values are categories, floating-point values are quantile-binned
(:func:`attribute_codes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeVar, get_args

import numpy as np
import torch

from geofl.errors import DataError, PartitionError

__all__ = [
    "DEFAULT_BINS",
    "TARGET_KINDS",
    "TargetKind",
    "attribute_codes",
    "box_class_counts",
    "check_targets",
    "crowd_label",
    "dominant_class",
    "label_codes",
    "label_counts",
    "quantile_bins",
    "rarest_present_label",
]

TargetKind = Literal["class", "multi_hot", "real", "binary", "boxes"]
#: Every :data:`TargetKind`, in declaration order.
TARGET_KINDS: tuple[str, ...] = get_args(TargetKind)
#: Quantile bins of a real-valued attribute unless a caller states another number.
DEFAULT_BINS = 5
_Label = TypeVar("_Label", int, np.ndarray, torch.Tensor)


def crowd_label(label: _Label) -> _Label:
    """The ``boxes`` row label of a crowd region of class ``label``: ``-2 - label``; the
    map is its own inverse, so it also turns a crowd row's label back into its class."""
    return -2 - label


def check_targets(targets: torch.Tensor, kind: TargetKind, num_classes: int, n: int) -> None:
    """Check that ``targets`` are valid targets of ``kind`` for ``n`` samples.

    Args:
        targets: The dataset's targets (see the module docstring for shapes and dtypes).
        kind: Their kind.
        num_classes: ``len(classes)`` of the dataset (classes, labels or target names).
        n: Number of samples.

    Raises:
        DataError: naming the kind and what is wrong (shape, dtype, value range).
    """
    shape = tuple(targets.shape)
    if kind not in TARGET_KINDS:
        raise DataError(f"target_kind {kind!r} is unknown; use one of {list(TARGET_KINDS)}")
    if kind in ("class", "binary"):
        if shape != (n,) or targets.dtype != torch.int64:
            raise DataError(
                f"{kind} targets must be [{n}] int64, got {shape} {targets.dtype}; "
                "store class ids as int64"
            )
        hi = 2 if kind == "binary" else num_classes
        if kind == "binary" and num_classes != 2:
            raise DataError(f"binary targets need 2 class names, got {num_classes}")
        if n and (int(targets.min()) < 0 or int(targets.max()) >= hi):
            raise DataError(
                f"{kind} targets must lie in [0, {hi}), got values in "
                f"[{int(targets.min())}, {int(targets.max())}]"
            )
        return
    if targets.dtype != torch.float32:
        raise DataError(f"{kind} targets must be float32, got {targets.dtype}")
    if kind == "boxes":
        _check_boxes(targets, num_classes, n)
        return
    if kind == "multi_hot":
        if shape != (n, num_classes):
            raise DataError(f"multi_hot targets must be [{n}, {num_classes}], got {shape}")
        if not bool(((targets == 0) | (targets == 1)).all()):
            raise DataError("multi_hot targets must be 0 or 1; threshold soft labels first")
        return
    width = 1 if targets.ndim == 1 else (shape[1] if targets.ndim == 2 else -1)
    if shape[:1] != (n,) or width != num_classes:
        raise DataError(
            f"real targets must be [{n}] or [{n}, T] with T = {num_classes} target names, "
            f"got {shape}"
        )
    if not bool(torch.isfinite(targets).all()):
        raise DataError("real targets contain NaN or inf; drop or impute those samples")


def _check_boxes(targets: torch.Tensor, num_classes: int, n: int) -> None:
    shape = tuple(targets.shape)
    if targets.ndim != 3 or shape[0] != n or shape[2] != 5:
        raise DataError(f"boxes targets must be [{n}, M, 5] (x1, y1, x2, y2, label), got {shape}")
    if not bool(torch.isfinite(targets).all()):
        raise DataError("boxes targets contain NaN or inf; drop those boxes in the loader")
    labels = targets[..., 4]
    real = labels != -1
    bad_label = (labels != labels.round()) | (labels < -1 - num_classes) | (labels >= num_classes)
    if bool(bad_label.any()):
        raise DataError(
            f"boxes labels must be integers in [0, {num_classes}), -1 (padding) or "
            "-2 - c (crowd region of class c)"
        )
    b = targets[..., :4]
    if bool((real & ((b[..., 2] <= b[..., 0]) | (b[..., 3] <= b[..., 1]))).any()):
        raise DataError("boxes targets hold degenerate boxes (x2 <= x1 or y2 <= y1)")


def box_class_counts(boxes: np.ndarray, num_classes: int) -> np.ndarray:
    """``[N, C]`` int64 objects per class in each image of ``[N, M, 5]`` boxes targets."""
    t = np.asarray(boxes)
    n = t.shape[0]
    labels = t[..., 4].astype(np.int64).reshape(n, -1)
    rows = np.repeat(np.arange(n), labels.shape[1])
    flat = labels.reshape(-1)
    keep = flat >= 0
    out = np.zeros((n, num_classes), np.int64)
    np.add.at(out, (rows[keep], flat[keep]), 1)
    return out


def dominant_class(boxes: np.ndarray, num_classes: int) -> np.ndarray:
    """``[N]`` int64: per image the class with the most objects (ties to the lower index),
    ``C`` for images without objects."""
    counts = box_class_counts(boxes, num_classes)
    out = counts.argmax(axis=1).astype(np.int64) if num_classes else np.zeros(len(counts), np.int64)
    out[counts.sum(axis=1) == 0] = num_classes
    return out


def rarest_present_label(multi_hot: np.ndarray) -> np.ndarray:
    """Per sample, the present label with the fewest positives in the whole pool.

    Args:
        multi_hot: ``[N, C]`` 0/1 array.

    Returns:
        ``[N]`` int64 in ``[0, C]``; ties go to the lower label index, and samples without
        any label get ``C``.
    """
    present = np.asarray(multi_hot) > 0
    n, c = present.shape
    freq = present.sum(axis=0).astype(np.float64)
    # Absent labels cost +inf so argmin picks the rarest *present* one (first on ties).
    cost = np.where(present, freq[None, :], np.inf)
    out = np.argmin(cost, axis=1).astype(np.int64) if c else np.zeros(n, np.int64)
    out[~present.any(axis=1)] = c
    return out


def quantile_bins(values: np.ndarray, bins: int) -> np.ndarray:
    """Equal-frequency bin index of each value (bins over the given pool).

    Edges are the ``1/bins … (bins-1)/bins`` quantiles (linear interpolation); a value
    equal to an edge falls into the upper bin. Repeated edges (heavily tied values) leave
    some bins empty rather than splitting ties.

    Args:
        values: ``[N]`` real values.
        bins: Number of bins B ≥ 1.

    Returns:
        ``[N]`` int64 in ``[0, B)``.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or bins <= 1:
        return np.zeros(v.size, np.int64)
    edges = np.quantile(v, np.arange(1, bins) / bins)
    return np.searchsorted(edges, v, side="right").astype(np.int64)


def label_codes(
    targets: np.ndarray,
    kind: TargetKind,
    bins: int = DEFAULT_BINS,
    *,
    num_classes: int | None = None,
) -> np.ndarray:
    """The label attribute of each sample (see the module docstring).

    Args:
        targets: ``[N]`` / ``[N, C]`` / ``[N, T]`` / ``[N, M, 5]`` targets of ``kind``.
        kind: Target kind.
        bins: Quantile bins for ``real`` targets.
        num_classes: C; required for ``boxes`` targets (the code of images without
            objects).

    Returns:
        ``[N]`` int64 codes (class ids, rarest present labels or quantile bins).
    """
    t = np.asarray(targets)
    if kind == "multi_hot":
        return rarest_present_label(t)
    if kind == "boxes":
        if num_classes is None:
            raise ValueError("label_codes of boxes targets needs num_classes")
        return dominant_class(t, num_classes)
    if kind == "real":
        return quantile_bins(t if t.ndim == 1 else t[:, 0], bins)
    return t.astype(np.int64, copy=False)


def label_counts(
    targets: np.ndarray, kind: TargetKind, width: int, codes: np.ndarray | None = None
) -> np.ndarray:
    """Counts of the label attribute over some samples (a label histogram).

    Args:
        targets: Targets of the samples (rows of a pool).
        kind: Target kind.
        width: Length of the histogram: C for ``class``/``binary``/``multi_hot``, the
            number of quantile bins for ``real``.
        codes: For ``real`` targets, the samples' quantile-bin codes computed over the
            whole pool (bins must not be re-fitted per client); required for ``real``.

    Returns:
        ``[width]`` int64: samples per class (``class``, ``binary``), positives per label
        (``multi_hot``, so the sum may exceed the sample count), objects per class
        (``boxes``), or samples per quantile
        bin (``real``).
    """
    if kind == "multi_hot":
        return np.asarray(np.asarray(targets).sum(axis=0).round(), dtype=np.int64)
    if kind == "boxes":
        per_class: np.ndarray = box_class_counts(np.asarray(targets), width).sum(axis=0)
        return per_class
    if kind == "real":
        if codes is None:
            raise ValueError("label_counts of real targets needs the pool's bin codes")
        return np.bincount(codes, minlength=width).astype(np.int64)
    return np.bincount(np.asarray(targets, np.int64), minlength=width).astype(np.int64)


def attribute_codes(
    by: str,
    labels: np.ndarray,
    metadata: Mapping[str, np.ndarray],
    bins: int,
    *,
    field: str,
) -> np.ndarray:
    """Discrete codes of the attribute ``by`` over a pool.

    Args:
        by: ``"label"`` (the pool's label attribute, ``labels``) or a metadata key.
        labels: ``[N]`` int64 label codes of the pool.
        metadata: Per-sample arrays of the pool.
        bins: Quantile bins for a floating-point metadata attribute.
        field: Config field named in the error (e.g. ``"partition.params.by"``).

    Returns:
        ``[N]`` int64 codes in ``[0, #values)``.

    Raises:
        PartitionError: if ``by`` is neither ``"label"`` nor a metadata key.
    """
    if by == "label":
        return np.asarray(labels, np.int64)
    if by not in metadata:
        raise PartitionError(
            f"{field}={by!r} is neither 'label' nor a metadata key of this dataset; "
            f"available: {sorted(metadata)}"
        )
    values = np.asarray(metadata[by])
    if np.issubdtype(values.dtype, np.floating):
        return quantile_bins(values, bins)
    inverse: np.ndarray = np.unique(values, return_inverse=True)[1]
    return inverse.astype(np.int64).reshape(-1)
