"""DP-SGD local training with adaptive clipping (001 §4.3, Eq. 14–18 and Eq. 15).

Each local step draws a Poisson batch (every local example independently with probability
q_k = B/|D_k|), clips each example's gradient to L2 norm C (Eq. 14) in micro-batches and
sums them — by default with the book-keeping engine (:mod:`geofl.client.bookkeeping`: one
forward and one backward pass, no per-sample backward), or from per-sample gradients
(:mod:`geofl.client.persample`, ``engine: func`` or ``opacus``) — adds
Gaussian noise and divides by the *expected* batch size q_k·|D_k| (Eq. 16–17), then takes
the optimiser step (Eq. 18) — after the algorithm's gradient correction, so FedProx, FedDyn,
SCAFFOLD and FedNova run "+ DP" with their server side unchanged (001 §6.1.3). A round of
n steps is the DpEvent ``SelfComposed(PoissonSampled(q_k, Gaussian(z)), n)``: record-level
DP for the client's data (Abadi et al. 2016; Mironov, Talwar & Zhang 2019), reported in the
client-local log and kept in the client's own ledger.

Noise placement (configurable, ``noise_on``):

* ``sum`` (default, Abadi et al. and the issue): N(0, σ²C²) on the *sum* of clipped
  gradients, so the noise multiplier of the event is σ;
* ``mean`` (001 Eq. 17 read literally): N(0, σ²C²) on the *mean*; the mean's sensitivity is
  C/(q|D_k|), so the event's noise multiplier is σ·q|D_k| (= σB) — far more noise; accounted
  as such.

Adaptive clipping (Eq. 15), per client, in client state: after a round,
Ĉ ← β Ĉ + (1 − β)·median_s ‖g̃_s‖₂ over the round's noisy steps, and the next round clips at
C = clip(τ Ĉ, C_min, C_max). The noisy gradients g̃ are already differentially private, so
this is post-processing and costs no privacy (001 §4.3). Note the paper's statistic includes
the noise: ‖g̃‖ ≈ √(‖ḡ‖² + σ²C²p)/B for p parameters, so whenever τσ√p/B > 1 the rule grows
C geometrically up to C_max. ``denoise: true`` uses √max(0, ‖g̃‖² − σ²C²p/B²) instead — an
unbiased estimate of the clean norm's square, still post-processing.

Not released: the training loss and metrics are not differentially private, so they stay in
the client-local log; the update's metadata carries none. Nor is the label histogram: no
DP-SGD server side reads it, and exact class counts would reveal a rare class's only record
outside ε ([10,10,10,9,1] → [10,10,10,9,0]), so the update carries ``label_histogram=None``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from geofl.client.data import ClientData
from geofl.client.persample import EngineName, make_engine, trainable_views
from geofl.client.state import StateSpec
from geofl.client.trainer import (
    LOCAL_TRAINERS,
    GradCorrection,
    LocalSGD,
    LocalTrainParams,
    train_for_round,
)
from geofl.errors import ConfigError
from geofl.models.base import FlatModel
from geofl.registry import CheckContext
from geofl.tasks.base import Task
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta, payload_bytes

__all__ = ["AdaptiveClipParams", "DpSgd", "DpSgdParams", "dp_sgd_plan"]

#: Client-state key of the running clipping statistic Ĉ_k (0 until the first round).
CLIP_STATE = "dp_sgd.clip_hat"


class AdaptiveClipParams(BaseModel):
    """Eq. 15's running statistic. The paper gives none of these values; ours are stated
    defaults (β = 0.9, τ = 1, C ∈ [0.1, 10])."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    beta: float = Field(0.9, ge=0.0, lt=1.0, description="β, weight of the previous Ĉ")
    tau: float = Field(1.0, gt=0.0, description="τ, C = τ·Ĉ before the bounds")
    c_min: float = Field(0.1, gt=0.0, description="C_min")
    c_max: float = Field(10.0, gt=0.0, description="C_max")
    denoise: bool = Field(
        False, description="subtract the expected noise energy from ‖g̃‖² (not the paper's)"
    )

    @model_validator(mode="after")
    def _bounds(self) -> AdaptiveClipParams:
        if self.c_min > self.c_max:
            raise ValueError(f"c_min {self.c_min} exceeds c_max {self.c_max}")
        return self


