"""A tier: one level of aggregation over ``[K, D]`` updates — defenses → weighting → combiner.

A flat FL server is one tier; hierarchical FL (cluster driver → LEO regional → GEO global,
003 Alg. 3) stacks tiers that feed each other, so a tier returns its aggregate together with
the metadata the next tier needs (its sample count). The 003 GEO runs the method's strategy
over the regional models with this same tier inside it, its weighting multiplied by the
staleness × fairness weights (:mod:`geofl.engine.hierarchy.geo`).

Strategies stay thin: the math lives in free functions over the ``[K, D]`` update tensor
(:mod:`~geofl.server.aggregators`, :mod:`~geofl.server.weighting`,
:mod:`~geofl.server.defenses`); a tier only composes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from geofl.server.aggregators import Aggregator
from geofl.server.defenses import Defense
from geofl.server.weighting import Weighting
from geofl.update import UpdateMeta

__all__ = ["AggregationResult", "FlatTier", "Tier"]


@dataclass(frozen=True)
class AggregationResult:
    """Output of one tier.

    Attributes:
        delta: ``[D]`` aggregated update.
        weights: ``[K]`` float64 effective weights (0 for dropped updates; sum 1).
        kept: ``[K]`` bool, updates that passed the defenses.
        num_samples: Σ n_k over the kept updates (the tier's weight one level up).
    """

    delta: torch.Tensor
    weights: torch.Tensor
    kept: torch.Tensor
    num_samples: int = 0


class Tier(Protocol):
    """Aggregate the updates arriving at one tier in one round."""

    def __call__(
        self, updates: torch.Tensor, metas: Sequence[UpdateMeta], round_idx: int
    ) -> AggregationResult: ...


class FlatTier:
    """One aggregation tier composed of defenses, a weighting and an aggregator.

    Args:
        weighting: Per-update weights from metadata.
        aggregator: Combiner over ``[K, D]``.
        defenses: Filters applied first; an update dropped by any defense gets weight 0.
    """

    def __init__(
        self, weighting: Weighting, aggregator: Aggregator, defenses: Sequence[Defense] = ()
    ) -> None:
        self.weighting = weighting
        self.aggregator = aggregator
        self.defenses = tuple(defenses)

    def select(
        self, updates: torch.Tensor, metas: Sequence[UpdateMeta], round_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Defenses then weighting: the ``[K]`` kept mask and the kept rows' normalised
        float64 weights (``[K_kept]``)."""
        kept = torch.ones(updates.shape[0], dtype=torch.bool)
        for defense in self.defenses:
            kept = _expand(kept, defense(updates[kept]))
        idx = torch.nonzero(kept).flatten()
        if idx.numel() == 0:
            return kept, torch.zeros(0, dtype=torch.float64)
        raw = self.weighting([metas[int(i)] for i in idx], round_idx)
        return kept, raw / raw.sum()

    def combine(
        self,
        updates: torch.Tensor,
        metas: Sequence[UpdateMeta],
        kept: torch.Tensor,
        weights: torch.Tensor,
    ) -> AggregationResult:
        """The aggregator over the kept rows with the given normalised weights."""
        k = updates.shape[0]
        idx = torch.nonzero(kept).flatten()
        full = torch.zeros(k, dtype=torch.float64)
        if idx.numel() == 0:
            return AggregationResult(torch.zeros_like(updates[0]), full, kept)
        # Index (a copy of the kept rows) only when a defense dropped something.
        kept_updates = updates if idx.numel() == k else updates[idx]
        agg = self.aggregator(kept_updates, weights)
        full[idx] = agg.weights
        return AggregationResult(
            agg.delta, full, kept, num_samples=sum(metas[int(i)].num_samples for i in idx)
        )

    def __call__(
        self, updates: torch.Tensor, metas: Sequence[UpdateMeta], round_idx: int
    ) -> AggregationResult:
        """Aggregate ``updates`` (``[K, D]``) with their ``metas`` (length K)."""
        kept, weights = self.select(updates, metas, round_idx)
        return self.combine(updates, metas, kept, weights)


def _expand(kept: torch.Tensor, sub_mask: torch.Tensor) -> torch.Tensor:
    """Scatter a mask over the currently kept rows back to all K rows."""
    out = torch.zeros_like(kept)
    out[torch.nonzero(kept).flatten()] = sub_mask
    return out
