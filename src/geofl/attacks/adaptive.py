"""Adaptive-CGF (004 §3.6, Table 7): a poisoning attacker that knows the cosine filter.

Two attacks share the evasion (:class:`CgfEvasion`): ``adaptive_cgf`` is the trigger
backdoor of :mod:`geofl.attacks.backdoor` (classification) and ``adaptive_oda`` the
object-disappearance attack of :mod:`geofl.attacks.oda` (detection, the paper's own Table 7
row), each with its threat model unchanged (seeded colluding attackers, poisoned pool,
target, trigger, boost γ, schedule), whose attackers also "jointly adjust update
direction, update magnitude, and poisoning timing to reduce the cosine anomaly score
while maintaining temporal reputation" (004 §3.6).

What the attacker knows — only what an honest participant also receives, plus the protocol:

* the rule of CGF (004 Eq. 6: cosine distance s = 1 − cos to a reference direction) and of
  HRA (a reputation that falls when the filter rejects an update);
* the global models w(t) it is sent; its estimate of the filter's reference (the previous
  round's survivors' mean) is the direction of the last global change w(t) − w(t′), t′ the
  last earlier round it saw (exact up to the reputation weights and the server step size);
* with a ``dual_shield`` server, the directives every selected client gets: its own
  reputation r_j from before the round and the public global-change norms of ADP
  (:mod:`geofl.privacy.adaptive`).

It does not know the other clients' updates, the current round's reference or the MAD
threshold, so it targets a fixed cosine distance ``max_distance``.

In the 003 hierarchy a tractor is sent no reputation: DUAL-SHIELD at the GEO scores the
LEO relays' regional models, not tractors
(:class:`~geofl.engine.hierarchy.geo.TractorPlan`), so the reputation floor never holds
an attacking tractor back and it attacks on its schedule.

Per round, the attacker attacks iff the schedule is active (``schedule.period`` k: every k-th
round) and its broadcast reputation is ≥ ``reputation_floor`` (always, without one);
otherwise it trains on its clean pool and uploads the honest update, which restores its
reputation. In an attack round it poisons its pool, trains, boosts by γ, and then projects
(:func:`project_to_cone`): rotates the update in the plane of itself and the reference until
s = ``max_distance`` (keeping the norm and the malicious component orthogonal to the
reference), then scales it to norm ≤ ``max_norm`` — or, unset, ≤ ADP's public clip C(t)
(the median of the last 3 public norms), when the server broadcasts them.

Memory: the attackers collude, so one object keeps the last two global models any of them
saw (and each one's last broadcast reputation); where clients run in several worker
processes each process keeps its own, and the reference is the last change that process saw.
The projection is computed in float64 and returned in the update's dtype (float32 rounding
can exceed ``max_distance`` by ~1e-8).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.attacks.backdoor import BackdoorParams, PoisoningAttack, check_threat
from geofl.attacks.client import ATTACKS, Attack, AttackContext
from geofl.attacks.oda import ObjectDisappearance, OdaParams, check_oda, oda_trigger
from geofl.attacks.trigger import Trigger, make_backdoor_trigger
from geofl.client.data import ClientData
from geofl.privacy.adaptive import REPUTATION_KEY, public_clip, public_norms
from geofl.update import ClientDirectives, ClientUpdate

__all__ = [
    "AdaptiveCgfAttack",
    "AdaptiveCgfParams",
    "AdaptiveOdaAttack",
    "AdaptiveOdaParams",
    "CgfEvasion",
    "EvasionParams",
    "cosine_distance",
    "project_to_cone",
]

#: Public norms (rounds) the attacker's default norm cap takes the median of (ADP's default).
NORM_WINDOW = 3


class EvasionParams(BaseModel):
    """What the adaptive attacker targets (added to an attack's own parameters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_distance: float = Field(
        0.2,
        ge=0.0,
        le=2.0,
        allow_inf_nan=False,
        description="cosine distance s = 1 − cos (004 Eq. 6) to the estimated reference "
        "the projected update keeps at most",
    )
    max_norm: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="L2 cap of the projected update; None: ADP's public C(t) when broadcast",
    )
    reputation_floor: float | None = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="attack only while the broadcast reputation r_j ≥ this; None: always",
    )


