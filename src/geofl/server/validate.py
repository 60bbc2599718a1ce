"""Validation of incoming client updates: finite, right shape, sane metadata.

A malformed update is rejected with a reason that is logged and written to the round
record; the round proceeds with the remaining updates. Validation never raises: an update
arrives from an untrusted client, so every part is type-checked before it is used, and
every check is cheap (a few reductions over the ``[D]`` tensors, no loop over entries).
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from geofl.update import ClientUpdate, UpdateMeta

__all__ = ["MAX_NUM_SAMPLES", "l2_norms", "validate_header", "validate_update"]

log = logging.getLogger(__name__)

#: Largest accepted ``num_samples``: every count up to it is exact in float64 (2⁵³).
MAX_NUM_SAMPLES = 2**53
#: Uploads are copied into float32 rows, so a wider Δw must fit the float32 range.
_F32_MAX = float(torch.finfo(torch.float32).max)
_INT64_MAX = 2**63 - 1
#: Norms a float32 reduction gets right: beyond it ‖Δw‖² overflows (1e30 · 0.01 per entry
#: already does), below it the squares of the entries underflow.
_F32_NORM_BAND = (1e-18, 1e18)
_INT_FIELDS = ("client_id", "round", "steps", "bytes_sent")
#: Integers whose float is exact and cannot overflow (the fast path of :func:`_real`).
_F64_EXACT = 2**53
#: Floating dtypes within the float32 range (no range check needed).
_NARROW = frozenset({torch.float32, torch.float16, torch.bfloat16})
_FLOAT_FIELDS = ("train_loss",)  # NaN/Inf allowed: NaN is the default


def validate_update(
    update: ClientUpdate,
    dim: int,
    tensor_names: Sequence[str] = (),
    scalar_names: Sequence[str] = (),
    *,
    num_classes: int | None = None,
) -> str | None:
    """The reason ``update`` is malformed, or None if it is acceptable.

    Checks, in order: the delta is a dense ``[dim]`` floating tensor whose entries are
    finite and within the float32 range; the uploaded tensors are exactly
    ``tensor_names``, each like the delta; the metadata is an :class:`UpdateMeta`; the
    sample count is a whole number in ``[1, MAX_NUM_SAMPLES]``; the metadata scalars map
    names to finite numbers and the required ones are positive; a shared label histogram
    (000 Eq. 9–10) is a vector of ``num_classes`` finite non-negative counts with a
    positive sum; ``client_id``, ``round``, ``steps`` and ``bytes_sent`` are non-negative
    int64 integers, ``train_loss`` is a number and ``train_metrics`` maps names to numbers
    (NaN/Inf allowed there: a diverged client's metrics are reported, not refused); a
    spatial factor α_k, when present, is finite and in [0.5, 1.5] (001 Eq. 11). The
    reason names the part the first failed check looked at.

    Args:
        update: The received update.
        dim: D, the model's flat parameter count.
        tensor_names: Extra tensors the strategy expects (each ``[dim]``, finite); others
            are refused too.
        scalar_names: Metadata scalars the strategy needs (each present, finite, > 0).
        num_classes: C, the length every label histogram must have, or None to accept any.

    Returns:
        A one-line reason, or None for a well-formed update.
    """
    reason = _tensor_reason("delta", getattr(update, "delta", None), dim)
    if reason is not None:
        return reason
    reason = _uploads_reason(getattr(update, "tensors", {}), dim, tensor_names)
    if reason is not None:
        return reason
    meta = getattr(update, "meta", None)
    if not isinstance(meta, UpdateMeta):
        return f"meta is {type(meta).__name__}, expected UpdateMeta"
    return (
        _num_samples_reason(meta.num_samples)
        or _scalars_reason(meta.scalars, scalar_names)
        or _histogram_reason(meta.label_histogram, num_classes)
        or _int_fields_reason(meta)
        or _float_fields_reason(meta)
        or _train_metrics_reason(meta.train_metrics)
        or _spatial_alpha_reason(meta.spatial_alpha)
    )


def _tensor_reason(name: str, t: object, dim: int) -> str | None:
    """Why ``t`` is not a dense, finite floating ``[dim]`` tensor that fits float32, or None.

    What passes has a finite float64 L2 norm (at most 3.4e38·√D), so its statistics in the
    round record (:func:`l2_norms`, σ̂) are numbers; a float32 reduction of it may still
    overflow (‖Δw‖² of a 1e30-scaled update), which is why the record uses :func:`l2_norms`.
    """
    if not isinstance(t, torch.Tensor):
        return f"{name} is {type(t).__name__}, not a tensor"
    if t.layout != torch.strided or t.is_meta:
        where = "meta device" if t.is_meta else f"layout {t.layout}"
        return f"{name} has {where}, expected a dense tensor"
    if tuple(t.shape) != (dim,):
        return f"{name} has shape {tuple(t.shape)}, expected ({dim},)"
    if not t.is_floating_point():
        return f"{name} has dtype {t.dtype}, expected a floating type"
    # A finite sum implies every entry is finite (one reduction, no [D] mask); only a
    # non-finite sum needs the elementwise check, which also counts the bad entries.
    if not math.isfinite(t.sum().item()):
        bad = int((~torch.isfinite(t)).sum())
        if bad:
            return f"{name} has {bad} non-finite values (NaN/Inf)"
    if t.dtype not in _NARROW and torch.finfo(t.dtype).max > _F32_MAX and t.numel():
        lo, hi = torch.aminmax(t.detach())
        peak = max(-float(lo), float(hi))
        if peak > _F32_MAX:  # the float32 row it is copied into would hold inf
            return f"{name} has values up to |{peak:.3g}|, beyond the float32 range"
    return None


def l2_norms(x: torch.Tensor) -> torch.Tensor:
    """``[K]`` float64 ‖x_k‖₂ of the rows of ``x`` ``[K, D]`` (or ``[1]`` of a ``[D]``),
    free of overflow and underflow.

    Each row's norm is first reduced in its own dtype (one pass, no copy); a row whose
    result falls outside the band where a float32 sum of squares is exact enough (a finite
    1e30-scaled update has ‖Δw‖² = inf in float32) is reduced again in float64, which holds
    the square of every float32 value. Only such rows are copied, one at a time.

    Args:
        x: ``[K, D]`` (or ``[D]``) floating tensor.

    Returns:
        ``[K]`` float64 norms (NaN/inf only where a row holds NaN/inf).
    """
    rows = x.detach().reshape(1, -1) if x.dim() == 1 else x.detach()
    norms: torch.Tensor = torch.linalg.vector_norm(rows, dim=1).to(torch.float64)
    lo, hi = _F32_NORM_BAND
    for k in torch.nonzero(~((norms >= lo) & (norms <= hi))).flatten().tolist():
        norms[k] = torch.linalg.vector_norm(rows[k], dtype=torch.float64)
    return norms


def _uploads_reason(extra: object, dim: int, tensor_names: Sequence[str]) -> str | None:
    """Why the extra uploads are not exactly ``tensor_names`` → valid tensors, or None."""
    if type(extra) is dict and not extra and not tensor_names:  # nothing expected, none sent
        return None
    if not isinstance(extra, Mapping):
        return f"uploaded tensors are {type(extra).__name__}, expected a mapping"
    names = list(extra)
    odd = [_brief(k) for k in names if not isinstance(k, str)]
    if odd:
        return f"uploaded tensors have non-string names {', '.join(odd)}"
    if set(names) != set(tensor_names):
        got = ", ".join(_short(k) for k in sorted(names))
        return f"uploaded tensors [{got}], expected {sorted(tensor_names)}"
    for name in tensor_names:
        reason = _tensor_reason(name, extra[name], dim)
        if reason is not None:
            return reason
    return None


def _num_samples_reason(n: object) -> str | None:
    """Why ``n`` is not a whole sample count in ``[1, MAX_NUM_SAMPLES]``, or None."""
    value = _real(n)
    if value is None or not math.isfinite(value):
        return f"num_samples={_brief(n)} is not a finite number"
    if value <= 0:
        return f"num_samples={_brief(n)} must be positive"
    if not value.is_integer():
        return f"num_samples={_brief(n)} is not a whole number"
    if value > MAX_NUM_SAMPLES:
        return f"num_samples={_brief(n)} exceeds {MAX_NUM_SAMPLES}"
    return None


def _scalars_reason(scalars: object, required: Sequence[str]) -> str | None:
    """Why ``scalars`` is not a name → finite number mapping with positive ``required``."""
    if not isinstance(scalars, Mapping):
        return f"metadata scalars are {type(scalars).__name__}, expected a mapping"
    for key, value in scalars.items():
        if not isinstance(key, str):
            return f"metadata scalar name {_brief(key)} is not a string"
        number = _real(value)
        if number is None or not math.isfinite(number):
            return f"metadata scalar {_short(key)}={_brief(value)} is not a finite number"
    for key in required:
        number = _real(scalars.get(key))  # every present value is a finite number by now
        if number is None or not number > 0:
            return f"metadata scalar {key}={_brief(scalars.get(key))} must be present and positive"
    return None


def _histogram_reason(hist: object, num_classes: int | None) -> str | None:
    """Why ``hist`` is not None or ``[num_classes]`` counts with a positive sum, or None."""
    if hist is None:
        return None
    try:
        h = np.asarray(hist)
    except Exception:  # ragged lists, tensors that need grad, objects with a bad __array__
        return f"label_histogram is a {type(hist).__name__} that is not an array of counts"
    real = np.issubdtype(h.dtype, np.integer) or np.issubdtype(h.dtype, np.floating)
    if h.ndim != 1 or not real:
        return f"label_histogram has shape {h.shape} and dtype {h.dtype}, expected [C] counts"
    if num_classes is not None and h.size != num_classes:
        return f"label_histogram has {h.size} classes, expected {num_classes}"
    if h.dtype.kind in "iu":  # integer counts are finite: none negative, one positive
        counts = h.tolist()  # a few classes: Python's min/any beat two numpy reductions
        if counts and min(counts) < 0:
            return "label_histogram has negative or non-finite counts"
        return None if any(counts) else "label_histogram is all zeros"
    if not np.isfinite(h).all() or (h < 0).any():
        return "label_histogram has negative or non-finite counts"
    with np.errstate(over="ignore"):  # an overflow is reported below, not warned about
        total = float(h.sum(dtype=np.float64))
    if not math.isfinite(total):
        return "label_histogram counts sum beyond the float64 range"
    if not total > 0:
        return "label_histogram is all zeros"
    return None


def validate_header(meta: object) -> str | None:
    """Why ``meta`` is not an :class:`UpdateMeta` with non-negative int64 ``client_id``,
    ``round``, ``steps`` and ``bytes_sent``, or None.

    These are the fields a network model reads to route and size an upload, so a scheduler
    checks them before the network decides whether the upload arrives; an upload that
    passes :func:`validate_update` passes this check too.
    """
    if not isinstance(meta, UpdateMeta):
        return f"meta is {type(meta).__name__}, expected UpdateMeta"
    return _int_fields_reason(meta)


def _int_fields_reason(meta: UpdateMeta) -> str | None:
    """Why a counter or id of ``meta`` is not a non-negative int64 integer, or None."""
    for name in _INT_FIELDS:
        value: object = getattr(meta, name)
        if type(value) is int and 0 <= value <= _INT64_MAX:  # the usual case, no ABC check
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or not 0 <= int(value) <= _INT64_MAX
        ):
            return f"metadata {name}={_brief(value)} is not an integer in [0, 2**63)"
    return None


def _float_fields_reason(meta: UpdateMeta) -> str | None:
    """Why ``train_loss`` is not a number (NaN/Inf allowed), or None."""
    for name in _FLOAT_FIELDS:
        value = getattr(meta, name)
        if _real(value) is None:
            return f"metadata {name}={_brief(value)} is not a number"
    return None


def _train_metrics_reason(metrics: object) -> str | None:
    """Why ``train_metrics`` is not a mapping of string names to numbers, or None."""
    if not isinstance(metrics, Mapping):
        return f"metadata train_metrics is {type(metrics).__name__}, expected a mapping"
    for name, value in metrics.items():
        if not isinstance(name, str):
            return f"metadata train_metrics has a non-string name {_brief(name)}"
        if _real(value) is None:
            return f"metadata train_metrics[{_short(repr(name))}]={_brief(value)} is not a number"
    return None


#: The range of the spatial factor α_k (001 §6.1.2: linearly scaled into [0.5, 1.5]).
ALPHA_RANGE = (0.5, 1.5)


def _spatial_alpha_reason(alpha: object) -> str | None:
    """Why ``spatial_alpha`` is not None or a finite number in [0.5, 1.5], or None."""
    if alpha is None:
        return None
    value = _real(alpha)
    if value is None or not math.isfinite(value):
        return f"metadata spatial_alpha={_brief(alpha)} is not a finite number"
    if not ALPHA_RANGE[0] <= value <= ALPHA_RANGE[1]:
        return f"metadata spatial_alpha={_brief(alpha)} is outside [0.5, 1.5]"
    return None


def _real(x: object) -> float | None:
    """``x`` as a float if it is a real number (not a bool) within float64, else None."""
    if type(x) is float:  # the usual cases, no ABC check
        return x
    if type(x) is int and -_F64_EXACT <= x <= _F64_EXACT:
        return float(x)
    if isinstance(x, bool | np.bool_) or not isinstance(x, numbers.Real):
        return None
    try:
        return float(x)
    except (OverflowError, TypeError, ValueError):  # e.g. 10**400
        return None


def _brief(x: object) -> str:
    """A short one-line repr of an untrusted value."""
    try:
        text = repr(x)
    except Exception:  # e.g. an int past sys.get_int_max_str_digits()
        text = f"<{type(x).__name__}>"
    return _short(text)


def _short(text: str, limit: int = 40) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
