"""FedNova (Wang et al. 2020, "Tackling the objective inconsistency problem", Eq. 6–7, §4).

Clients that take different numbers of local steps τ_k pull the FedAvg average toward
their own optima. FedNova normalises: each client reports ‖a_k‖₁, the sum of its local
steps' weights (τ_k for plain SGD; with momentum ρ see
:func:`~geofl.algorithms.base.local_step_weight_sum`), and the server applies

    d_k = Δw_k / ‖a_k‖₁,    τ_eff = Σ_k p_k ‖a_k‖₁,    w ← w + η_s τ_eff Σ_k p_k d_k

with p_k the method's weights (sample sizes by default, as in the paper). When every τ_k is
equal this is FedAvg. Computed without touching the ``[K, D]`` rows: the combiner gets the
weights p_k/‖a_k‖₁ normalised to w̃ (recorded as the effective weights), and the step is
scaled by τ_eff · Σ_k p_k/‖a_k‖₁.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from geofl.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    AlgorithmContext,
    local_step_weight_sum,
    require_linear_aggregator,
    require_sgd,
)
from geofl.client.state import ClientState
from geofl.client.step import PlainClient
from geofl.client.trainer import LocalTrainParams
from geofl.registry import CheckContext, NoParams
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["A_NORM", "FedNovaClient", "FedNovaStrategy"]

#: Metadata scalar: ‖a_k‖₁ of the client's local steps.
A_NORM = "a_norm"


class FedNovaStrategy(ComposedStrategy):
    """Server half: normalised averaging (Wang et al. 2020, Eq. 6–7)."""

    scalars: tuple[str, ...] = (A_NORM,)

    def __init__(self, tier: FlatTier, server_lr: float) -> None:
        super().__init__(tier, PlainServerOptimizer(server_lr))

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        kept, p = self.tier.select(batch.deltas, batch.metas, round_idx)
        idx = torch.nonzero(kept).flatten().tolist()
        a = torch.tensor([float(batch.metas[i].scalars[A_NORM]) for i in idx], dtype=torch.float64)
        scaled = p / a
        total = float(scaled.sum())
        res = self.tier.combine(batch.deltas, batch.metas, kept, scaled / total)
        tau_eff = float((p * a).sum())
        step = res.delta * (tau_eff * total)
        params = self.optimizer.step(global_params, step)
        return StrategyResult(params, step, res.weights, kept, {"tau_eff": tau_eff})


class FedNovaClient(PlainClient):
    """Client half: report ‖a_k‖₁ with the update."""

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        a_norm = local_step_weight_sum(update.meta.steps, train.momentum)
        meta = replace(update.meta, scalars={**update.meta.scalars, A_NORM: a_norm})
        return replace(update, meta=meta), {}


def _check(_: NoParams, ctx: CheckContext) -> None:
    require_linear_aggregator("fednova", ctx)
    require_sgd("fednova", ctx)


@ALGORITHMS.register("fednova", check=_check)
def build_fednova(_: NoParams, *, ctx: AlgorithmContext) -> Algorithm:
    """FedNova (Wang et al. 2020): τ_k-normalised averaging with momentum correction."""
    return Algorithm(FedNovaStrategy(ctx.tier, ctx.server_lr), FedNovaClient())