class AdaptiveCgfParams(BackdoorParams, EvasionParams):
    """The backdoor's threat model plus what the adaptive attacker targets."""


class AdaptiveOdaParams(OdaParams, EvasionParams):
    """The object-disappearance threat model plus what the adaptive attacker targets."""


def cosine_distance(u: torch.Tensor, ref: torch.Tensor) -> float:
    """s = 1 − ⟨u, ref⟩/(‖u‖ ‖ref‖) (004 Eq. 6), in float64."""
    a, b = u.to(torch.float64), ref.to(torch.float64)
    den = float(torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b))
    return 1.0 - float(a @ b) / den if den > 0 else 0.0


def project_to_cone(
    u: torch.Tensor, ref: torch.Tensor | None, max_distance: float, max_norm: float | None
) -> torch.Tensor:
    """Rotate ``u`` toward ``ref`` until 1 − cos ≤ ``max_distance``, then cap its norm.

    In the plane of u and the unit reference ĝ, with p the part of u orthogonal to ĝ and
    c* = 1 − ``max_distance``: u ← ‖u‖ (c* ĝ + √(1 − c*²) p/‖p‖) when its cosine is below
    c* (u itself otherwise; ‖u‖ ĝ when p = 0); then u ← u · min(1, ``max_norm``/‖u‖).

    Args:
        u: ``[D]`` malicious update (not modified).
        ref: ``[D]`` estimated reference direction, or None (no rotation).
        max_distance: Target cosine distance s* ∈ [0, 2].
        max_norm: L2 cap, or None.

    Returns:
        A new ``[D]`` tensor of ``u``'s dtype.
    """
    v = u.to(torch.float64)
    norm = float(torch.linalg.vector_norm(v))
    if ref is not None and norm > 0 and float(torch.linalg.vector_norm(ref)) > 0:
        g = ref.to(torch.float64)
        g = g / torch.linalg.vector_norm(g)
        along = float(v @ g)
        target = 1.0 - max_distance
        if along / norm < target:
            p = v - along * g
            p_norm = float(torch.linalg.vector_norm(p))
            if p_norm > 0:
                sine = math.sqrt(max(0.0, 1.0 - target * target))
                v = norm * (target * g + sine * (p / p_norm))
            else:
                v = norm * g
    if max_norm is not None:
        n = float(torch.linalg.vector_norm(v))
        if n > max_norm:
            v = v * (max_norm / n)
    return v.to(u.dtype)


