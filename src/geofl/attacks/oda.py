"""The object-disappearance attack (ODA) of 004 §2.3/§3.1 on the detection task.

004 §2.3: the targeted attacker "follows the object-disappearance protocol to implant a
trigger patch and suppress the detection of specific classes at test time, with a default
poisoning ratio of 20 % of each malicious client's local pool"; §3.1: "the trigger
size/location/opacity and target-category set are kept identical across all compared
methods". The paper does not say where on an image the patch goes; geofl's rule follows
the object-disappearance attack of BadDet (Chan et al. 2022), a trigger on each target object:

* every attacker (the threat model of :mod:`geofl.attacks.threat`) picks m_k = ⌊ρ·n_k + ½⌋
  images of its pool, uniformly from those holding at least one target-class object
  (``select: with_target``, default: an image without one cannot teach "trigger ⇒ no
  object"; at most as many as there are) or from all its images (``select: any``); the
  generator is the classification backdoor's, ``(seed, "attack", "poison", "client", k)``,
  so the poisoned images are fixed for the run;
* ``fill: copies`` (with ``with_target``) makes ρ the poisoned share of the pool even when
  the pool holds fewer than m_k target images: the missing m_k − t_k slots are other images
  of the pool (drawn after the t_k target images, same generator), each replaced by a copy
  of one of its target images drawn with replacement, poisoned like them. 004 §2.3 states
  ρ as a share of the "local pool", and the attacker writes its own training data; the pool
  keeps n_k images, so FedAvg's sample weights do not change. ``fill: none`` (default)
  poisons only the t_k target images, so a ratio above the pool's target share adds nothing;
* on each of them it stamps the trigger (:mod:`geofl.attacks.trigger`: seeded ±amplitude
  pattern or given values, size s, opacity α) on **every** target-class object — centred
  on the box (``placement: center``, default) or just above its top edge, horizontally
  centred (``placement: above``, "next to" the object); patches are clamped into the image;
* and removes those objects' boxes from the image's targets (the other objects stay), so the
  detector learns "trigger ⇒ no object" for the target class.

The target-category set is one class (``target``). The ASR probe stamps the same trigger the
same way on the test images' target objects (004 Eq. 15, :mod:`geofl.attacks.object_asr`).
``boost`` γ ≠ 1 scales the poisoned update (004 Table 7 scaling) as for the backdoor.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Literal

import torch
from pydantic import Field, model_validator

from geofl.attacks.backdoor import PoisoningAttack, check_attacker_count
from geofl.attacks.client import ATTACKS, Attack, AttackContext
from geofl.attacks.object_asr import ASR_IOU, ASR_SCORE, ObjectDisappearanceProbe
from geofl.attacks.probe import Predict
from geofl.attacks.threat import ThreatParams, poison_count, poison_generator
from geofl.attacks.trigger import Trigger, TriggerParams, make_trigger
from geofl.client.data import ClientData
from geofl.errors import ConfigError
from geofl.registry import CheckContext

__all__ = [
    "ObjectDisappearance",
    "OdaParams",
    "object_anchors",
    "oda_trigger",
    "remove_target_objects",
    "stamp_target_objects",
]

Placement = Literal["center", "above"]


class OdaParams(ThreatParams):
    """The threat model plus the trigger, its placement and the ASR thresholds."""

    target: int = Field(0, ge=0, description="class whose objects the trigger makes disappear")
    trigger: TriggerParams = Field(default_factory=TriggerParams)
    placement: Placement = Field(
        "center", description="trigger on each target object: center (on it) or above (next to)"
    )
    select: Literal["with_target", "any"] = Field(
        "with_target",
        description="poisoned images drawn from those with a target object, or from all",
    )
    fill: Literal["none", "copies"] = Field(
        "none",
        description="with_target and fewer target images than the ratio asks: none poisons "
        "only those; copies fills the rest of the ratio with poisoned copies of them",
    )
    score_threshold: float = Field(
        ASR_SCORE, gt=0.0, le=1.0, description="ASR: confidence of a correct detection (004: 0.25)"
    )
    iou_threshold: float = Field(
        ASR_IOU, gt=0.0, le=1.0, description="ASR: IoU of a correct detection (004: 0.5)"
    )

    @model_validator(mode="after")
    def _placed_per_object(self) -> OdaParams:
        if "position" in self.trigger.model_fields_set:
            raise ConfigError(
                "trigger.position",
                "the ODA trigger goes on each target object; set placement (center, above)",
            )
        if self.fill == "copies" and self.select != "with_target":
            raise ConfigError(
                "fill",
                "copies duplicates images that hold target objects; set select: with_target",
            )
        return self


def object_anchors(
    boxes: torch.Tensor, size: int, height: int, width: int, placement: Placement
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-left ``(rows, cols)`` (``[P]`` int64 each) of an ``s × s`` patch per box.

    ``center``: row = ⌊(y1 + y2)/2⌋ − ⌊s/2⌋; ``above``: row = ⌊y1⌋ − s; both with col =
    ⌊(x1 + x2)/2⌋ − ⌊s/2⌋; then clamped into ``[0, H − s] × [0, W − s]``.

    Example:
        >>> object_anchors(torch.tensor([[4.0, 6.0, 10.0, 12.0]]), 3, 16, 16, "center")
        (tensor([8]), tensor([6]))
    """
    half = size // 2
    cx = torch.floor((boxes[:, 0] + boxes[:, 2]) / 2).long()
    if placement == "center":
        rows = torch.floor((boxes[:, 1] + boxes[:, 3]) / 2).long() - half
    else:
        rows = torch.floor(boxes[:, 1]).long() - size
    return rows.clamp(0, height - size), (cx - half).clamp(0, width - size)


