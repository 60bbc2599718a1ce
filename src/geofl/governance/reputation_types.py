"""Types of the node reputation model (000 Eq. 18–22): its parameters, what the server saw
of a node in a round, and the components computed for it.

The model, its inputs' scales and every parameter's role are documented in the module
docstring of :mod:`geofl.governance.reputation`, whose :class:`ReputationTracker` takes
these types round by round; the docstrings below refer to it as "the module docstring".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from geofl.errors import GovernanceError
from geofl.governance.reputation_terms import SUM_TOL, DeltaAccMap

__all__ = ["NodeObservation", "ReputationComponents", "ReputationParams"]


class ReputationParams(BaseModel):
    """Parameters of the reputation model (000 Eq. 18–22); see
    :mod:`geofl.governance.reputation`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int = Field(3, ge=1, description="T: statistical window in rounds (000 §4.7: 3)")
    lambda_acc: float = Field(0.5, ge=0.0, le=1.0, description="λ1: weight of g(ΔAcc), Eq. 19")
    lambda_consistency: float = Field(0.5, ge=0.0, le=1.0, description="λ2: weight of S, Eq. 19")
    delta_acc_map: DeltaAccMap = Field("linear", description="g: ΔAcc → [0, 1]")
    delta_acc_scale: float = Field(
        0.05, gt=0.0, description="s: ΔAcc (fraction) mapped to the top of the range"
    )
    missing_quality: float | None = Field(
        None, ge=0.0, le=1.0, description="Quality of a failed round; None = skip the round"
    )
    contribution_default: float = Field(
        0.5, ge=0.0, le=1.0, description="contribution when the window holds no quality"
    )
    participation_init: float = Field(1.0, ge=0.0, le=1.0, description="r of a new node")
    participation_recovery: float = Field(
        0.25, gt=0.0, le=1.0, description="ρ_up: EMA rate towards 1 after a participation"
    )
    participation_decay: float = Field(
        0.5, gt=0.0, le=1.0, description="ρ_down: r ← (1 − ρ_down)·r after a miss"
    )
    miss_streak_penalty: float = Field(
        0.25, ge=0.0, description="κ: participation × exp(−κ·consecutive misses)"
    )
    behavior_weights: tuple[float, float, float] = Field(
        (1.0, 1.0, 1.0), description="weights of (update norm, σ, participation) variances"
    )
    variance_floor: float = Field(
        0.01, ge=0.0, description="v_floor: Eq. 21 denominator is max(max_j Var_j, v_floor)"
    )
    inactivity_penalty: float = Field(
        0.5, ge=0.0, le=1.0, description="π: consistency × (1 − π·failed fraction of window)"
    )
    w_contribution: float = Field(0.4, gt=0.0, description="w1 of Eq. 22")
    w_participation: float = Field(0.3, gt=0.0, description="w2 of Eq. 22")
    w_consistency: float = Field(0.3, gt=0.0, description="w3 of Eq. 22")

    @model_validator(mode="after")
    def _check(self) -> ReputationParams:
        lam = self.lambda_acc + self.lambda_consistency
        if not math.isclose(lam, 1.0, abs_tol=SUM_TOL):
            raise ValueError(
                f"lambda_acc + lambda_consistency must equal 1 (000 Eq. 19), got {lam:g}"
            )
        w = self.w_contribution + self.w_participation + self.w_consistency
        if not math.isclose(w, 1.0, abs_tol=SUM_TOL):
            raise ValueError(
                "w_contribution + w_participation + w_consistency must equal 1 "
                f"(000 Eq. 22), got {w:g}"
            )
        if any(b < 0 for b in self.behavior_weights) or sum(self.behavior_weights) <= 0:
            raise ValueError(
                f"behavior_weights must be non-negative with a positive sum, "
                f"got {self.behavior_weights}"
            )
        return self


@dataclass(frozen=True)
class NodeObservation:
    """What the server saw of one node in one round (inputs of 000 Eq. 18–21).

    Attributes:
        participated: True = update accepted; False = expected but failed, missing or
            rejected; None = not expected this round (same as leaving the node out).
        delta_acc: ΔAcc as a fraction (leave-one-out, see
            :mod:`geofl.governance.reputation`) or None.
        consistency: S of 000 Eq. 15 in [0, 1], or None.
        update_norm: L2 norm of the released update, or None.
        noise_sigma: perturbation intensity σ of the release, or None.
    """

    participated: bool | None = True
    delta_acc: float | None = None
    consistency: float | None = None
    update_norm: float | None = None
    noise_sigma: float | None = None

    def check(self, node: int) -> None:
        """Raise :class:`GovernanceError` naming the field if a value is out of range."""
        for name in ("delta_acc", "consistency", "update_norm", "noise_sigma"):
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise GovernanceError(f"node {node}: {name} must be finite, got {v}")
        if self.consistency is not None and not 0.0 <= self.consistency <= 1.0:
            raise GovernanceError(f"node {node}: consistency must lie in [0, 1]")
        if self.delta_acc is not None and not -1.0 <= self.delta_acc <= 1.0:
            raise GovernanceError(f"node {node}: delta_acc is a fraction in [-1, 1]")
        for name in ("update_norm", "noise_sigma"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise GovernanceError(f"node {node}: {name} must be >= 0, got {v}")


@dataclass(frozen=True)
class ReputationComponents:
    """Reputation of one node after one round (one point of each curve of 000 Fig. 13).

    Attributes:
        node: Node id.
        round_id: Round the components were computed after.
        contribution: Rep_contrib (Eq. 18).
        participation: Rep_part.
        consistency: Rep_consist (Eq. 21, with the inactivity penalty).
        reputation: Rep (Eq. 22).
        participation_ratio: Smoothed ratio r before the miss-streak penalty.
        miss_streak: Consecutive expected-but-failed rounds up to this one.
        behavior_variance: Var(Behavior_i) of the window (normalised features).
    """

    node: int
    round_id: int
    contribution: float
    participation: float
    consistency: float
    reputation: float
    participation_ratio: float
    miss_streak: int
    behavior_variance: float
