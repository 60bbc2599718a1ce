"""The flat server tier: defenses → weighting → aggregator (DESIGN "server side").

Strategies stay thin: the math lives in free functions over the ``[K, D]`` update tensor
(:mod:`~geofl.server.aggregators`, :mod:`~geofl.server.weighting`,
:mod:`~geofl.server.defenses`); this module only composes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from geofl.hierarchy.tiers import TIERS, AggregationResult, Tier
from geofl.registry import NoParams
from geofl.server.aggregators import Aggregator
from geofl.server.defenses import Defense
from geofl.server.weighting import Weighting
from geofl.update import UpdateMeta

__all__ = ["FlatTier", "build_flat_tier"]


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

    def __call__(
        self, updates: torch.Tensor, metas: Sequence[UpdateMeta], round_idx: int
    ) -> AggregationResult:
        """Aggregate ``updates`` (``[K, D]``) with their ``metas`` (length K)."""
        k = updates.shape[0]
        kept = torch.ones(k, dtype=torch.bool)
        for defense in self.defenses:
            kept = _expand(kept, defense(updates[kept]))
        idx = torch.nonzero(kept).flatten()
        weights = torch.zeros(k, dtype=torch.float64)
        if idx.numel() == 0:
            return AggregationResult(torch.zeros_like(updates[0]), weights, kept)
        raw = self.weighting([metas[int(i)] for i in idx], round_idx)
        raw = raw / raw.sum()
        # Index (a copy of the kept rows) only when a defense dropped something.
        kept_updates = updates if idx.numel() == k else updates[idx]
        agg = self.aggregator(kept_updates, raw)
        weights[idx] = agg.weights
        return AggregationResult(agg.delta, weights, kept)


def _expand(kept: torch.Tensor, sub_mask: torch.Tensor) -> torch.Tensor:
    """Scatter a mask over the currently kept rows back to all K rows."""
    out = torch.zeros_like(kept)
    out[torch.nonzero(kept).flatten()] = sub_mask
    return out


@TIERS.register("flat")
def build_flat_tier(
    _: NoParams,
    *,
    weighting: Weighting,
    aggregator: Aggregator,
    defenses: Sequence[Defense] = (),
) -> Tier:
    """A single server tier: defenses, then weighting, then the aggregator."""
    return FlatTier(weighting, aggregator, defenses)
