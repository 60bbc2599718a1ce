"""Server optimisers: turn the round's aggregate Δ into the new global model.

The aggregate of client updates is treated as a pseudo-gradient (negated): the plain rule is
FedAvg's ``w ← w + η_s Δ``; FedAvgM adds server momentum (Hsu et al. 2019, "Measuring the
effects of non-identical data distribution", §3); FedAdagrad, FedAdam and FedYogi are the
adaptive rules of Reddi et al. 2021 ("Adaptive federated optimization", Alg. 2):

    m_t = β₁ m_{t−1} + (1 − β₁) Δ_t
    v_t = v_{t−1} + Δ_t²                                     (FedAdagrad)
    v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²                         (FedAdam)
    v_t = v_{t−1} − (1 − β₂) Δ_t² sign(v_{t−1} − Δ_t²)      (FedYogi)
    w_{t+1} = w_t + η m_t / (√v_t + τ)

with v_0 = τ² (Reddi et al., Alg. 2 input) and m_0 = 0; no bias correction, as in the paper.
``v0: zero`` starts from v_0 = 0 as Flower's strategies do; Flower's FedAdam additionally
scales η by √(1 − β₂^(t+1)) / (1 − β₁^(t+1)), which geofl does not (Reddi et al. have no
such factor) — ``tests/deploy/test_flower_reference_server_opt.py`` cancels it when
comparing.
Every step is a few ``[D]`` vector operations; the state is checkpointed with the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AdaptiveParams",
    "AdaptiveServerOptimizer",
    "MomentumParams",
    "MomentumServerOptimizer",
    "PlainServerOptimizer",
    "ServerOptimizer",
    "adaptive_second_moment",
]


class ServerOptimizer(Protocol):
    """``step(global [D], aggregate Δ [D]) -> new global [D]`` with checkpointable state."""

    def step(self, global_params: torch.Tensor, delta: torch.Tensor) -> torch.Tensor: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class PlainServerOptimizer:
    """w ← w + η_s Δ (FedAvg, McMahan et al. 2017, with a server learning rate).

    Args:
        lr: η_s > 0.
    """

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def step(self, global_params: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return global_params + self.lr * delta

    def step_into(
        self, global_params: torch.Tensor, delta: torch.Tensor, out: torch.Tensor
    ) -> None:
        """``out ← w + η_s Δ`` without a temporary, bit for bit :meth:`step` (the same two
        roundings: η_s Δ, then the sum). Elementwise, so it may run on column chunks."""
        torch.mul(delta, self.lr, out=out)
        out.add_(global_params)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


class MomentumParams(BaseModel):
    """FedAvgM's server momentum (Hsu et al. 2019)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    momentum: float = Field(0.9, ge=0.0, lt=1.0, description="β of v ← βv + Δ")
    server_lr: float | None = Field(
        None, gt=0.0, allow_inf_nan=False, description="η_s (default: federation.server_lr)"
    )


class MomentumServerOptimizer:
    """v ← βv + Δ; w ← w + η_s v (FedAvgM, Hsu et al. 2019, §3).

    Args:
        lr: η_s > 0.
        momentum: β ∈ [0, 1).
    """

    def __init__(self, lr: float, momentum: float) -> None:
        self.lr, self.momentum = lr, momentum
        self.velocity: torch.Tensor | None = None

    def step(self, global_params: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        if self.velocity is None:
            self.velocity = delta.clone()
        else:
            self.velocity = self.velocity.mul(self.momentum).add_(delta)
        return global_params + self.lr * self.velocity

    def state_dict(self) -> dict[str, Any]:
        return {"velocity": self.velocity}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.velocity = state.get("velocity")


class AdaptiveParams(BaseModel):
    """FedAdagrad/FedAdam/FedYogi hyperparameters (Reddi et al. 2021, §3 and App. D)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server_lr: float = Field(0.01, gt=0.0, description="η, the server step size")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="β₁ of the first moment")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="β₂ of the second moment")
    tau: float = Field(1e-3, gt=0.0, description="τ, adaptivity; v₀ = τ²")
    v0: Literal["tau_squared", "zero"] = Field(
        "tau_squared",
        description="v₀: τ² as in Reddi et al. Alg. 2, or 0 as Flower's FedAdam/FedYogi/"
        "FedAdagrad start (the cross-check in tests/deploy uses it)",
    )


def adaptive_second_moment(
    kind: Literal["adagrad", "adam", "yogi"], v: torch.Tensor, delta: torch.Tensor, beta2: float
) -> torch.Tensor:
    """v_t from v_{t−1} and Δ_t for each rule of Reddi et al. 2021, Alg. 2 (new tensor).

    Args:
        kind: ``adagrad``, ``adam`` or ``yogi``.
        v: ``[D]`` v_{t−1}.
        delta: ``[D]`` Δ_t.
        beta2: β₂ (unused by Adagrad).
    """
    sq = delta * delta
    if kind == "adagrad":
        return v + sq
    if kind == "adam":
        return v * beta2 + sq * (1.0 - beta2)
    return v - (1.0 - beta2) * sq * torch.sign(v - sq)


class AdaptiveServerOptimizer:
    """FedAdagrad / FedAdam / FedYogi (Reddi et al. 2021, Alg. 2).

    Args:
        kind: Which second-moment rule.
        params: η, β₁, β₂, τ.
    """

    def __init__(self, kind: Literal["adagrad", "adam", "yogi"], params: AdaptiveParams) -> None:
        self.kind, self.p = kind, params
        self.m: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def step(self, global_params: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        p = self.p
        if self.m is None or self.v is None:
            self.m = torch.zeros_like(delta)
            self.v = torch.full_like(delta, p.tau * p.tau if p.v0 == "tau_squared" else 0.0)
        self.m = self.m * p.beta1 + delta * (1.0 - p.beta1)
        self.v = adaptive_second_moment(self.kind, self.v, delta, p.beta2)
        return global_params + p.server_lr * self.m / (self.v.sqrt() + p.tau)

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.m, self.v = state.get("m"), state.get("v")
