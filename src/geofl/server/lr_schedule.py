"""Client learning-rate schedules over rounds: η_l of round r, sent with the round's directives.

001 §6.1.2 trains with Adam at η = 10⁻³ "decayed by a factor of 0.5 every 30 rounds". The
server decides η_l for each round and sends it to the round's clients in
:attr:`~geofl.update.ClientDirectives.extra` under :data:`LR_DIRECTIVE`; the client trains
with it (:func:`~geofl.client.trainer.train_for_round`) and its algorithm's state update uses it too
(SCAFFOLD's control variates divide by η_l). Configured as ``train.lr_schedule``, with
``train.lr`` as η₀; absent, no η is sent and every round uses ``train.lr`` (runs from before
schedules existed are unchanged). Rounds are 1-based:

* ``constant`` — η_r = η₀;
* ``step`` ``{every: s, factor: γ}`` — η_r = η₀ · γ^⌊(r − 1) / s⌋: rounds 1…s at η₀, rounds
  s + 1…2s at γη₀, … (001: s = 30, γ = 0.5 → 10⁻³ up to round 30, 5·10⁻⁴ from round 31,
  2.5·10⁻⁴ from round 61);
* ``cosine`` ``{final_factor: f}`` — η_r = η₀ · (f + (1 − f) · ½(1 + cos(π (r − 1) / R)))
  over the run's R = ``federation.rounds`` rounds: η₀ in round 1, approaching f·η₀ at R.

A schedule is ``(round) -> η``, built as ``(params, *, base_lr, rounds) -> LrSchedule``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from geofl.registry import NoParams, Registry
from geofl.update import LR_DIRECTIVE

__all__ = [
    "LR_DIRECTIVE",
    "LR_SCHEDULES",
    "CosineParams",
    "LrSchedule",
    "StepParams",
]

#: ``round (1-based) -> η_l``.
LrSchedule = Callable[[int], float]

#: ``(params, *, base_lr: float, rounds: int) -> LrSchedule``
LR_SCHEDULES: Registry[LrSchedule] = Registry("learning-rate schedule")


class StepParams(BaseModel):
    """Parameters of the ``step`` schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: int = Field(30, ge=1, description="rounds per step (001 §6.1.2: 30)")
    factor: float = Field(0.5, gt=0.0, le=1.0, description="multiplier per step (001: 0.5)")


class CosineParams(BaseModel):
    """Parameters of the ``cosine`` schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    final_factor: float = Field(0.0, ge=0.0, le=1.0, description="η at the end, as a fraction")


@dataclass(frozen=True)
class _Constant:
    base_lr: float

    def __call__(self, round_idx: int) -> float:
        return self.base_lr


@dataclass(frozen=True)
class _Step:
    base_lr: float
    every: int
    factor: float

    def __call__(self, round_idx: int) -> float:
        return self.base_lr * self.factor ** ((max(round_idx, 1) - 1) // self.every)


@dataclass(frozen=True)
class _Cosine:
    base_lr: float
    rounds: int
    final_factor: float

    def __call__(self, round_idx: int) -> float:
        progress = min(max(round_idx - 1, 0), self.rounds) / self.rounds
        f = self.final_factor
        return self.base_lr * (f + (1.0 - f) * 0.5 * (1.0 + math.cos(math.pi * progress)))


@LR_SCHEDULES.register("constant")
def build_constant(_: NoParams, *, base_lr: float, rounds: int) -> LrSchedule:
    """η_r = train.lr in every round (recorded in each round record)."""
    return _Constant(base_lr)


@LR_SCHEDULES.register("step", params=StepParams)
def build_step(params: StepParams, *, base_lr: float, rounds: int) -> LrSchedule:
    """η_r = train.lr · factor^⌊(r − 1) / every⌋ (001 §6.1.2: halved every 30 rounds)."""
    return _Step(base_lr, params.every, params.factor)


@LR_SCHEDULES.register("cosine", params=CosineParams)
def build_cosine(params: CosineParams, *, base_lr: float, rounds: int) -> LrSchedule:
    """Cosine decay from train.lr in round 1 towards final_factor · train.lr at the last."""
    return _Cosine(base_lr, rounds, params.final_factor)
