"""The tier protocol: one level of aggregation over ``[K, D]`` updates.

A flat FL server is one tier (:class:`geofl.server.strategy.FlatTier`); hierarchical FL
(cluster driver → LEO regional → GEO global, 003 Alg. 3) stacks tiers that exchange models
tagged with the round they were produced in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from geofl.registry import Registry
from geofl.update import UpdateMeta

__all__ = ["TIERS", "AggregationResult", "Tier"]


@dataclass(frozen=True)
class AggregationResult:
    """Output of one tier.

    Attributes:
        delta: ``[D]`` aggregated update.
        weights: ``[K]`` float64 normalised weights actually used (0 for dropped updates).
        kept: ``[K]`` bool, updates that passed the defenses.
    """

    delta: torch.Tensor
    weights: torch.Tensor
    kept: torch.Tensor


class Tier(Protocol):
    """Aggregate the updates arriving at one tier in one round."""

    def __call__(
        self, updates: torch.Tensor, metas: Sequence[UpdateMeta], round_idx: int
    ) -> AggregationResult: ...


#: Tier registry: ``flat``, ...
TIERS: Registry[Tier] = Registry("tier")
