"""Reputation-aware adaptive DP, ADP (004 §2.7, Eq. 10–13): the ``adaptive_dp`` release step.

Before round t the server (:class:`~geofl.algorithms.dual_shield.DualShieldStrategy`)
broadcasts to each selected client j, in its directives:

* ``dshield.reputation`` — r_j as HRA left it after round t − 1 (scheduled from past
  reputation only, 004 §2.7 / Alg. 1 step 1; r_j(0) = r_init before any round);
* ``dshield.rounds`` — T, the run's number of rounds;
* ``dshield.public_norm.1`` … ``dshield.public_norm.H`` — the L2 norms of the last H ≤
  :data:`PUBLIC_NORMS` *global model changes* ‖w(s) − w(s − 1)‖ (``.1`` the most recent).

What is public. Every client receives w(s) each round, so the global model changes and their
norms are known to every participant (and to an eavesdropper on the broadcast); they are
post-processing of the protected (already noised) uploads, so they carry no client's raw
update. The clip bound therefore uses no private data of the client:

    C(t) = Quantile_q({‖w(s) − w(s − 1)‖ : s = t − k … t − 1})          (004 Eq. 10, our reading)

with k = ``window`` (default 3) and q = ``quantile`` (default ½, the median; linear
interpolation between order statistics); ``clip_init`` before any change is public, and
``clip_max`` (optional) caps C(t). This departs from the letter of Eq. 10, which takes the
quantile of the *clients'* update norms ‖Δw_j‖ — those are private (the server only sees them
noised). Caveat: the global change contains the aggregated noise, so at small ε the public
norms grow with σ√D and C(t) with them; ``clip_max`` bounds that feedback.

Then (004 Eq. 11–12), with t the 1-based round::

    g(r, t) = (½ + r/2)(1 + 0.5 t/T) ∈ [0.5, 1.5]
    ε_j(t) = ε_round · g(r_j, t)
    σ_j(t) = 2C(t)/ε_j(t) · √(2 ln(1.25/δ))

The update is clipped to C(t) and N(0, σ_j² I) noise added from the ``release`` stream
(:func:`~geofl.privacy.mechanisms.clip_and_noise`). The step reports the dp_event with
z = σ_j/(2C) = √(2 ln(1.25/δ))/ε_j — replace-one sensitivity 2C (004 Eq. 13) — so the run's
accountant composes the actual per-client sequence (RDP at the run's δ, Alg. 1 step 7).
Note that the classic calibration (Eq. 5) guarantees (ε, δ) only for ε < 1; the accountant's
ε uses z alone and holds for every ε_j. :func:`table6_epsilons` reproduces Table 6's setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS, ReleaseStep
from geofl.privacy.accounting import ACCOUNTANTS, dp_event_from_spec
from geofl.privacy.mechanisms import check_noise_norm, clip_and_noise, release_report
from geofl.registry import CheckContext
from geofl.update import ClientDirectives

__all__ = [
    "PUBLIC_NORMS",
    "REPUTATION_KEY",
    "ROUNDS_KEY",
    "AdaptiveDpParams",
    "adp_epsilon",
    "adp_sigma",
    "budget_multiplier",
    "public_clip",
    "public_norm_key",
    "public_norms",
    "table6_epsilons",
]

#: Directive keys the DUAL-SHIELD server sends (see the module docstring).
REPUTATION_KEY = "dshield.reputation"
ROUNDS_KEY = "dshield.rounds"
#: Most public norms the server broadcasts (the largest allowed ``window``).
PUBLIC_NORMS = 8


def public_norm_key(lag: int) -> str:
    """Directive key of the public norm ``lag`` rounds back (1 = the most recent)."""
    return f"dshield.public_norm.{lag}"


def public_norms(extra: Mapping[str, Any], window: int) -> list[float]:
    """The up to ``window`` most recent public norms found in directives ``extra``."""
    out: list[float] = []
    for lag in range(1, window + 1):
        v = extra.get(public_norm_key(lag))
        if v is None:
            break
        out.append(float(v))
    return out


def public_clip(
    norms: Sequence[float], quantile: float, clip_init: float, clip_max: float | None = None
) -> float:
    """C(t): the ``quantile`` of the public norms (004 Eq. 10), ``clip_init`` without any.

    Example:
        >>> public_clip([3.0, 1.0, 2.0], 0.5, 9.0), public_clip([], 0.5, 9.0)
        (2.0, 9.0)
        >>> public_clip([1.0, 3.0], 0.75, 9.0), public_clip([5.0], 0.5, 9.0, clip_max=4.0)
        (2.5, 4.0)
    """
    positive = [n for n in norms if n > 0 and math.isfinite(n)]
    c = float(np.quantile(np.asarray(positive), quantile)) if positive else clip_init
    return min(c, clip_max) if clip_max is not None else c


def budget_multiplier(reputation: float, round_idx: int, rounds: int) -> float:
    """g(r, t) = (½ + r/2)(1 + 0.5 t/T) (004 Eq. 12).

    Example (004 Fig. 2 end values, t = T; the caption rounds 1.125 and 1.425 down):
        >>> [round(budget_multiplier(r, 40, 40), 12) for r in (0.2, 0.5, 0.9)]
        [0.9, 1.125, 1.425]
    """
    return (0.5 + reputation / 2.0) * (1.0 + 0.5 * round_idx / rounds)


def adp_epsilon(eps_round: float, reputation: float, round_idx: int, rounds: int) -> float:
    """ε_j(t) = ε_round · g(r_j, t) (004 Eq. 11)."""
    return eps_round * budget_multiplier(reputation, round_idx, rounds)


def adp_sigma(clip: float, epsilon: float, delta: float) -> float:
    """σ = 2C/ε · √(2 ln(1.25/δ)) (004 Eq. 11, sensitivity 2C of Eq. 13).

    Example:
        >>> round(adp_sigma(1.0, 1.0, 1e-5), 4)
        9.6896
    """
    return 2.0 * clip / epsilon * math.sqrt(2.0 * math.log(1.25 / delta))


class AdaptiveDpParams(BaseModel):
    """Parameters of the ``adaptive_dp`` release step (004 §2.7, Eq. 10–12)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epsilon_round: float = Field(
        1.0, gt=0.0, allow_inf_nan=False, description="ε_round, the per-round base budget"
    )
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of the Gaussian calibration")
    window: int = Field(
        3, ge=1, le=PUBLIC_NORMS, description="k: rounds of public norms in C(t) (Eq. 10)"
    )
    quantile: float = Field(0.5, ge=0.0, le=1.0, description="q of C(t) (Eq. 10)")
    clip_init: float = Field(
        1.0, gt=0.0, allow_inf_nan=False, description="C before any public norm"
    )
    clip_max: float | None = Field(
        None, gt=0.0, allow_inf_nan=False, description="upper bound on C(t); None: none"
    )


