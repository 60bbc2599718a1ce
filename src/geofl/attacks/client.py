"""Malicious-client behaviours, applied to a client's update after local training.

Later papers add backdoor, edge-case and adaptive attacks (004) here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import CheckContext, Registry
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["ATTACKS", "Attack", "ScalingParams"]


class Attack(Protocol):
    """Turns an honest update of an attacking client into a malicious one."""

    clients: frozenset[int]

    def __call__(
        self, update: ClientUpdate, directives: ClientDirectives, generator: torch.Generator
    ) -> ClientUpdate: ...


#: Attack registry: ``scaling``, ...
ATTACKS: Registry[Attack] = Registry("attack")


class ScalingParams(BaseModel):
    """Model-replacement style scaling attack (Bagdasaryan et al., 2020)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clients: list[int] = Field(..., min_length=1, description="ids of attacking clients")
    factor: float = Field(
        10.0, allow_inf_nan=False, description="Δw ← factor · Δw (negative flips the sign)"
    )


class _Scaling:
    def __init__(self, params: ScalingParams) -> None:
        self.clients = frozenset(params.clients)
        self.factor = params.factor

    def __call__(
        self, update: ClientUpdate, directives: ClientDirectives, generator: torch.Generator
    ) -> ClientUpdate:
        return replace(update, delta=update.delta * self.factor)


def check_attackers_exist(params: ScalingParams, ctx: CheckContext) -> None:
    """Attacking client ids must be clients of the federation."""
    k = int(ctx.experiment["federation"]["num_clients"])
    bad = [c for c in params.clients if not 0 <= c < k]
    if bad:
        ctx.fail("clients", f"client ids {bad} do not exist (federation.num_clients={k})")


@ATTACKS.register("scaling", params=ScalingParams, check=check_attackers_exist)
def build_scaling(params: ScalingParams) -> Attack:
    """Attacking clients multiply their update by a factor (sign flip when negative)."""
    return _Scaling(params)
