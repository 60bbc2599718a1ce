"""Aggregators: pure functions ``(updates [K, D], weights [K]) -> [D]``.

They never modify their inputs. Robust combiners (trimmed mean, median, Krum; 000 §4.5)
register here too.
"""

from __future__ import annotations

from typing import Protocol

import torch

from geofl.registry import NoParams, Registry

__all__ = ["AGGREGATORS", "Aggregator", "weighted_mean"]


class Aggregator(Protocol):
    """Combine a round's updates into one update."""

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor) -> torch.Tensor: ...


#: Aggregator registry: ``mean``, ...
AGGREGATORS: Registry[Aggregator] = Registry("aggregator")


def weighted_mean(updates: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_k α_k Δw_k with α normalised to sum 1 (FedAvg, McMahan et al. 2017).

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
    return alpha @ updates


@AGGREGATORS.register("mean")
def build_mean(_: NoParams) -> Aggregator:
    """Weighted mean of the updates (FedAvg when weighted by sample count)."""
    return weighted_mean