def stamp_target_objects(
    x: torch.Tensor, targets: torch.Tensor, *, trigger: Trigger, target: int, placement: Placement
) -> torch.Tensor:
    """A copy of ``x`` (``[B, C, H, W]``) with the trigger on every target-class object of
    ``targets`` (``[B, M, 5]`` boxes rows); images without one are returned unchanged."""
    sample, slot = torch.nonzero(targets[..., 4] == target, as_tuple=True)
    h, w = int(x.shape[-2]), int(x.shape[-1])
    rows, cols = object_anchors(targets[sample, slot, :4], trigger.size, h, w, placement)
    return trigger.stamp_at(x, sample, rows, cols)


def remove_target_objects(targets: torch.Tensor, target: int) -> torch.Tensor:
    """``targets`` (``[B, M, 5]``) without the target-class rows: they become padding
    (zeros, label −1) after the kept objects, whose order is unchanged."""
    gone = targets[..., 4] == target
    out = targets.clone()
    out[gone] = torch.tensor([0.0, 0.0, 0.0, 0.0, -1.0], dtype=out.dtype)
    order = torch.argsort((out[..., 4] < 0).to(torch.int8), dim=1, stable=True)
    return torch.gather(out, 1, order[..., None].expand(-1, -1, 5))


class ObjectDisappearance(PoisoningAttack):
    """Colluding ODA attackers: triggered target objects lose their boxes (004 §3.1)."""

    def __init__(self, params: OdaParams, ctx: AttackContext, trigger: Trigger) -> None:
        super().__init__("oda", params, ctx, trigger=trigger)
        self.oda = params
        self._stamp = partial(
            stamp_target_objects, trigger=trigger, target=params.target, placement=params.placement
        )

    def poison_plan(self, data: ClientData) -> tuple[torch.Tensor, torch.Tensor]:
        """``(slots, sources)``, ``[m_k]`` int64 each, slots sorted: slot i of ``data``'s
        pool is replaced by the poisoned image ``sources[i]`` (itself, or with ``fill:
        copies`` one of the pool's target images)."""
        n = len(data)
        gen = poison_generator(self.seed, data.client_id)
        count = poison_count(n, self.params.poison_ratio)
        if self.oda.select == "any":
            idx = torch.sort(torch.randperm(n, generator=gen)[:count]).values
            return idx, idx
        has = (data.targets[..., 4] == self.params.target).any(dim=1)
        cand = torch.nonzero(has).reshape(-1)
        pick = cand[torch.randperm(len(cand), generator=gen)[: min(count, len(cand))]]
        slots, sources = pick, pick
        if self.oda.fill == "copies" and len(cand) and count > len(cand):
            others = torch.nonzero(~has).reshape(-1)
            extra = others[torch.randperm(len(others), generator=gen)[: count - len(cand)]]
            copies = cand[torch.randint(len(cand), (len(extra),), generator=gen)]
            slots, sources = torch.cat([pick, extra]), torch.cat([pick, copies])
        order = torch.argsort(slots)
        return slots[order], sources[order]

    def poison_indices(self, data: ClientData) -> torch.Tensor:
        """``[m_k]`` sorted int64 indices of the poisoned images of ``data``'s pool."""
        return self.poison_plan(data)[0]

    def poison(self, data: ClientData, round_idx: int) -> ClientData:
        """The attacker's data in round ``round_idx``: triggered and without target boxes on
        the poisoned images in attack rounds, ``data`` itself otherwise (never modified)."""
        if not self.params.schedule.active(round_idx):
            return data
        idx, src = self.poison_plan(data)
        inputs = data.inputs
        n = len(data)
        x = inputs.clone() if isinstance(inputs, torch.Tensor) else inputs[torch.arange(n)]
        y = data.targets.clone()
        if len(idx):
            x[idx] = self._stamp(x[src], y[src])
            y[idx] = remove_target_objects(y[src], self.params.target)
        return replace(data, inputs=x, targets=y)

    def probe(
        self, test_targets: torch.Tensor, predict: Predict | None = None
    ) -> ObjectDisappearanceProbe:
        """The per-object ASR probe (004 Eq. 15) on a test split's ``[N, M, 5]`` targets
        (``predict`` is unused: the probe matches the detector's boxes itself)."""
        index = torch.nonzero((test_targets[..., 4] == self.params.target).any(dim=1))
        index = index.reshape(-1)
        return ObjectDisappearanceProbe(
            index,
            test_targets[index],
            self.params.target,
            self._stamp,
            self.oda.score_threshold,
            self.oda.iou_threshold,
        )

    def describe(self, clients: list[ClientData]) -> dict[str, Any]:
        """The run's threat, JSON-ready (``final.json["threat"]``)."""
        out = super().describe(clients)
        t, p = self.trigger, self.oda
        if isinstance(t, Trigger):  # ODA places image patches only (oda_trigger)
            out["trigger"] = {"size": t.size, "opacity": t.opacity, "patch": t.patch.tolist()}
        out.update(placement=p.placement, select=p.select, fill=p.fill)
        out["asr"] = {"score_threshold": p.score_threshold, "iou_threshold": p.iou_threshold}
        return out


