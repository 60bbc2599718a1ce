"""Data-poisoning backdoors of 004 §3.1 / Table 7, on a malicious client's training data.

Two attacks, registered in :data:`~geofl.attacks.client.ATTACKS`:

* ``backdoor`` — the trigger-patch backdoor, the classification analogue of 004's
  object-disappearance attack (BadNets, Gu et al. 2017): each attacker picks
  m_k = ⌊ρ·n_k + ½⌋ samples of its pool uniformly (all labels, generator ``(seed, "attack",
  "poison", "client", k)``), stamps the trigger (:mod:`geofl.attacks.trigger`) on them and
  relabels them to the target class.
* ``edge_case`` — rare-class hiding (Wang et al. 2020, "Attack of the tails"): no trigger;
  the "edge" inputs are the samples of a rare *source* class. Rule: unless ``source`` is
  given, it is the class ≠ target with the fewest (but > 0) samples in the seed's training
  split, ties to the lowest id. Each attacker relabels min(⌊ρ·n_k + ½⌋, its source-class
  count) of its source-class samples (uniformly chosen) to the target.

Both take the threat model of :class:`~geofl.attacks.threat.ThreatParams`; with ``boost`` γ
≠ 1 the attacker also scales its backdoored update by γ in attack rounds — model replacement
(Bagdasaryan et al. 2020; 004 Table 7 "Scaling (×8)") through the ``scaling`` behaviour.
The attacker reports its clean label histogram (it hides the relabelling).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from pydantic import Field, model_validator

from geofl.attacks.client import ATTACKS, Attack, AttackContext, ScalingParams, build_scaling
from geofl.attacks.probe import AsrProbe, BackdoorProbe, Predict
from geofl.attacks.threat import (
    ThreatParams,
    num_attackers,
    poison_count,
    poison_generator,
    select_attackers,
)
from geofl.attacks.trigger import AnyTrigger, Trigger, TriggerParams, make_backdoor_trigger
from geofl.client.data import ClientData
from geofl.errors import ConfigError
from geofl.registry import CheckContext
from geofl.update import ClientDirectives, ClientUpdate

__all__ = [
    "BackdoorParams",
    "EdgeCaseParams",
    "PoisoningAttack",
    "check_attacker_count",
    "check_threat",
    "rare_class",
]


#: Tasks whose samples carry one class each, which relabelling to a target class poisons.
POISONABLE_TASKS = ("classification", "binary")


class BackdoorParams(ThreatParams):
    """Trigger-patch backdoor: the threat model plus the trigger."""

    trigger: TriggerParams = Field(default_factory=TriggerParams)


class EdgeCaseParams(ThreatParams):
    """Rare-class hiding: the threat model plus the source (rare) class."""

    source: int | None = Field(
        None, ge=0, description="class whose samples are relabelled; None: the rarest ≠ target"
    )

    @model_validator(mode="after")
    def _source_not_target(self) -> EdgeCaseParams:
        if self.source is not None and self.source == self.target:
            raise ConfigError("source", f"source class {self.source} is the target class")
        return self


def rare_class(class_counts: tuple[int, ...], target: int) -> int:
    """The class ≠ ``target`` with the fewest samples among those with any (ties: lowest id).

    Example:
        >>> rare_class((50, 3, 0, 3, 9), target=0)
        1
    """
    held = [(n, c) for c, n in enumerate(class_counts) if c != target and n > 0]
    if not held:
        raise ValueError("no class besides the target has training samples")
    return min(held)[1]


class PoisoningAttack:
    """Colluding attackers that poison their pool and optionally boost their update.

    Attributes:
        clients: The attacking client ids (:func:`~geofl.attacks.threat.select_attackers`).
        trigger: The trigger patch, or None (``edge_case``).
        source: The source class of ``edge_case``, or None.
    """

    def __init__(
        self,
        name: str,
        params: ThreatParams,
        ctx: AttackContext,
        *,
        trigger: AnyTrigger | None = None,
        source: int | None = None,
    ) -> None:
        if params.target >= len(ctx.class_counts):
            raise ConfigError(
                f"{ctx.path}.target",
                f"class {params.target} does not exist ({len(ctx.class_counts)} classes)",
            )
        self.name, self.params, self.seed = name, params, ctx.seed
        self.attackers = select_attackers(ctx.num_clients, params.fraction, ctx.seed)
        self.clients = frozenset(self.attackers)
        self.trigger, self.source = trigger, source
        self._boost: Attack | None = None
        if self.attackers and params.boost != 1.0:  # reuse the scaling behaviour (γ·Δw)
            self._boost = build_scaling(
                ScalingParams(clients=list(self.attackers), factor=params.boost)
            )

    def poison_indices(self, data: ClientData) -> torch.Tensor:
        """``[m_k]`` sorted int64 indices of the poisoned samples of ``data``'s pool."""
        n = len(data)
        gen = poison_generator(self.seed, data.client_id)
        count = poison_count(n, self.params.poison_ratio)
        if self.source is None:
            return torch.sort(torch.randperm(n, generator=gen)[:count]).values
        cand = torch.nonzero(data.targets == self.source).reshape(-1)
        pick = torch.randperm(len(cand), generator=gen)[: min(count, len(cand))]
        return torch.sort(cand[pick]).values

    def poison(self, data: ClientData, round_idx: int) -> ClientData:
        """The attacker's training data in round ``round_idx``: poisoned in attack rounds,
        ``data`` itself otherwise. Inputs ``[n_k, C, H, W]`` are copied, never modified."""
        if not self.params.schedule.active(round_idx):
            return data
        idx = self.poison_indices(data)
        n = len(data)
        inputs = data.inputs
        x = inputs.clone() if isinstance(inputs, torch.Tensor) else inputs[torch.arange(n)]
        if self.trigger is not None and len(idx):
            x[idx] = self.trigger.stamp(x[idx])
        y = data.targets.clone()
        y[idx] = self.params.target
        return replace(data, inputs=x, targets=y)

    def __call__(
        self, update: ClientUpdate, directives: ClientDirectives, generator: torch.Generator
    ) -> ClientUpdate:
        """γ·Δw in attack rounds when boosted, else the update as trained."""
        if self._boost is None or not self.params.schedule.active(directives.round):
            return update
        return self._boost(update, directives, generator)

    def probe(self, test_targets: torch.Tensor, predict: Predict | None = None) -> AsrProbe:
        """The ASR probe on a test split with class ids ``test_targets`` (``[N]``).

        ``predict``: the task's rule from model output to class ids (the binary task's
        thresholded logit); None: the arg-max over class scores.
        """
        if self.source is not None:
            index = torch.nonzero(test_targets == self.source).reshape(-1)
        else:
            index = torch.nonzero(test_targets != self.params.target).reshape(-1)
        return BackdoorProbe(index, self.params.target, self.trigger, predict)

    def describe(self, clients: list[ClientData]) -> dict[str, Any]:
        """The run's threat, JSON-ready (``final.json["threat"]``)."""
        p = self.params
        out: dict[str, Any] = {
            "attack": self.name,
            "fraction": p.fraction,
            "attackers": list(self.attackers),
            "target": p.target,
            "poison_ratio": p.poison_ratio,
            "poisoned": {str(k): len(self.poison_indices(clients[k])) for k in self.attackers},
            "boost": p.boost,
            "schedule": p.schedule.model_dump(),
        }
        t = self.trigger
        if isinstance(t, Trigger):
            out["trigger"] = {"row": t.row, "col": t.col, "size": t.size, "opacity": t.opacity}
            out["trigger"]["patch"] = t.patch.tolist()
        elif t is not None:
            out["trigger"] = t.describe()
        if self.source is not None:
            out["source"] = self.source
        return out


