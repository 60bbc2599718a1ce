"""EMA-proximal regulariser (paper 001, FL-SPDP, §4.2 Eq. 12–13) with FedAvg's server step.

Client k minimises

    F̃_k(w) = F̂_k(w) + λ Ω_k(w),   Ω_k(w) = ‖w − w̄_k‖²₂          (Eq. 12, Eq. 13)

so its local gradient gains ∇(λ‖w − w̄_k‖²) = 2λ(w − w̄_k): Eq. 13 has no ½ (unlike FedProx's
μ/2‖w − w^t‖²), and ``lam`` is the paper's λ, not a μ. w̄_k is "the exponentially weighted
moving average of previous global models observed by client k", kept in client k's own state
(:class:`~geofl.client.state.ClientStateStore`, checkpointed, so a resumed run continues
exactly). A client that skips a round never sees that round's model, so its EMA skips it too.

Readings of what the paper leaves open (each is a parameter; the defaults are ours):

* **EMA rule.** w̄_k ← β w̄_k + (1 − β) w^t, once per round in which client k receives w^t
  (the paper names neither the rule's form nor β; ``beta`` defaults to 0.9).
* **Initialisation** (``init``). ``first`` (default): w̄_k is the first global model the
  client receives (no bias toward 0). ``zero``: w̄_k⁰ = 0 and the rule applies from the first
  round, so early anchors are shrunk toward 0 by β^n (an un-debiased EMA).
* **Which models are "previous"** (``anchor``). ``after_update`` (default): the round's own
  w^t is folded in before training, so the anchor is the EMA of every model seen up to and
  including w^t (with β = 0 this is FedProx with μ = 2λ, bit for bit). ``before_update``: the
  anchor is the EMA of the models seen in earlier participations only, and w^t is folded in
  after training; at a client's first participation with ``init: first`` the anchor is w^t.
* **λ.** The paper gives no value for Eq. 12's λ; the λ = 5·10⁻⁴ of §6.1.2 is Adam's weight
  decay (``train.weight_decay``), a different term. ``lam`` defaults to 0.01.
* **Lost uploads.** As for every stateful algorithm here, a client keeps its new state only
  when its upload arrives (:meth:`geofl.engine.scheduler.RoundScheduler._forget_state`), so
  a round whose upload is lost counts as skipped for the EMA too.

Composing with DP-SGD: w̄_k is a function of the global models the client received only —
post-processing of released quantities, holding nothing of its local data — and the term
2λ(w − w̄_k) does not depend on any sample. A DP trainer therefore adds the
:class:`~geofl.client.trainer.GradCorrection` of :meth:`EmaProxClient.correction` to the
privatised mini-batch gradient g̃ (after per-sample clipping and noise, Eq. 14–17), not to the
per-sample gradients: the term then neither uses clipping budget nor changes the
sensitivity, and the client's accounting is that of DP-SGD alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext
from geofl.client.state import ClientState, StateSpec
from geofl.client.trainer import GradCorrection, LocalTrainParams
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy
from geofl.update import ClientDirectives, ClientUpdate

__all__ = ["EMA", "SEEN", "EmaProxClient", "EmaProxParams", "ema_step"]

#: Client-state name of w̄_k, the EMA of the global models client k has received.
EMA = "ema_global"
#: Client-state name of the number of global models folded into w̄_k (a scalar).
SEEN = "ema_seen"


class EmaProxParams(BaseModel):
    """The EMA-proximal term λ‖w − w̄_k‖² (paper 001, Eq. 12–13) and its EMA."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lam: float = Field(
        0.01, ge=0.0, allow_inf_nan=False, description="λ of λ‖w − w̄_k‖² (Eq. 12; no ½)"
    )
    beta: float = Field(
        0.9, ge=0.0, lt=1.0, allow_inf_nan=False, description="β of w̄ ← βw̄ + (1 − β)w^t"
    )
    init: Literal["first", "zero"] = Field(
        "first", description="w̄_k before any model: the first model received, or 0"
    )
    anchor: Literal["after_update", "before_update"] = Field(
        "after_update", description="fold the round's w^t into w̄_k before or after training"
    )


def ema_step(ema: torch.Tensor, model: torch.Tensor, beta: float) -> torch.Tensor:
    """One EMA step β·w̄ + (1 − β)·w (a new tensor; β = 0 gives ``model``'s values exactly).

    Args:
        ema: ``[D]`` w̄_k before the step.
        model: ``[D]`` the global model received.
        beta: β ∈ [0, 1).
    """
    return beta * ema + (1.0 - beta) * model


class EmaProxClient:
    """Client half: the gradient correction 2λ(w − w̄_k) and the EMA update of w̄_k.

    ``correction`` and ``finish`` both fold this round's model into w̄_k with
    :meth:`_updated` (pure: the client half holds no per-client state between the calls).
    """

    def __init__(self, params: EmaProxParams) -> None:
        self.params = params

    def state_specs(self, dim: int) -> Mapping[str, StateSpec]:
        return {EMA: StateSpec((dim,)), SEEN: StateSpec(())}

    def _updated(
        self, global_params: torch.Tensor, state: ClientState
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(w̄_k before, w̄_k after)`` folding ``global_params`` in (Eq. 12's EMA)."""
        if self.params.init == "first" and float(state.tensors[SEEN]) == 0.0:
            first = global_params.clone()  # the first model is w̄_k itself
            return first, first
        previous = state.tensors[EMA]
        return previous, ema_step(previous, global_params, self.params.beta)

    def correction(
        self, global_params: torch.Tensor, state: ClientState, directives: ClientDirectives
    ) -> GradCorrection | None:
        """∇(λ‖w − w̄_k‖²) = 2λ(w − w̄_k) (Eq. 12–13) about this round's anchor, or None for λ = 0.

        Args:
            global_params: ``[D]`` w^t, the model received this round.
            state: The client's w̄_k and the count of models folded into it.
            directives: This round's directives (unused).
        """
        if self.params.lam == 0.0:
            return None  # plain local training, bit for bit (the EMA is still kept)
        previous, updated = self._updated(global_params, state)
        anchor = updated if self.params.anchor == "after_update" else previous.clone()
        return GradCorrection(prox_mu=2.0 * self.params.lam, anchor=anchor)

    def finish(
        self,
        update: ClientUpdate,
        state: ClientState,
        directives: ClientDirectives,
        train: LocalTrainParams,
        *,
        global_params: torch.Tensor,
    ) -> tuple[ClientUpdate, dict[str, torch.Tensor]]:
        _, updated = self._updated(global_params, state)
        seen = state.tensors[SEEN] + 1.0
        return update, {EMA: updated, SEEN: seen}


@ALGORITHMS.register("ema_prox", params=EmaProxParams)
def build_ema_prox(params: EmaProxParams, *, ctx: AlgorithmContext) -> Algorithm:
    """EMA-proximal local objective (paper 001, Eq. 12–13), FedAvg server step."""
    strategy = ComposedStrategy(ctx.tier, PlainServerOptimizer(ctx.server_lr))
    return Algorithm(strategy, EmaProxClient(params))