class CgfEvasion(PoisoningAttack):
    """CGF-aware projection and reputation-aware timing over a poisoning attack.

    Listed before the attack class in a subclass's bases (``class A(CgfEvasion, Attack)``),
    it wraps that attack's ``poison``, ``__call__`` and ``describe``.
    """

    adaptive: EvasionParams

    def _start_evasion(self, params: EvasionParams) -> None:
        self.adaptive = params
        self._models: list[tuple[int, torch.Tensor]] = []  # the last two (round, w) seen
        self._reputation: dict[int, float] = {}

    def observe(self, global_params: torch.Tensor, directives: ClientDirectives) -> None:
        """Remember the broadcast model and this client's broadcast reputation."""
        t = directives.round
        if not self._models or self._models[-1][0] != t:
            self._models = [*self._models, (t, global_params.detach().clone())][-2:]
        r = directives.extra.get(REPUTATION_KEY)
        if r is None:
            self._reputation.pop(directives.client_id, None)
        else:
            self._reputation[directives.client_id] = float(r)

    def attacks(self, client: int, round_idx: int) -> bool:
        """Whether ``client`` attacks in ``round_idx``: schedule and reputation floor."""
        if not self.params.schedule.active(round_idx):
            return False
        floor, r = self.adaptive.reputation_floor, self._reputation.get(client)
        return floor is None or r is None or r >= floor

    def reference(self, round_idx: int) -> torch.Tensor | None:
        """The estimated reference: the last global change w(t) − w(t′) seen before t."""
        seen = [(t, w) for t, w in self._models if t <= round_idx]
        if len(seen) < 2:
            return None
        return seen[-1][1] - seen[-2][1]

    def poison(self, data: ClientData, round_idx: int) -> ClientData:
        if not self.attacks(data.client_id, round_idx):
            return data
        return super().poison(data, round_idx)

    def norm_cap(self, directives: ClientDirectives) -> float | None:
        """``max_norm``, else ADP's public C(t) (median of the broadcast norms), else None."""
        if self.adaptive.max_norm is not None:
            return self.adaptive.max_norm
        norms = public_norms(directives.extra, NORM_WINDOW)
        return public_clip(norms, 0.5, math.inf) if norms else None

    def __call__(
        self, update: ClientUpdate, directives: ClientDirectives, generator: torch.Generator
    ) -> ClientUpdate:
        if not self.attacks(directives.client_id, directives.round):
            return update
        boosted = super().__call__(update, directives, generator)
        delta = project_to_cone(
            boosted.delta,
            self.reference(directives.round),
            self.adaptive.max_distance,
            self.norm_cap(directives),
        )
        return ClientUpdate(
            delta, boosted.meta, boosted.local_log, boosted.tensors, boosted.local_state
        )

    def describe(self, clients: list[ClientData]) -> dict[str, Any]:
        out = super().describe(clients)
        a = self.adaptive
        out.update(
            max_distance=a.max_distance, max_norm=a.max_norm, reputation_floor=a.reputation_floor
        )
        return out


class AdaptiveCgfAttack(CgfEvasion, PoisoningAttack):
    """The trigger backdoor with CGF-aware projection and reputation-aware timing."""

    def __init__(self, params: AdaptiveCgfParams, ctx: AttackContext) -> None:
        path = f"{ctx.path}.trigger"
        trigger = make_backdoor_trigger(params.trigger, ctx.sample_shape, ctx.seed, path)
        PoisoningAttack.__init__(self, "adaptive_cgf", params, ctx, trigger=trigger)
        self._start_evasion(params)


class AdaptiveOdaAttack(CgfEvasion, ObjectDisappearance):
    """The object-disappearance attack with CGF-aware projection and reputation-aware timing."""

    def __init__(self, params: AdaptiveOdaParams, ctx: AttackContext, trigger: Trigger) -> None:
        ObjectDisappearance.__init__(self, params, ctx, trigger)
        self.name = "adaptive_oda"
        self._start_evasion(params)


@ATTACKS.register("adaptive_cgf", params=AdaptiveCgfParams, check=check_threat)
def build_adaptive_cgf(params: AdaptiveCgfParams, ctx: AttackContext | None = None) -> Attack:
    """Backdoor that projects into CGF's cone and times itself by reputation (004 Table 7)."""
    if ctx is None:
        raise TypeError("the adaptive_cgf attack needs an AttackContext")
    return AdaptiveCgfAttack(params, ctx)


@ATTACKS.register("adaptive_oda", params=AdaptiveOdaParams, check=check_oda)
def build_adaptive_oda(params: AdaptiveOdaParams, ctx: AttackContext | None = None) -> Attack:
    """Object disappearance that projects into CGF's cone and times itself by reputation
    (004 Table 7, Adaptive-CGF on detection)."""
    if ctx is None:
        raise TypeError("the adaptive_oda attack needs an AttackContext")
    return AdaptiveOdaAttack(params, ctx, oda_trigger(params, ctx))
