"""FedDyn (Acar et al. 2021, "Federated learning based on dynamic regularization", Alg. 1).

Client k keeps ∇L_k(θ_k^{t−1}) (``[D]``, zero at start) and minimises

    L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2 ‖θ − θ^{t−1}‖²,

then updates ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1}). The server keeps h (zero at
start):

    h^t = h^{t−1} − α (1/N) Σ_{k∈P_t} (θ_k^t − θ^{t−1})
    θ^t = (1/|P_t|) Σ_{k∈P_t} θ_k^t − h^t / α.

Choices: the mean of the θ_k^t uses the method's weighting (sample sizes by default; the
paper's rule is ``weighting: {name: uniform}``); the h update is the paper's unweighted sum
over the kept updates; ``federation.server_lr`` is not used (FedDyn has no server step size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext, require_linear_aggregator
from geofl.client.state import ClientState, StateSpec
from geofl.client.trainer import GradCorrection, LocalTrainParams
from geofl.registry import CheckContext
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["FedDynClient", "FedDynParams", "FedDynStrategy"]

#: Client-state name of ∇L_k(θ_k^{t−1}).
GRADIENT = "dyn_gradient"


class FedDynParams(BaseModel):
    """FedDyn's regularisation strength (Acar et al. 2021 use α ∈ {0.1, 0.01, 0.001})."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(0.01, gt=0.0, allow_inf_nan=False, description="α of the dynamic term")


class FedDynStrategy(ComposedStrategy):
    """Server half: θ^t = mean θ_k^t − h^t/α with the running h."""

    def __init__(self, tier: FlatTier, alpha: float, num_clients: int, dim: int) -> None:
        super().__init__(tier, PlainServerOptimizer(1.0))
        self.alpha, self.num_clients = alpha, num_clients
        self.h = torch.zeros(dim)

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        res = self.combine(round_idx, batch)
        kept = batch.deltas if bool(res.kept.all()) else batch.deltas[res.kept]
        n = batch.num_clients or self.num_clients
        self.h = self.h - (self.alpha / n) * kept.sum(dim=0)
        params = global_params + res.delta - self.h / self.alpha
        info = {"h_norm": float(torch.linalg.vector_norm(self.h))}
        return StrategyResult(params, res.delta, res.weights, res.kept, info)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "h": self.h.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.h = state["h"].clone()


class FedDynClient:
    """Client half: the dynamic regulariser and the update of ∇L_k."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def state_specs(self, dim: int) -> Mapping[str, StateSpec]:
        return {GRADIENT: StateSpec((dim,))}

    def correction(
        self, global_params: torch.Tensor, state: ClientState, directives: ClientDirectives
    ) -> GradCorrection | None:
        return GradCorrection(
            prox_mu=self.alpha, anchor=global_params, linear=-state.tensors[GRADIENT]
        )

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        new = state.tensors[GRADIENT] - self.alpha * update.delta
        return replace(update), {GRADIENT: new}


def _check(_: FedDynParams, ctx: CheckContext) -> None:
    require_linear_aggregator("feddyn", ctx)


@ALGORITHMS.register("feddyn", params=FedDynParams, check=_check)
def build_feddyn(params: FedDynParams, *, ctx: AlgorithmContext) -> Algorithm:
    """FedDyn (Acar et al. 2021, Alg. 1): dynamic regulariser on clients, server h."""
    strategy = FedDynStrategy(ctx.tier, params.alpha, ctx.num_clients, ctx.dim)
    return Algorithm(strategy, FedDynClient(params.alpha))
