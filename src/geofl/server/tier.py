"""A tier: one level of aggregation over ``[K, D]`` updates — defenses → weighting → combiner.

A flat FL server is one tier; hierarchical FL (cluster driver → LEO regional → GEO global,
003 Alg. 3) stacks tiers that feed each other, so a tier returns its aggregate together with
the metadata the next tier needs (its sample count). All three 003 tiers are this tier
(:mod:`geofl.engine.hierarchy.tiers`): a driver is FedAvg over its tractors, a LEO the
redundancy filter as a defense then the regional mean, and the GEO a strategy with this tier
inside, its weighting multiplied by the staleness × fairness weights
(:mod:`geofl.engine.hierarchy.geo`).

A tier below the GEO also carries *models* up, not only updates: a driver's tractors (and a
LEO's drivers) may start from different global versions, so the aggregated model is not
the aggregated update plus one base. Such a tier is given the models beside the updates
(``models``) and applies the same selection and weights to them (``AggregationResult.model``).

Strategies stay thin: the math lives in free functions over the ``[K, D]`` update tensor
(:mod:`~geofl.server.aggregators`, :mod:`~geofl.server.weighting`,
:mod:`~geofl.server.defenses`); a tier only composes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
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
        model: ``[D]`` the same combination of the companion models, when the tier was
            given them (a hierarchy tier below the GEO); None otherwise.
    """

    delta: torch.Tensor
    weights: torch.Tensor
    kept: torch.Tensor
    num_samples: int = 0
    model: torch.Tensor | None = None


class Tier(Protocol):
    """Aggregate the updates arriving at one tier in one round (and, given ``models``
    ``[K, D]`` aligned with them, the models alike: the filters judge the updates, and the
    models are combined with the updates' kept rows and weights)."""

    def __call__(
        self,
        updates: torch.Tensor,
        metas: Sequence[UpdateMeta],
        round_idx: int,
        *,
        models: torch.Tensor | None = None,
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
        self,
        updates: torch.Tensor,
        metas: Sequence[UpdateMeta],
        round_idx: int,
        *,
        models: torch.Tensor | None = None,
    ) -> AggregationResult:
        """Aggregate ``updates`` (``[K, D]``) with their ``metas`` (length K), and
        ``models`` (``[K, D]``, optional) with the same kept rows and weights. The
        effective weights are those the combiner reports on the updates."""
        kept, weights = self.select(updates, metas, round_idx)
        res = self.combine(updates, metas, kept, weights)
        if models is None:
            return res
        return replace(res, model=self.combine(models, metas, kept, weights).delta)


def _expand(kept: torch.Tensor, sub_mask: torch.Tensor) -> torch.Tensor:
    """Scatter a mask over the currently kept rows back to all K rows."""
    out = torch.zeros_like(kept)
    out[torch.nonzero(kept).flatten()] = sub_mask
    return out
