"""Aggregators: pure functions ``(updates [K, D], weights [K]) -> Aggregate``.

An aggregator returns the combined ``[D]`` update together with the per-update weights it
*effectively* used: a weighted mean uses the weights it was given; Krum puts all weight on
the row it selected; coordinate-wise rules report each row's share of the kept order
statistics (see :mod:`geofl.server.robust`). Records, governance credit and reports use
these effective weights, never the nominal ones. Aggregators never modify their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from geofl.registry import NoParams, Registry
from geofl.server.columns import fused, linear_combinations

__all__ = ["AGGREGATORS", "Aggregate", "Aggregator", "weighted_mean"]


@dataclass(frozen=True)
class Aggregate:
    """What an aggregator returns.

    Attributes:
        delta: ``[D]`` combined update.
        weights: ``[K]`` float64 effective weight of each input row, non-negative, summing
            to 1: how much of ``delta`` each row accounts for.
    """

    delta: torch.Tensor
    weights: torch.Tensor


class Aggregator(Protocol):
    """Combine a round's updates (``[K, D]``) given normalised ``[K]`` float64 weights."""

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor) -> Aggregate: ...


#: Aggregator registry: ``mean``, ...
AGGREGATORS: Registry[Aggregator] = Registry("aggregator")


def weighted_mean(updates: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_k α_k Δw_k with α normalised to sum 1 (FedAvg, McMahan et al. 2017).

    One matrix–vector product; on a stack large enough for the compiled kernels
    (:func:`geofl.server.columns.fused`), one streamed read of it on the worker threads.

    Args:
        updates: ``[K, D]`` float32.
        weights: ``[K]`` non-negative, not all zero.

    Returns:
        ``[D]`` float32.
    """
    if updates.ndim != 2 or weights.shape != (updates.shape[0],):
        raise ValueError(
            f"expected updates [K, D] and weights [K], got {tuple(updates.shape)} and "
            f"{tuple(weights.shape)}"
        )
    w = weights.to(torch.float64)
    total = float(w.sum())
    if not total > 0 or bool((w < 0).any()):
        raise ValueError(f"weights must be non-negative with a positive sum, got {w.tolist()}")
    alpha = (w / total).to(updates.dtype)
    if fused(updates):
        return linear_combinations(alpha[None], updates)[0]
    return alpha @ updates


@AGGREGATORS.register("mean", traits=("linear",))
def build_mean(_: NoParams) -> Aggregator:
    """Weighted mean of the updates (FedAvg when weighted by sample count)."""

    def mean(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        w = weights.to(torch.float64)
        return Aggregate(weighted_mean(updates, weights.to(updates.dtype)), w / w.sum())

    return mean
