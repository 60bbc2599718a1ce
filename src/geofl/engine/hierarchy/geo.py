"""The GEO step of the 003 hierarchy as a :class:`~geofl.server.strategy.Strategy`.

The GEO aggregates the regional models the LEOs relayed since its last step (Alg. 3 l. 7–11).
Each regional model enters as one row of an :class:`~geofl.server.strategy.UpdateBatch`:
Δ_l (``geo_delta``), with an :class:`~geofl.update.UpdateMeta` whose ``client_id`` is the
relaying LEO, ``round`` is t'_l (the oldest update it holds: Eq. 8's staleness source),
``num_samples`` its tractors' samples and ``scalars`` what Eq. 11 needs (unique farms,
context entropy H_l, NQI loss). Two strategies take such a batch:

* :class:`RobustAvgGeo`, the paper's GEO (§2.2.5): ω̃_l = Eq. 8 × Eq. 11 normalised (Eq. 12),
  RobustAvg over Δ_l — what a method whose server side is plain FedAvg (``fedavg`` or
  ``fedprox``, aggregator ``mean``, no defenses) runs at the GEO;
* :class:`ComposedGeo`, any other server side the method names (DUAL-SHIELD, FLAME,
  BackdoorIndicator, FedAdam/FedYogi/FedAvgM, trimmed mean, median, Krum, norm bounding):
  the method's own strategy over the regional rows, with the staleness × fairness weights
  composed multiplicatively into its tier's weighting (:class:`StaleFairWeighting`), like
  the flat engine composes its weightings. Its state (DUAL-SHIELD's reputations and trusted
  history, FedAdam's moments) is the method strategy's, which the run checkpoints.

Which server sides mean something at the GEO, and which are refused before training, is
decided in :func:`geofl.config.validate.check_hierarchy_method`.

What tractors receive of such a strategy's round plan (:class:`TractorPlan`) is its plan
without DUAL-SHIELD's per-client reputation: at the GEO the reputations are the relaying
LEOs' (rows of the regional batch), so tractor k would otherwise be sent LEO k's r — an
adaptive attacker (004 §3.6) would time its attacks by a relay's score (issue 32 item 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from geofl.engine.components import RunComponents
from geofl.engine.hierarchy.events import TierModel
from geofl.hierarchy.weights import (
    context_entropy,
    fairness_weights,
    geo_weights,
    staleness_weights,
)
from geofl.privacy.adaptive import REPUTATION_KEY
from geofl.server.robust.builders import RobustAvgParams, build_robust_avg
from geofl.server.strategy import (
    ComposedStrategy,
    RoundPlan,
    Strategy,
    StrategyResult,
    UpdateBatch,
)
from geofl.server.tier import FlatTier
from geofl.server.weighting import Weighting
from geofl.update import UpdateMeta

__all__ = [
    "ComposedGeo",
    "GeoResult",
    "GeoStrategy",
    "RobustAvgGeo",
    "StaleFairWeighting",
    "TractorPlan",
    "geo_batch",
    "stale_fair",
    "tractor_side",
]

#: Keys of a regional row's :attr:`UpdateMeta.scalars` (Eq. 11's inputs).
FARMS, ENTROPY, NQI_LOSS = "farms", "entropy", "nqi_loss"


@dataclass(frozen=True)
class GeoResult:
    """One GEO aggregation (Alg. 3 l. 7–11), for the round record.

    Attributes:
        params: ``[D]`` w^{t+1}.
        staleness: ``[L]`` t − t'_l of each regional model.
        stale: ``[L]`` float64 ω_stale (Eq. 8).
        fair: ``[L]`` float64 ω_fair (Eq. 11, unnormalised; ones without fairness).
        weights: ``[L]`` float64 ω̃_l (Eq. 12).
        effective: ``[L]`` float64 the weights the GEO strategy effectively used.
        kept: ``[L]`` bool, regional models the strategy's filters kept (all for
            RobustAvg, which trims per coordinate instead).
        info: The strategy's scalars (e.g. DUAL-SHIELD's CGF scores and reputations).
    """

    params: torch.Tensor
    staleness: list[int]
    stale: torch.Tensor
    fair: torch.Tensor
    weights: torch.Tensor
    effective: torch.Tensor
    kept: torch.Tensor
    info: dict[str, float] = field(default_factory=dict)


def geo_batch(
    current: torch.Tensor, regionals: Sequence[tuple[int, TierModel]], *, geo_delta: str
) -> UpdateBatch:
    """The regional models as the GEO strategy's batch (module docstring).

    Args:
        current: ``[D]`` w^t, the GEO's model.
        regionals: ``(LEO, regional model)`` pairs, in aggregation order.
        geo_delta: ``model``: Δ_l = w̄_l − w^t (§2.2.5 Eq. 1); ``update``: the regional
            average of the tractors' own updates.
    """
    if geo_delta == "model":
        deltas = torch.stack([m.model for _, m in regionals]) - current
    else:
        deltas = torch.stack([m.delta for _, m in regionals])
    metas = [
        UpdateMeta(
            client_id=sat,
            num_samples=m.num_samples,
            round=m.produced_round,
            scalars={
                FARMS: float(len(m.farms)),
                ENTROPY: context_entropy(m.bins),
                NQI_LOSS: m.nqi_lost / m.attempts if m.attempts else 0.0,
            },
        )
        for sat, m in regionals
    ]
    return UpdateBatch(deltas, metas)


def stale_fair(
    metas: Sequence[UpdateMeta], round_idx: int, *, kappa: float, fairness: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ω_stale, ω_fair)`` of the regional rows: Eq. 8 from t − t'_l and Eq. 11 from
    their scalars (ones without fairness), both ``[L]`` float64."""
    stale = staleness_weights(round_idx, [m.round for m in metas], kappa=kappa)
    if not fairness:
        return stale, torch.ones(len(metas), dtype=torch.float64)
    farms = torch.tensor([m.scalars[FARMS] for m in metas], dtype=torch.float64)
    entropy = torch.tensor([m.scalars[ENTROPY] for m in metas], dtype=torch.float64)
    loss = torch.tensor([m.scalars[NQI_LOSS] for m in metas], dtype=torch.float64)
    return stale, fairness_weights(farms, entropy, loss)


