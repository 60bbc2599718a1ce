"""003 Table 10: the staleness distribution of the updates the GEO incorporated — the
fraction of updates and their share of the GEO update per bucket (0–1, 2–3, ≥ 4 rounds) —
and a test metric per bucket (:class:`StalenessBucket` says how it is defined)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["STALENESS_BUCKETS", "StalenessBucket", "staleness_table"]


#: Table 10's staleness buckets (rounds, inclusive; ``None``: no upper bound).
STALENESS_BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 1), (2, 3), (4, None))


@dataclass(frozen=True)
class StalenessBucket:
    """One row of 003 Table 10 over a set of incorporated tractor updates.

    Attributes:
        low: Smallest staleness t − t' of the bucket (rounds).
        high: Largest, or None for "this or more".
        updates: Updates incorporated at this staleness.
        fraction: Their share of all incorporated updates ("Fraction of Updates").
        contribution: Their share of the GEO update, Σ of their ``geo_weight`` over the
            total ("Weighted Contribution").
        metric: "AUC per bucket", which the paper does not define. Ours: every incorporated
            regional model w̄_l is evaluated on the test split (the task's primary metric,
            AUC for Task B); an update carries the value of the regional model it reached
            the GEO in, and the bucket's value is the mean over its updates — i.e. the
            regional models' test metrics weighted by how many of their updates fall in
            the bucket. None when the bucket is empty or the metric was not measured.
    """

    low: int
    high: int | None
    updates: int
    fraction: float | None
    contribution: float | None
    metric: float | None

    @property
    def label(self) -> str:
        """``"0-1"``, ``"2-3"``, ``"4+"``."""
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high}"


def staleness_table(
    staleness: Sequence[int], weight: Sequence[float], metric: Sequence[float] | None = None
) -> list[StalenessBucket]:
    """003 Table 10 over aligned per-update staleness, GEO weight and (optionally) the test
    metric of the regional model that carried the update (:class:`StalenessBucket`).

    Args:
        staleness: ``[U]`` t − t' of every incorporated update.
        weight: ``[U]`` its share of the GEO update.
        metric: ``[U]`` its regional model's test metric (NaN: not measured), or None.
    """
    s = np.asarray(staleness, dtype=np.int64)
    w = np.asarray(weight, dtype=np.float64)
    m = None if metric is None else np.asarray(metric, dtype=np.float64)
    total_w = float(w.sum())
    out = []
    for low, high in STALENESS_BUCKETS:
        inside = (s >= low) & (s <= (high if high is not None else np.iinfo(np.int64).max))
        n = int(inside.sum())
        value = None
        if m is not None and n:
            vals = m[inside]
            vals = vals[np.isfinite(vals)]
            value = float(vals.mean()) if vals.size else None
        out.append(
            StalenessBucket(
                low,
                high,
                n,
                fraction=n / s.size if s.size else None,
                contribution=float(w[inside].sum()) / total_w if total_w > 0 else None,
                metric=value,
            )
        )
    return out