class DpSgdParams(BaseModel):
    """DP-SGD settings (001 §6.1.2: C ∈ {0.5, 1, 2}, σ ∈ {0.5, 1, 2, 3}, micro-batches 16)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_multiplier: float = Field(..., gt=0.0, allow_inf_nan=False, description="σ")
    clip: float = Field(1.0, gt=0.0, allow_inf_nan=False, description="C (C_k⁰ if adaptive)")
    micro_batch: int = Field(
        16, ge=1, description="physical batch of one pass (bounds memory; bk: B is fastest)"
    )
    noise_on: Literal["sum", "mean"] = Field("sum", description="where σC noise is added")
    adaptive_clip: AdaptiveClipParams | None = Field(None, description="Eq. 15; None: fixed C")
    engine: EngineName = Field(
        "bk", description="per-sample clipping: bk (book-keeping), func (torch.func) or opacus"
    )
    sampling_probability: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="q of the Poisson batches; None: q_k = B/|D_k| (001 §6.1.2)",
    )

    def planned_release(self, n: int, train: LocalTrainParams) -> list[dict[str, Any]]:
        """The DpEvent spec one round on ``n`` examples releases (known before training)."""
        q, steps = dp_sgd_plan(n, train, self.sampling_probability)
        z = self.noise_multiplier * (q * n if self.noise_on == "mean" else 1.0)
        return [
            {
                "mechanism": "poisson_gaussian",
                "noise_multiplier": z,
                "sampling_probability": q,
                "count": steps,
            }
        ]


def dp_sgd_plan(n: int, train: LocalTrainParams, q: float | None = None) -> tuple[float, int]:
    """``(q, steps)`` of one round on ``n`` local examples: q = min(1, B/n) unless given,
    and either ``train.local_steps`` or ``local_epochs`` × round(1/q) steps (expected
    passes over the data)."""
    q = q if q is not None else min(1.0, train.batch_size / max(n, 1))
    steps = train.local_steps or train.local_epochs * max(1, round(1.0 / q))
    return q, steps


def _has_batch_norm(model: nn.Module) -> str | None:
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            return name or type(mod).__name__
    return None


class DpSgd(LocalSGD):
    """DP-SGD with Poisson sampling, micro-batched per-sample clipping and Gaussian noise.

    Args:
        workspace: Model workspace (no BatchNorm: it mixes the samples of a batch).
        train: Optimiser settings (B sets q = B/|D_k|).
        task: Learning task (its loss is differentiated per sample).
        params: DP-SGD settings.
    """

    def __init__(
        self, workspace: FlatModel, train: LocalTrainParams, task: Task, params: DpSgdParams
    ) -> None:
        bn = _has_batch_norm(workspace.module)
        if bn is not None:
            raise ConfigError(
                "model.params.norm",
                f"layer {bn!r} is BatchNorm, which mixes a batch's samples and breaks "
                "per-sample DP; use norm: group",
            )
        if task.model_takes_targets:
            raise ConfigError("trainer.name", f"dp_sgd does not support the {task.name} task")
        super().__init__(workspace, train, task)
        self.params = params
        self.engine = make_engine(params.engine, workspace.module, task.loss)
        self._noise_mask: torch.Tensor | None = None

    def state_specs(self) -> Mapping[str, StateSpec]:
        """Ĉ_k when clipping is adaptive (0 = not yet measured: use ``clip``)."""
        return {CLIP_STATE: StateSpec((1,))} if self.params.adaptive_clip else {}

    def round_clip(self, state: Mapping[str, torch.Tensor]) -> float:
        """C_k^t of this round (Eq. 15's bounds around τ·Ĉ, or the fixed C)."""
        ad = self.params.adaptive_clip
        c_hat = float(state[CLIP_STATE][0]) if ad is not None and CLIP_STATE in state else 0.0
        if ad is None or c_hat <= 0.0:
            return self.params.clip
        return min(max(ad.tau * c_hat, ad.c_min), ad.c_max)

    def __call__(
        self,
        global_params: torch.Tensor,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
        correction: GradCorrection | None = None,
        augment_generator: torch.Generator | None = None,
        state: Mapping[str, torch.Tensor] | None = None,
    ) -> ClientUpdate:
        """Train from ``global_params`` (``[D]``) with DP-SGD; Δw and the round's DpEvent."""
        t, p = train_for_round(self.train_cfg, directives), self.params  # the round's η_l
        if t.augment and augment_generator is None:
            raise ValueError("train.augment is set but no augment generator was given")
        self.workspace.load(global_params)
        self._reseed_dropout(generator)
        self.workspace.module.train()
        n = len(data)
        q, steps = dp_sgd_plan(n, t, p.sampling_probability)
        state = state or {}
        clip = self.round_clip(state)
        flat_grad = self._bind_flat_grad()
        views = trainable_views(self.workspace, flat_grad)
        opt = self._optimizer(t)
        noisy_norms, loss_sum, seen = [], 0.0, 0
        for _ in range(steps):
            idx = (torch.rand(n, generator=generator) < q).nonzero().flatten()
            flat_grad.zero_()
            for chunk in torch.split(idx, p.micro_batch):
                x = data.inputs[chunk]
                if augment_generator is not None:
                    x = t.augment(x, augment_generator)
                y = self.task.collate(data.targets, chunk)
                _, batch_loss = self.engine.clipped_sum(x, y, clip, views)
                loss_sum, seen = loss_sum + batch_loss, seen + len(chunk)
            noisy_norms.append(self._privatise(flat_grad, clip, q * n, generator))
            if correction is not None:
                correction.apply(flat_grad, self.workspace.flat, self._mask)
            opt.step()
        for prm in self._params:  # leave the workspace unbound for other users
            prm.grad = None
        delta = self.workspace.flat.detach() - global_params
        update = self._update(data, directives, delta, steps, clip, noisy_norms, loss_sum, seen)
        if self.params.adaptive_clip is not None and noisy_norms:
            c_hat = float(state[CLIP_STATE][0]) if CLIP_STATE in state else 0.0
            c_next = self._next_clip_hat(c_hat, clip, noisy_norms, q * n)
            update.local_state[CLIP_STATE] = torch.tensor([c_next], dtype=torch.float32)
            update.local_log["dp_sgd"]["clip_hat_next"] = c_next
        return update

    def _privatise(
        self, flat_grad: torch.Tensor, clip: float, expected_batch: float, gen: torch.Generator
    ) -> float:
        """Eq. 16–17 in place on ``flat_grad`` (the clipped sum): noise, then ÷ qn; ‖g̃‖."""
        noise = torch.randn(flat_grad.shape, generator=gen)
        if self._mask is not None:
            noise.mul_(self._mask)
        std = self.params.noise_multiplier * clip
        if self.params.noise_on == "sum":
            flat_grad.add_(noise, alpha=std).div_(expected_batch)
        else:
            flat_grad.div_(expected_batch).add_(noise, alpha=std)
        return float(torch.linalg.vector_norm(flat_grad))

    def planned_release(self, n: int) -> list[dict[str, Any]]:
        """The DpEvent spec one round on ``n`` examples releases (before training runs)."""
        return self.params.planned_release(n, self.train_cfg)

    def _next_clip_hat(
        self, c_hat: float, clip: float, noisy_norms: list[float], expected_batch: float
    ) -> float:
        """Eq. 15: Ĉ^{t+1} = β Ĉ^t + (1 − β)·median_s ‖g̃_s‖ (Ĉ⁰ = C⁰/τ before any round)."""
        ad = self.params.adaptive_clip or AdaptiveClipParams()
        med = statistics.median(noisy_norms)
        if ad.denoise:  # E‖noise in g̃‖² = (per-entry std)² over the p trainable entries
            p = float(self._mask.sum()) if self._mask is not None else self.workspace.spec.numel
            per_entry = self.params.noise_multiplier * clip
            if self.params.noise_on == "sum":  # the noise was divided by qn with the sum
                per_entry /= expected_batch
            med = math.sqrt(max(0.0, med**2 - per_entry**2 * p))
        previous = c_hat if c_hat > 0.0 else clip / ad.tau
        return ad.beta * previous + (1.0 - ad.beta) * med

    def _update(
        self,
        data: ClientData,
        directives: ClientDirectives,
        delta: torch.Tensor,
        steps: int,
        clip: float,
        noisy_norms: list[float],
        loss_sum: float,
        seen: int,
    ) -> ClientUpdate:
        report: dict[str, object] = {
            "dp_event": self.planned_release(len(data))[0],
            "clip": clip,
            "steps": steps,
            "noisy_grad_norm_median": statistics.median(noisy_norms) if noisy_norms else None,
            "train_loss": loss_sum / seen if seen else None,
        }
        meta = UpdateMeta(
            client_id=data.client_id,
            num_samples=len(data),
            round=directives.round,
            steps=steps,
            bytes_sent=payload_bytes(delta),
        )
        return ClientUpdate(delta, meta, {"dp_sgd": report}, local_state={})


def _check(params: DpSgdParams, ctx: CheckContext) -> None:
    """Load-time: no BatchNorm model (it mixes a batch's samples), no detection task."""
    model = ctx.experiment.get("model", {})
    if (model.get("params") or {}).get("norm") == "batch":
        raise ConfigError(
            "model.params.norm",
            "BatchNorm mixes the samples of a batch, which breaks per-sample DP (dp_sgd); "
            "use norm: group",
        )
    task = (ctx.experiment.get("task") or {}).get("name")
    if task == "detection":
        ctx.fail("name", "dp_sgd does not support the detection task")


@LOCAL_TRAINERS.register("dp_sgd", params=DpSgdParams, check=_check)
def build_dp_sgd(
    params: DpSgdParams, *, workspace: FlatModel, train: LocalTrainParams, task: Task
) -> DpSgd:
    """DP-SGD (001 Eq. 14–18): Poisson batches, per-sample clipping, Gaussian noise."""
    return DpSgd(workspace, train, task, params)
