"""Coordinate-wise median (Yin et al. 2018, §3), midpoint for even K, with each row's
effective weight."""

from __future__ import annotations

import torch

from geofl.server.aggregators import Aggregate
from geofl.server.robust._common import _check_updates, _uniform
from geofl.server.robust.order_stats import _order_statistics

__all__ = ["coordinate_median", "coordinate_median_aggregate", "coordinate_median_weights"]


def _median_positions(k: int) -> tuple[int, int]:
    half = k // 2
    return (half, half + 1) if k % 2 else (half - 1, half + 1)


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median (Yin et al. 2018, §3).

    For odd K the middle value; for even K the mean of the two middle values (computed in
    float64, so it neither overflows nor moves when both are equal). ``torch.median`` would
    return the lower one; the midpoint is the usual statistical median and is symmetric
    under negation of the updates. :func:`coordinate_median_aggregate` also returns the
    rows' effective weights.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.

    Returns:
        ``[D]`` in the dtype of ``updates``.
    """
    k, _ = _check_updates(updates)
    if k == 1:
        return updates[0].clone()
    return _order_statistics(updates, *_median_positions(k), shares=False)[0]


def coordinate_median_aggregate(updates: torch.Tensor) -> Aggregate:
    """Coordinate-wise median (Yin et al. 2018, §3) and each row's effective weight.

    Effective weight of row k: the average over the D coordinates of its share of the
    middle order statistic(s) — 1 for the row holding the middle value when K is odd, ½ for
    each of the two middle values when K is even, 0 otherwise. Ties share equally, as in
    :func:`trimmed_mean_aggregate` (which this is, with b = ⌊(K − 1)/2⌋): e.g. K = 5 with
    values 1, 3, 3, 3, 9 gives each 3 a share of ⅓. Non-negative, summing to 1.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.

    Returns:
        :class:`~geofl.server.aggregators.Aggregate`: ``delta`` ``[D]`` as
        :func:`coordinate_median`, ``weights`` ``[K]`` float64.
    """
    k, _ = _check_updates(updates)
    if k == 1:
        return Aggregate(updates[0].clone(), _uniform(1))
    delta, weights = _order_statistics(updates, *_median_positions(k), shares=True)
    return Aggregate(delta, weights if weights is not None else _uniform(k))


def coordinate_median_weights(updates: torch.Tensor) -> torch.Tensor:
    """``[K]`` float64 effective weights of the median; see :func:`coordinate_median_aggregate`.

    Costs the same pass as the aggregate (Yin et al. 2018, §3).
    """
    return coordinate_median_aggregate(updates).weights