class StaleFairWeighting:
    """A weighting times the GEO's staleness × fairness weights (003 Eq. 8 × Eq. 11).

    Composes multiplicatively, like the flat engine's weightings: the tier normalises the
    product (Eq. 12 over the rows the defenses kept). With ``inner`` uniform this is ω̃_l;
    with ``data_size`` it is ω̃_l · n_l, renormalised.

    Args:
        inner: The method's weighting.
        kappa: κ of Eq. 8.
        fairness: Use ω_fair (Eq. 11); False: staleness only.
    """

    def __init__(self, inner: Weighting, *, kappa: float, fairness: bool) -> None:
        self.inner, self.kappa, self.fairness = inner, kappa, fairness

    def __call__(self, metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
        stale, fair = stale_fair(metas, round_idx, kappa=self.kappa, fairness=self.fairness)
        return self.inner(metas, round_idx) * stale * fair


class GeoStrategy:
    """A :class:`~geofl.server.strategy.Strategy` at the GEO, plus :meth:`step`: its
    aggregate together with the Eq. 8/11/12 weights of the batch (for the record).
    Subclasses implement the protocol; the GEO sends nothing to tractors (configure)."""

    uploads: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()
    kappa: float
    fairness: bool

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        return RoundPlan()

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None

    def step(self, round_idx: int, current: torch.Tensor, batch: UpdateBatch) -> GeoResult:
        """:meth:`aggregate` ``batch`` and report it as a :class:`GeoResult`."""
        res = self.aggregate(round_idx, current, batch)
        stale, fair = stale_fair(batch.metas, round_idx, kappa=self.kappa, fairness=self.fairness)
        return GeoResult(
            params=res.params,
            staleness=[round_idx - m.round for m in batch.metas],
            stale=stale,
            fair=fair,
            weights=geo_weights(stale, fair),
            effective=res.weights,
            kept=res.kept,
            info=dict(res.info),
        )


class RobustAvgGeo(GeoStrategy):
    """The paper's GEO (§2.2.5, Alg. 3 l. 7–11): ω̃ = Eq. 12 of Eq. 8 × Eq. 11, then
    RobustAvg (clip C, trim β per coordinate) over Δ_l, w^{t+1} = w^t + Δ̃. Stateless.

    It is a flat-server tier like the drivers' and LEOs': weighting
    :class:`StaleFairWeighting` of equal weights (ω_stale · ω_fair, which the tier normalises:
    Eq. 12), combiner the flat server's ``robust_avg``.

    Args:
        kappa: κ of Eq. 8.
        clip: RobustAvg's C.
        trim_fraction: RobustAvg's β.
        fairness: Use ω_fair (Eq. 11); False: staleness only.
    """

    def __init__(self, *, kappa: float, clip: float, trim_fraction: float, fairness: bool) -> None:
        self.kappa, self.fairness = kappa, fairness
        robust = build_robust_avg(RobustAvgParams(clip=clip, trim_fraction=trim_fraction))
        weighting = StaleFairWeighting(_ones, kappa=kappa, fairness=fairness)
        self.tier = FlatTier(weighting, robust)

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        stale, fair = stale_fair(batch.metas, round_idx, kappa=self.kappa, fairness=self.fairness)
        geo_weights(stale, fair)  # refuses weights that are all 0 (one line, HierarchyError)
        res = self.tier(batch.deltas, batch.metas, round_idx)
        return StrategyResult(global_params + res.delta, res.delta, res.weights, res.kept)


def _ones(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
    """Equal weights (the paper's GEO weighs by Eq. 8 × Eq. 11 alone)."""
    return torch.ones(len(metas), dtype=torch.float64)


class _Delegating:
    """Aggregation and state are those of the wrapped strategy ``inner``."""

    inner: Strategy

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        return self.inner.aggregate(round_idx, global_params, batch)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict(state)


class ComposedGeo(_Delegating, GeoStrategy):
    """The method's own server side at the GEO, over the regional rows (module docstring).

    The method's strategy is used in place: its tier's weighting becomes
    :class:`StaleFairWeighting` of the method's weighting (the hierarchy's only
    aggregation of client updates by that strategy is this one, so nothing else sees the
    change), and its state — checkpointed by the run as the method's strategy state — is
    the GEO's.

    Args:
        inner: The method's strategy (a :class:`~geofl.server.strategy.ComposedStrategy`).
        kappa: κ of Eq. 8.
        fairness: Use ω_fair (Eq. 11); False: staleness only.
    """

    def __init__(self, inner: ComposedStrategy, *, kappa: float, fairness: bool) -> None:
        self.inner, self.kappa, self.fairness = inner, kappa, fairness
        tier = inner.tier
        weighting = StaleFairWeighting(tier.weighting, kappa=kappa, fairness=fairness)
        inner.tier = FlatTier(weighting, tier.aggregator, tier.defenses)


class TractorPlan(_Delegating):
    """The GEO strategy as the tractors' round pipeline sees it: ``inner``'s plan without
    the per-client reputation, its uploads and scalars unchanged (module docstring).

    The rows whose reputations DUAL-SHIELD keeps at the GEO are LEOs; a tractor has none,
    so it is sent none: an adaptive attacker then attacks on its schedule alone (its
    documented behaviour without a broadcast reputation), and ``adaptive_dp``, which needs
    one, is refused at load (:func:`geofl.config.validate.check_hierarchy_method`).
    Aggregation and state stay the inner strategy's (the GEO step calls it directly).
    """

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        self.uploads, self.scalars = inner.uploads, inner.scalars

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        plan = self.inner.configure(round_idx, cohort)
        extra = {
            k: {n: v for n, v in mine.items() if n != REPUTATION_KEY}
            for k, mine in plan.extra.items()
        }
        return replace(plan, extra=extra)


def tractor_side(comps: RunComponents, geo: GeoStrategy) -> RunComponents:
    """``comps`` with the strategy the tractors' collect step configures from: the method's
    own under :class:`TractorPlan` when it runs at the GEO (:class:`ComposedGeo`), as is
    for the paper's GEO (its FedAvg/FedProx plan holds no per-client state)."""
    if not isinstance(geo, ComposedGeo):
        return comps
    return replace(comps, strategy=TractorPlan(comps.strategy))
