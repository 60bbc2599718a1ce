"""The threat model of 004 §2.3: who is malicious, when they attack, how much they poison.

A fraction of the K clients is Byzantine; the attackers collude (one trigger, one target
class, one boost factor γ for all of them, 004 §2.3 "collude on the trigger, the target
class, and the scaling factor"); each poisons a fraction of its own local pool (default 20 %,
004 §3.1); and they attack in every round, intermittently, or from a round t₀ on.

Every choice is seeded from the run's seed, so the methods of one seed face the same
attackers with the same poisoned samples (004 Table 3: "matched seeds, identical attack
configurations").
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from geofl.rng import numpy_generator, torch_generator

__all__ = [
    "MAX_FRACTION",
    "ScheduleParams",
    "ThreatParams",
    "num_attackers",
    "poison_count",
    "poison_generator",
    "select_attackers",
]

#: Byzantine fractions at or above this are a majority, past the collapse point of
#: majority-based (median) aggregation (004 §2.3 keeps it at most 30 %).
MAX_FRACTION = 0.5


class ScheduleParams(BaseModel):
    """When the attackers attack: round r is an attack round iff r ≥ ``start`` and
    (r − ``start``) mod ``period`` = 0.

    ``{start: 1, period: 1}`` (default): every round; ``{period: 3}``: intermittent, rounds
    1, 4, 7, …; ``{start: 10}``: from round t₀ = 10 on. In other rounds an attacker trains
    on its clean pool and uploads an honest update.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: int = Field(1, ge=1, description="first attack round t₀ (1-based)")
    period: int = Field(1, ge=1, description="attack every period-th round from start")

    def active(self, round_idx: int) -> bool:
        """Whether round ``round_idx`` (1-based) is an attack round."""
        return round_idx >= self.start and (round_idx - self.start) % self.period == 0


class ThreatParams(BaseModel):
    """The shared threat-model settings of the data-poisoning attacks (004 §2.3, §3.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction: float = Field(
        0.2,
        description="Byzantine fraction of the K clients, in [0, 0.5): ⌊fraction·K⌋ "
        "attackers drawn from the run's seed (004 Table 5: 10–40 %, default 20 %)",
    )
    poison_ratio: float = Field(
        0.2,
        gt=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="fraction of each attacker's local pool poisoned, in (0, 1] (004 §3.1: 20 %)",
    )
    target: int = Field(0, ge=0, description="target class the poisoned samples are relabelled to")
    boost: float = Field(
        1.0,
        gt=0.0,
        allow_inf_nan=False,
        description="γ: an attacker uploads γ·Δw in attack rounds (model replacement, "
        "Bagdasaryan et al. 2020; 004 Table 7: ×8); 1 = no boost",
    )
    schedule: ScheduleParams = Field(default_factory=ScheduleParams)

    @field_validator("fraction")
    @classmethod
    def _minority(cls, v: float) -> float:
        if not (math.isfinite(v) and 0.0 <= v < MAX_FRACTION):
            raise ValueError(
                f"Byzantine fraction {v:g} must be in [0, {MAX_FRACTION:g}): at 0.5 or more "
                "the attackers are a majority, which no aggregation rule can outvote"
            )
        return v


def num_attackers(num_clients: int, fraction: float) -> int:
    """m = ⌊fraction · K⌋, the number of attackers (so ``fraction`` is an upper bound).

    A tolerance of 1e-9 keeps products such as 0.3 · 10 from flooring to 2.

    Example:
        >>> num_attackers(10, 0.3), num_attackers(10, 0.25), num_attackers(7, 0.0)
        (3, 2, 0)
    """
    return math.floor(fraction * num_clients + 1e-9)


def select_attackers(num_clients: int, fraction: float, seed: int) -> tuple[int, ...]:
    """The attacking client ids: the first m of a permutation of 0..K−1, sorted.

    Args:
        num_clients: K.
        fraction: Byzantine fraction in [0, 0.5).
        seed: The run's seed; the permutation's generator is ``(seed, "attack",
            "attackers")``, so every method of a seed has the same attackers.

    Returns:
        Sorted ids, ``num_attackers(K, fraction)`` of them.
    """
    m = num_attackers(num_clients, fraction)
    perm = numpy_generator(seed, "attack", "attackers").permutation(num_clients)
    return tuple(sorted(int(k) for k in perm[:m]))


def poison_count(n: int, ratio: float) -> int:
    """⌊ratio · n + ½⌋: how many of a pool of ``n`` samples are poisoned (round half up).

    Example:
        >>> poison_count(50, 0.2), poison_count(7, 0.5), poison_count(2, 0.2)
        (10, 4, 0)
    """
    return math.floor(ratio * n + 0.5)


def poison_generator(seed: int, client: int) -> torch.Generator:
    """The generator of one attacker's poisoned-sample choice, ``(seed, "attack",
    "poison", "client", k)``.

    It has no round key: the poisoned part of a pool is fixed for the run (004 §3.1 "20 %
    of each Byzantine client's local pool"), not redrawn per round.
    """
    return torch_generator(seed, "attack", "poison", "client", client)
