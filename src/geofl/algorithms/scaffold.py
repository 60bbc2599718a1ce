"""SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: stochastic controlled averaging", Alg. 1).

Server state: the control variate c (``[D]``, c⁰ = 0), broadcast with the model. Client
state: its own c_k (c_k⁰ = 0). Each local step follows g_k(y) − c_k + c. After τ steps
(option II):

    c_k⁺ = c_k − c + (x − y_k) / (τ η_l)

and the client uploads Δy_k = y_k − x and Δc_k = c_k⁺ − c_k (twice the bytes of FedAvg,
counted in ``bytes_up``). The server sets x ← x + η_g Δx with Δx the tier's aggregate of
Δy, and c ← c + (|S|/N) · (1/|S|) Σ_{k∈S} Δc_k.

Choices (documented, paper-faithful where the paper is specific):

* Δx uses the method's weighting (sample sizes by default); the paper averages uniformly —
  set ``weighting: {name: uniform}`` for its exact rule. The control update is always the
  paper's uniform mean over the kept updates.
* With local momentum ρ the displacement of τ steps is η_l ‖a‖₁ times the mean gradient
  (FedNova's ‖a‖₁, :func:`~geofl.algorithms.base.local_step_weight_sum`), so option II
  divides by η_l ‖a‖₁; for plain SGD that is the paper's τ η_l.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from geofl.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    AlgorithmContext,
    local_step_weight_sum,
    require_linear_aggregator,
    require_no_noise,
)
from geofl.client.state import ClientState, StateSpec
from geofl.client.trainer import GradCorrection, LocalTrainParams
from geofl.registry import CheckContext, NoParams
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, RoundPlan, StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["CONTROL", "CONTROL_DELTA", "ScaffoldClient", "ScaffoldStrategy"]

#: Payload name of the server control variate c.
CONTROL = "control"
#: Upload name of a client's control-variate change Δc_k.
CONTROL_DELTA = "control_delta"


class ScaffoldStrategy(ComposedStrategy):
    """Server half: broadcasts c, applies η_g Δx and the |S|/N-scaled control update."""

    uploads: tuple[str, ...] = (CONTROL_DELTA,)

    def __init__(self, tier: FlatTier, server_lr: float, num_clients: int, dim: int) -> None:
        super().__init__(tier, PlainServerOptimizer(server_lr))
        self.num_clients = num_clients
        self.control = torch.zeros(dim)

    def configure(self, round_idx: int, cohort: Sequence[int]) -> RoundPlan:
        return RoundPlan(payload={CONTROL: self.control})

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        res = super().aggregate(round_idx, global_params, batch)
        deltas = batch.tensors[CONTROL_DELTA]
        if not bool(res.kept.all()):  # copy rows only when a defense dropped some
            deltas = deltas[res.kept]
        if deltas.shape[0]:
            scale = deltas.shape[0] / (batch.num_clients or self.num_clients)
            self.control = self.control + scale * deltas.mean(dim=0)
        norm = float(torch.linalg.vector_norm(self.control))
        return replace(res, info={"control_norm": norm})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "control": self.control.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.control = state["control"].clone()


class ScaffoldClient:
    """Client half: corrected local steps and the option-II control-variate update."""

    def state_specs(self, dim: int) -> Mapping[str, StateSpec]:
        return {CONTROL: StateSpec((dim,))}

    def correction(
        self, global_params: torch.Tensor, state: ClientState, directives: ClientDirectives
    ) -> GradCorrection | None:
        return GradCorrection(linear=directives.payload[CONTROL] - state.tensors[CONTROL])

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        momentum = train.momentum if train.optimizer == "sgd" else 0.0
        span = train.lr * local_step_weight_sum(update.meta.steps, momentum)
        c_k, c = state.tensors[CONTROL], directives.payload[CONTROL]
        new_c_k = c_k - c - update.delta / span if span > 0 else c_k.clone()
        tensors = {**update.tensors, CONTROL_DELTA: new_c_k - c_k}
        return replace(update, tensors=tensors), {CONTROL: new_c_k}


def _check(_: NoParams, ctx: CheckContext) -> None:
    require_linear_aggregator("scaffold", ctx)
    require_no_noise("scaffold", ctx)


@ALGORITHMS.register("scaffold", traits=("uploads_extra",), check=_check)
def build_scaffold(_: NoParams, *, ctx: AlgorithmContext) -> Algorithm:
    """SCAFFOLD option II (Karimireddy et al. 2020, Alg. 1): client and server control variates."""
    strategy = ScaffoldStrategy(ctx.tier, ctx.server_lr, ctx.num_clients, ctx.dim)
    return Algorithm(strategy, ScaffoldClient())
