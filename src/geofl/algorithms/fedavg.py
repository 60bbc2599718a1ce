"""FedAvg and the algorithms that change only the server step or only the local objective.

* ``fedavg`` — McMahan et al. 2017, Alg. 1: w ← w + η_s Σ_k p_k Δw_k (η_s =
  ``federation.server_lr``; p_k from the method's weighting).
* ``fedavgm`` — server momentum (Hsu et al. 2019, §3).
* ``fedadagrad``, ``fedadam``, ``fedyogi`` — adaptive server optimisers (Reddi et al. 2021,
  Alg. 2); see :mod:`geofl.server.optimizers`.
* ``fedprox`` — Li et al. 2020 ("Federated optimization in heterogeneous networks", Eq. 2):
  each client minimises F_k(w) + μ/2‖w − w^t‖², i.e. its gradient gains μ(w − w^t).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext
from geofl.client.state import ClientState
from geofl.client.step import PlainClient
from geofl.client.trainer import GradCorrection
from geofl.registry import NoParams
from geofl.server.optimizers import (
    AdaptiveParams,
    AdaptiveServerOptimizer,
    MomentumParams,
    MomentumServerOptimizer,
    PlainServerOptimizer,
)
from geofl.server.strategy import ComposedStrategy
from geofl.update import ClientDirectives

__all__ = ["FedProxClient", "FedProxParams"]


@ALGORITHMS.register("fedavg", traits=("stateless",))
def build_fedavg(_: NoParams, *, ctx: AlgorithmContext) -> Algorithm:
    """FedAvg (McMahan et al. 2017): weighted mean of Δw, plain server step η_s."""
    return Algorithm(ComposedStrategy(ctx.tier, PlainServerOptimizer(ctx.server_lr)))


@ALGORITHMS.register("fedavgm", params=MomentumParams)
def build_fedavgm(params: MomentumParams, *, ctx: AlgorithmContext) -> Algorithm:
    """FedAvgM (Hsu et al. 2019): server momentum v ← βv + Δ, w ← w + η_s v."""
    lr = params.server_lr if params.server_lr is not None else ctx.server_lr
    opt = MomentumServerOptimizer(lr, params.momentum)
    return Algorithm(ComposedStrategy(ctx.tier, opt))


def _adaptive(kind: Literal["adagrad", "adam", "yogi"]) -> None:
    def build(params: AdaptiveParams, *, ctx: AlgorithmContext) -> Algorithm:
        return Algorithm(ComposedStrategy(ctx.tier, AdaptiveServerOptimizer(kind, params)))

    build.__doc__ = f"Fed{kind.capitalize()} (Reddi et al. 2021, Alg. 2): adaptive server step."
    ALGORITHMS.register(f"fed{kind}", params=AdaptiveParams)(build)


for _kind in ("adagrad", "adam", "yogi"):
    _adaptive(_kind)


class FedProxParams(BaseModel):
    """FedProx's proximal coefficient (Li et al. 2020, Eq. 2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mu: float = Field(0.01, ge=0.0, allow_inf_nan=False, description="μ of μ/2‖w − w^t‖²")


class FedProxClient(PlainClient):
    """Local objective F_k(w) + μ/2‖w − w^t‖² (Li et al. 2020, Eq. 2)."""

    batchable: ClassVar[bool] = True  # the correction reads only the round's model

    def __init__(self, mu: float) -> None:
        self.mu = mu

    def correction(
        self, global_params: torch.Tensor, state: ClientState, directives: ClientDirectives
    ) -> GradCorrection | None:
        return GradCorrection(prox_mu=self.mu, anchor=global_params)


@ALGORITHMS.register("fedprox", params=FedProxParams)
def build_fedprox(params: FedProxParams, *, ctx: AlgorithmContext) -> Algorithm:
    """FedProx (Li et al. 2020): proximal local objective, FedAvg server step."""
    strategy = ComposedStrategy(ctx.tier, PlainServerOptimizer(ctx.server_lr))
    return Algorithm(strategy, FedProxClient(params.mu))