class _AdaptiveDp:
    name = "adaptive_dp"

    def __init__(self, params: AdaptiveDpParams) -> None:
        self.p = params

    def plan(self, directives: ClientDirectives) -> tuple[float, float, float, dict[str, Any]]:
        """(C, ε_j, σ_j) from the directives alone, and what to log about them."""
        extra, p = directives.extra, self.p
        if REPUTATION_KEY not in extra or ROUNDS_KEY not in extra:
            raise ValueError(
                f"client {directives.client_id}: adaptive_dp needs the reputation and T "
                "from a dual_shield server"
            )
        r, rounds = float(extra[REPUTATION_KEY]), int(extra[ROUNDS_KEY])
        norms = public_norms(extra, p.window)
        clip = public_clip(norms, p.quantile, p.clip_init, p.clip_max)
        eps = adp_epsilon(p.epsilon_round, r, directives.round, rounds)
        log = {"reputation": r, "epsilon": eps, "public_norms": norms}
        return clip, eps, adp_sigma(clip, eps, p.delta), log

    def planned_release(
        self, data: ClientData, directives: ClientDirectives
    ) -> list[dict[str, Any]]:
        """The DpEvent of this round's release, from the directives (the budget check's)."""
        clip, _, sigma, _ = self.plan(directives)
        return [release_report(0.0, clip, sigma)["dp_event"]]

    def __call__(
        self,
        delta: torch.Tensor,
        *,
        data: ClientData,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        clip, _, sigma, log = self.plan(directives)
        out, norm = clip_and_noise(delta, clip=clip, sigma=sigma, generator=generator)
        return out, {**log, **release_report(norm, clip, sigma)}


def _check(params: AdaptiveDpParams, ctx: CheckContext) -> None:
    check_noise_norm(params, ctx)
    algorithm = ((ctx.method or {}).get("algorithm") or {}).get("name")
    if algorithm != "dual_shield":
        ctx.fail(
            "",
            "adaptive_dp schedules its noise from the reputation a dual_shield server "
            f"broadcasts; use algorithm: {{name: dual_shield}} (not {algorithm!r})",
        )


@RELEASE_STEPS.register("adaptive_dp", params=AdaptiveDpParams, traits=("noise",), check=_check)
def build_adaptive_dp(params: AdaptiveDpParams) -> ReleaseStep:
    """Reputation-aware adaptive DP (004 Eq. 10–12): clip to C(t), noise σ_j(t)."""
    return _AdaptiveDp(params)


def table6_epsilons(
    eps_round: float,
    *,
    rounds: int = 40,
    delta: float = 1e-5,
    reputation: float | None = None,
) -> float:
    """Cumulative ε of one client over ``rounds`` releases (004 Table 6: RDP, q = 1).

    Args:
        eps_round: ε_round.
        rounds: T (Table 6: 40).
        delta: δ of the reported ε and of the calibration (Table 6: 1e-5).
        reputation: None: every round at ε_round itself (g = 1, Table 6's "per-round base
            budgets"); else ε_j(t) = ε_round · g(r, t), t = 1 … T, with r held fixed.

    Returns:
        ε(δ) from the project's ``rdp`` accountant.
    """
    acc = ACCOUNTANTS.build("rdp", {})
    for t in range(1, rounds + 1):
        eps = eps_round if reputation is None else adp_epsilon(eps_round, reputation, t, rounds)
        z = adp_sigma(1.0, eps, delta) / 2.0
        acc.record(0, dp_event_from_spec({"mechanism": "gaussian", "noise_multiplier": z}))
    return acc.epsilon(0, delta)
