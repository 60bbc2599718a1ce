"""Validation of incoming client updates: finite, right shape, sane metadata.

A malformed update is rejected with a reason that is logged and written to the round
record; the round proceeds with the remaining updates.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from geofl.update import ClientUpdate

__all__ = ["validate_update"]

log = logging.getLogger(__name__)


def validate_update(
    update: ClientUpdate,
    dim: int,
    tensor_names: Sequence[str] = (),
    scalar_names: Sequence[str] = (),
) -> str | None:
    """The reason ``update`` is malformed, or None if it is acceptable.

    Checks, in order: the delta is a ``[dim]`` floating tensor; every entry is finite;
    the sample count is positive; a shared label histogram (000 Eq. 9–10) is a vector of
    finite non-negative counts with a positive sum.

    Args:
        update: The received update.
        dim: D, the model's flat parameter count.
        tensor_names: Extra tensors the strategy expects (each ``[dim]``, finite); others
            are refused too.
        scalar_names: Metadata scalars the strategy needs (each present, finite, > 0).
    """
    reason = _tensor_reason("delta", update.delta, dim)
    if reason is not None:
        return reason
    extra = getattr(update, "tensors", {})
    if not isinstance(extra, Mapping) or set(extra) != set(tensor_names):
        got = sorted(extra) if isinstance(extra, Mapping) else type(extra).__name__
        return f"uploaded tensors {got}, expected {sorted(tensor_names)}"
    for name in tensor_names:
        reason = _tensor_reason(name, extra[name], dim)
        if reason is not None:
            return reason
    if update.meta.num_samples <= 0:
        return f"num_samples={update.meta.num_samples} must be positive"
    for key, value in update.meta.scalars.items():
        if not isinstance(value, int | float) or not math.isfinite(value):
            return f"metadata scalar {key}={value!r} is not a finite number"
    for key in scalar_names:
        scalar = update.meta.scalars.get(key)
        if scalar is None or not scalar > 0:
            return f"metadata scalar {key}={scalar!r} must be present and positive"
    hist = update.meta.label_histogram
    if hist is not None:
        h = np.asarray(hist)
        if h.ndim != 1 or not np.issubdtype(h.dtype, np.number):
            return f"label_histogram has shape {h.shape} and dtype {h.dtype}, expected [C] counts"
        if not np.isfinite(h).all() or (h < 0).any():
            return "label_histogram has negative or non-finite counts"
        if not h.sum() > 0:
            return "label_histogram is all zeros"
    return None


def _tensor_reason(name: str, t: object, dim: int) -> str | None:
    """Why ``t`` is not a finite floating ``[dim]`` tensor, or None."""
    if not isinstance(t, torch.Tensor):
        return f"{name} is {type(t).__name__}, not a tensor"
    if tuple(t.shape) != (dim,):
        return f"{name} has shape {tuple(t.shape)}, expected ({dim},)"
    if not t.is_floating_point():
        return f"{name} has dtype {t.dtype}, expected a floating type"
    # A finite sum implies every entry is finite (one reduction, no [D] mask); only a
    # non-finite sum needs the elementwise check, which also counts the bad entries.
    if not bool(torch.isfinite(t.sum())):
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            return f"{name} has {bad} non-finite values (NaN/Inf)"
    return None
