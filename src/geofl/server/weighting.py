"""Weightings: per-update scores combined multiplicatively, normalised by the aggregator.

A weighting maps the round's update metadata to ``[K]`` non-negative weights. Later papers
add JS consistency (000 Eq. 9–17), spatial α (001 Eq. 10–11), reputation (004 Eq. 8–9),
staleness and fairness (003 Eq. 8, 11–12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

from geofl.registry import CheckContext, NoParams, Registry
from geofl.update import UpdateMeta

__all__ = [
    "WEIGHTINGS",
    "Weighting",
    "check_num_samples_shared",
    "data_size_weights",
    "spatial_weights",
]


class Weighting(Protocol):
    """Per-update weights ``[K]`` (float64) from the round's metadata."""

    def __call__(self, metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor: ...


#: Weighting registry: ``data_size``, ``uniform``, ...
WEIGHTINGS: Registry[Weighting] = Registry("weighting")


def data_size_weights(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
    """n_k / Σ n_j — FedAvg's sample-size weights (000 §3.1.1)."""
    n = torch.tensor([m.num_samples for m in metas], dtype=torch.float64)
    return n / n.sum()


def uniform_weights(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
    """1 / K for every update."""
    return torch.full((len(metas),), 1.0 / max(len(metas), 1), dtype=torch.float64)


def check_num_samples_shared(_: object, ctx: CheckContext) -> None:
    """Sample-size weights need n_k; refuse a release step that withholds it."""
    if "hides_num_samples" in ctx.traits.get("release", frozenset()):
        ctx.fail(
            "name",
            "this weighting needs each client's sample count n_k, which a release step of "
            "this method withholds; use weighting: {name: uniform} or drop that step",
        )


@WEIGHTINGS.register("data_size", check=check_num_samples_shared)
def build_data_size(_: NoParams) -> Weighting:
    """Weights proportional to local sample counts n_k (FedAvg)."""
    return data_size_weights


@WEIGHTINGS.register("uniform")
def build_uniform(_: NoParams) -> Weighting:
    """Equal weights."""
    return uniform_weights


def spatial_weights(alpha: torch.Tensor, num_samples: torch.Tensor) -> torch.Tensor:
    """ω_k = α_k·|D_k| / Σ_{j∈S_t} α_j·|D_j| over the round's participants (001 Eq. 11).

    Args:
        alpha: ``[K]`` spatial factors α_k ∈ [0.5, 1.5].
        num_samples: ``[K]`` local sample counts |D_k|.

    Returns:
        ``[K]`` float64 weights on the probability simplex.
    """
    mass = alpha.double() * num_samples.double()
    return mass / mass.sum()


def _spatial_weights(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
    alpha = torch.tensor([m.spatial_alpha for m in metas], dtype=torch.float64)
    n = torch.tensor([m.num_samples for m in metas], dtype=torch.float64)
    return spatial_weights(alpha, n)


def check_spatial_alpha_released(params: object, ctx: CheckContext) -> None:
    """Spatial weighting needs α_k from the ``spatial_alpha`` release step, and n_k."""
    check_num_samples_shared(params, ctx)
    if "spatial_alpha" not in ctx.traits.get("release", frozenset()):
        ctx.fail(
            "name",
            "spatial weighting needs each client's α_k (001 Eq. 10); add the release step "
            "{name: spatial_alpha} to this method",
        )


@WEIGHTINGS.register("spatial", check=check_spatial_alpha_released)
def build_spatial(_: NoParams) -> Weighting:
    """ω_k ∝ α_k·n_k with the client's spatial factor α_k (001 Eq. 11)."""
    return _spatial_weights
