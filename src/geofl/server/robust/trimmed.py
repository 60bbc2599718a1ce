"""Coordinate-wise β-trimmed mean (Yin et al. 2018, "Byzantine-robust distributed learning:
towards optimal statistical rates", §3), with each row's effective weight."""

from __future__ import annotations

import math

import torch

from geofl.server.aggregators import Aggregate
from geofl.server.robust._common import _check_updates, _uniform
from geofl.server.robust.order_stats import _order_statistics

__all__ = ["trim_count", "trimmed_mean", "trimmed_mean_aggregate", "trimmed_mean_weights"]

#: Slack for ``floor(β·K)`` so that e.g. β = 0.29, K = 100 trims 29, not 28 (0.29·100 < 29).
_FLOOR_SLACK = 1e-9


def trim_count(num_updates: int, trim_fraction: float) -> int:
    """b = ⌊β·K⌋, the number of values dropped at *each* end of every coordinate.

    Raises:
        ValueError: if ``trim_fraction`` is outside ``[0, 0.5)`` or leaves no value.
    """
    if not 0.0 <= trim_fraction < 0.5:
        raise ValueError(
            f"trim_fraction must be in [0, 0.5), got {trim_fraction!r}; it is the fraction "
            "dropped at each end, so 0.5 or more would drop every value"
        )
    b = math.floor(trim_fraction * num_updates + _FLOOR_SLACK)
    if num_updates - 2 * b < 1:
        raise ValueError(
            f"trim_fraction={trim_fraction!r} drops {b} values at each end of K={num_updates} "
            "updates, leaving none; lower trim_fraction"
        )
    return b


def trimmed_mean(updates: torch.Tensor, *, trim_fraction: float) -> torch.Tensor:
    """Coordinate-wise β-trimmed mean (Yin et al. 2018, §3).

    For every coordinate j, drop the b = ⌊β·K⌋ smallest and the b largest of the K values
    ``updates[:, j]`` and average the remaining K − 2b (ties are handled exactly: the values
    are sorted). The sum is taken in float64 and rounded once to the input dtype. Unweighted:
    the paper's estimator ignores sample sizes, and so does the registered aggregator. With
    b = 0 the result is ``updates.mean(0)`` itself. :func:`trimmed_mean_aggregate` also
    returns the rows' effective weights.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        trim_fraction: β ∈ [0, 0.5), fraction trimmed at each end.

    Returns:
        ``[D]`` in the dtype of ``updates``.

    Raises:
        ValueError: if β is outside [0, 0.5), K − 2b < 1, or ``updates`` is not ``[K, D]``.
    """
    k, _ = _check_updates(updates)
    b = trim_count(k, trim_fraction)
    if b == 0:
        return updates.mean(dim=0)
    return _order_statistics(updates, b, k - b, shares=False)[0]


def trimmed_mean_aggregate(updates: torch.Tensor, *, trim_fraction: float) -> Aggregate:
    """β-trimmed mean (Yin et al. 2018, §3) and each row's effective weight, in one pass.

    Effective weight of row k: at coordinate d the K − 2b kept order statistics (sorted
    positions b … K − b − 1) carry 1/(K − 2b) each, and row k holds the share of the position
    its value ``updates[k, d]`` occupies — 1/(K − 2b) if kept, 0 if trimmed. Ties: the rows
    of a tie group share the kept positions of that group's value equally, so a group
    straddling the kept/trimmed boundary (e.g. three equal values at sorted positions b − 1,
    b, b + 1) gives each member (kept positions of the group)/(group size)/(K − 2b); the
    trimmed mean at d is unchanged, since tied values are equal. The weight is the average
    of these shares over the D coordinates, so the weights are non-negative and sum to 1
    (exactly 1/K each when b = 0). It measures how much of the aggregate each row accounts
    for: a row trimmed at every coordinate gets 0.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        trim_fraction: β ∈ [0, 0.5), fraction trimmed at each end.

    Returns:
        :class:`~geofl.server.aggregators.Aggregate`: ``delta`` ``[D]`` as
        :func:`trimmed_mean`, ``weights`` ``[K]`` float64.

    Raises:
        ValueError: as :func:`trimmed_mean`.
    """
    k, _ = _check_updates(updates)
    b = trim_count(k, trim_fraction)
    if b == 0:
        return Aggregate(updates.mean(dim=0), _uniform(k))
    delta, weights = _order_statistics(updates, b, k - b, shares=True)
    return Aggregate(delta, weights if weights is not None else _uniform(k))


def trimmed_mean_weights(updates: torch.Tensor, *, trim_fraction: float) -> torch.Tensor:
    """``[K]`` float64 effective weights of the β-trimmed mean; see :func:`trimmed_mean_aggregate`.

    Costs the same pass as the aggregate (Yin et al. 2018, §3).
    """
    return trimmed_mean_aggregate(updates, trim_fraction=trim_fraction).weights
