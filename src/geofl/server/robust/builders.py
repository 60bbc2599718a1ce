"""Registered ``trimmed_mean``, ``median``, ``krum`` and ``robust_avg`` aggregators."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import CheckContext, NoParams
from geofl.server.aggregators import AGGREGATORS, Aggregate, Aggregator
from geofl.server.robust.krum import multi_krum
from geofl.server.robust.median import coordinate_median_aggregate
from geofl.server.robust.robustavg import robust_avg
from geofl.server.robust.trimmed import trimmed_mean_aggregate

__all__ = ["KrumParams", "RobustAvgParams", "TrimmedMeanParams"]


class TrimmedMeanParams(BaseModel):
    """Parameters of the ``trimmed_mean`` aggregator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trim_fraction: float = Field(
        0.1, ge=0.0, lt=0.5, description="β: fraction of values dropped at each end"
    )


class KrumParams(BaseModel):
    """Parameters of the ``krum`` aggregator (Multi-Krum when ``num_selected`` > 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_byzantine: int = Field(1, ge=0, description="f: Byzantine updates tolerated (K > 2f+2)")
    num_selected: int = Field(1, ge=1, description="m: updates averaged; 1 = Krum, ≤ K − f")


@AGGREGATORS.register("trimmed_mean", params=TrimmedMeanParams)
def build_trimmed_mean(params: TrimmedMeanParams) -> Aggregator:
    """Coordinate-wise β-trimmed mean (Yin et al. 2018); ignores the weights.

    Effective weights: each row's average share of the kept order statistics
    (:func:`trimmed_mean_aggregate`).
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return trimmed_mean_aggregate(updates, trim_fraction=params.trim_fraction)

    return aggregate


@AGGREGATORS.register("median", params=NoParams)
def build_median(_: NoParams) -> Aggregator:
    """Coordinate-wise median, midpoint for even K (Yin et al. 2018); ignores the weights.

    Effective weights: each row's average share of the middle order statistic(s)
    (:func:`coordinate_median_aggregate`).
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return coordinate_median_aggregate(updates)

    return aggregate


def _check_krum_config(params: KrumParams, ctx: CheckContext) -> None:
    """Krum needs K > 2f + 2 updates per round (Blanchard et al. 2017): check it up front."""
    k = ctx.clients_per_round
    if k is None:  # a random cohort size: the per-round check refuses small rounds
        return
    f = params.num_byzantine
    if not k > 2 * f + 2:
        ctx.fail(
            "num_byzantine",
            f"Krum needs more than 2f+2 = {2 * f + 2} updates per round but only {k} clients "
            "take part; lower num_byzantine or raise federation.num_clients/participation",
        )
    if params.num_selected > k - f:
        ctx.fail(
            "num_selected",
            f"Multi-Krum can select at most K − f = {k - f} of the {k} updates per round",
        )


@AGGREGATORS.register("krum", params=KrumParams, check=_check_krum_config)
def build_krum(params: KrumParams) -> Aggregator:
    """Krum / Multi-Krum (Blanchard et al. 2017); ignores the weights.

    Effective weights: 1/m on each of the m selected rows, 0 elsewhere.
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        res = multi_krum(
            updates, num_byzantine=params.num_byzantine, num_selected=params.num_selected
        )
        eff = torch.zeros(updates.shape[0], dtype=torch.float64)
        eff[res.selected] = 1.0 / res.selected.numel()
        return Aggregate(res.aggregate, eff)

    return aggregate


class RobustAvgParams(BaseModel):
    """Parameters of the ``robust_avg`` aggregator (003 §2.2.5; defaults C = 1.0, β = 0.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clip: float = Field(1.0, gt=0.0, description="C: each update's L2 norm is clipped to C")
    trim_fraction: float = Field(
        0.1, ge=0.0, lt=0.5, description="β: fraction of values dropped at each end"
    )
    eps: float = Field(1e-12, ge=0.0, description="ε of the clipping factor C / (‖Δ‖ + ε)")


@AGGREGATORS.register("robust_avg", params=RobustAvgParams)
def build_robust_avg(params: RobustAvgParams) -> Aggregator:
    """003 RobustAvg: norm-clipped, weighted coordinate-wise trimmed mean (:func:`robust_avg`).

    Uses the weights it is given (normalised); effective weights: each row's share of the
    kept weight, averaged over the coordinates.
    """

    def aggregate(updates: torch.Tensor, weights: torch.Tensor) -> Aggregate:
        return robust_avg(
            updates,
            weights,
            clip=params.clip,
            trim_fraction=params.trim_fraction,
            eps=params.eps,
        )

    return aggregate
