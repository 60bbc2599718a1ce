"""Malicious-client behaviours, applied to a client's update after local training.

The data-poisoning attacks of 004 (trigger backdoor, rare-class hiding) are in
:mod:`geofl.attacks.backdoor`; they also poison the attacker's training data before local
training (:class:`~geofl.client.step.DataPoisoning`). A factory that takes a ``ctx``
keyword is called with an :class:`AttackContext` (the run's seed, K, input shape, class
counts); others get their parameters alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import CheckContext, Registry
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["ATTACKS", "Attack", "AttackContext", "ScalingParams", "build_scaling"]


class Attack(Protocol):
    """Turns an honest update of an attacking client into a malicious one."""

    clients: frozenset[int]

    def __call__(
        self, update: ClientUpdate, directives: ClientDirectives, generator: torch.Generator
    ) -> ClientUpdate: ...


@dataclass(frozen=True)
class AttackContext:
    """What an attack may know of the run when it is built.

    Attributes:
        seed: The run's seed (attackers, poisoned samples and trigger derive from it).
        num_clients: K.
        sample_shape: One input's shape: ``(C, H, W)`` images or ``(F,)`` features.
        class_counts: Samples per class in the seed's training split (``[C]``); objects
            per class for detection data; empty for other targets.
        path: Config path of the attack (``methods.<i>.attack``), for errors.
    """

    seed: int
    num_clients: int
    sample_shape: tuple[int, ...]
    class_counts: tuple[int, ...]
    path: str = "attack"


#: Attack registry: ``scaling``, ``backdoor``, ``edge_case``, ``adaptive_cgf``, ``oda``,
#: ``adaptive_oda``.
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
