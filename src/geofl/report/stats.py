"""Mean ± std over seeds and the display units of metrics.

Conventions:
    * ``std`` is the **sample** standard deviation (``ddof=1``), as papers use for mean ± std
      over a handful of seeds (e.g. 000 Table 1: "95.04 ± 0.32" over three seeds).
    * Undefined values (JSON ``null``, NaN) are left out of a :class:`Stat`; its ``n`` counts
      only the values used. With ``n == 0`` mean and std are NaN.
    * A single value has no spread: :func:`format_pm` shows it without "±".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypedDict

import numpy as np

__all__ = ["PERCENT_METRICS", "Stat", "format_pm", "make_stat", "metric_scale", "metric_unit"]

#: Metrics that are fractions in [0, 1]: reports show them in percent.
PERCENT_METRICS = frozenset(
    {"accuracy", "macro_f1", "micro_f1", "map", "roc_auc", "f1", "precision", "recall", "asr"}
)


def metric_scale(name: str) -> float:
    """Display scale of a metric: 100 (percent) for fractions, else 1."""
    return 100.0 if name in PERCENT_METRICS else 1.0


def metric_unit(name: str) -> str:
    """Display unit suffix: ``" (%)"`` for fractions, else ``""``."""
    return " (%)" if name in PERCENT_METRICS else ""


class Stat(TypedDict):
    """Mean ± sample std (``ddof=1``) of the finite ``values``; ``n == len(values)``."""

    mean: float
    std: float
    values: list[float]
    n: int


def make_stat(values: Sequence[float]) -> Stat:
    """Mean and sample std (``ddof=1``; 0.0 for one value) of the finite ``values``."""
    vals = [float(v) for v in values if math.isfinite(v)]
    n = len(vals)
    if n == 0:
        return Stat(mean=math.nan, std=math.nan, values=[], n=0)
    arr = np.asarray(vals, dtype=np.float64)
    std = float(arr.std(ddof=1)) if n > 1 else 0.0
    return Stat(mean=float(arr.mean()), std=std, values=vals, n=n)


def format_pm(stat: Stat, scale: float = 100.0, digits: int = 2) -> str:
    """``"95.04 ± 0.32"`` from a Stat of fractions (``scale`` 100 → percent); ``"–"`` if empty.

    A single value has no spread and is shown alone (``"95.04"``, not ``"95.04 ± 0.00"``).
    """
    if stat["n"] == 0 or not math.isfinite(stat["mean"]):
        return "–"
    if stat["n"] == 1:
        return f"{stat['mean'] * scale:.{digits}f}"
    return f"{stat['mean'] * scale:.{digits}f} ± {stat['std'] * scale:.{digits}f}"