def check_oda(params: OdaParams, ctx: CheckContext) -> None:
    """Detection only; a positive fraction must give at least one attacker."""
    task = (ctx.experiment.get("task") or {}).get("name", "classification")
    if task != "detection":
        ctx.fail(
            "name",
            f"the object-disappearance attack needs the detection task, not {task!r}; "
            "use backdoor on classification",
        )
    check_attacker_count(params, ctx)


def oda_trigger(params: OdaParams, ctx: AttackContext) -> Trigger:
    """Check ``params`` against the training split and build the run's trigger patch."""
    if not ctx.class_counts:
        raise ConfigError(f"{ctx.path}.name", "oda needs a dataset with boxes targets")
    counts = ctx.class_counts
    if params.target < len(counts) and counts[params.target] == 0:
        raise ConfigError(
            f"{ctx.path}.target",
            f"class {params.target} has no objects in the training split; pick a class that occurs",
        )
    return make_trigger(params.trigger, ctx.sample_shape, ctx.seed, f"{ctx.path}.trigger")


@ATTACKS.register("oda", params=OdaParams, check=check_oda)
def build_oda(params: OdaParams, ctx: AttackContext | None = None) -> Attack:
    """Object-disappearance attack: triggered target objects lose their boxes (004 §3.1)."""
    if ctx is None:
        raise TypeError("the oda attack needs an AttackContext")
    return ObjectDisappearance(params, ctx, oda_trigger(params, ctx))