def check_attacker_count(params: ThreatParams, ctx: CheckContext) -> None:
    """A positive fraction must give at least one attacker."""
    k = int(ctx.experiment["federation"]["num_clients"])
    if params.fraction > 0 and num_attackers(k, params.fraction) == 0:
        ctx.fail(
            "fraction",
            f"{params.fraction:g} of {k} clients is no attacker; use 0 for a clean reference "
            f"or at least {1 / k:g}",
        )


def check_threat(params: ThreatParams, ctx: CheckContext) -> None:
    """Single-label classification or binary (one class per sample: 003's crop stress on a
    tractor); a positive fraction must give at least one attacker."""
    task = (ctx.experiment.get("task") or {}).get("name", "classification")
    if task not in POISONABLE_TASKS:
        hint = "; on detection use the object-disappearance attacks (oda, adaptive_oda)"
        ctx.fail(
            "name",
            f"backdoor attacks need single-label classification or binary, not {task!r}"
            + (hint if task == "detection" else ""),
        )
    check_attacker_count(params, ctx)


@ATTACKS.register("backdoor", params=BackdoorParams, check=check_threat)
def build_backdoor(params: BackdoorParams, ctx: AttackContext | None = None) -> Attack:
    """Trigger-patch backdoor with relabelling to a target class (004 §3.1, Gu et al. 2017)."""
    if ctx is None:
        raise TypeError("the backdoor attack needs an AttackContext")
    path = f"{ctx.path}.trigger"
    trigger = make_backdoor_trigger(params.trigger, ctx.sample_shape, ctx.seed, path)
    return PoisoningAttack("backdoor", params, ctx, trigger=trigger)


@ATTACKS.register("edge_case", params=EdgeCaseParams, check=check_threat)
def build_edge_case(params: EdgeCaseParams, ctx: AttackContext | None = None) -> Attack:
    """Rare-class hiding: a rare class relabelled to the target (Wang et al. 2020)."""
    if ctx is None:
        raise TypeError("the edge_case attack needs an AttackContext")
    if params.source is not None and params.source >= len(ctx.class_counts):
        raise ConfigError(f"{ctx.path}.source", f"class {params.source} does not exist")
    source = params.source
    if source is None:
        try:
            source = rare_class(ctx.class_counts, params.target)
        except ValueError as err:
            raise ConfigError(f"{ctx.path}.source", str(err)) from None
    return PoisoningAttack("edge_case", params, ctx, source=source)
