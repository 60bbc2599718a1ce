"""Hybrid reputation aggregation, HRA (004 §2.6, Eq. 8–9): momentum reputation as weights.

Every client j of the federation holds a reputation r_j, r_j(0) = ``r_init`` (0.5, §2.6).
A client whose update reached the filter in round t moves toward its gated evidence:

    r_j(t) = max(r_min, β r_j(t−1) + (1 − β) ϕ(m_j, m̃_j)),  ϕ(m, m̃) = m · m̃     (Eq. 8)

m_j the hard CGF mask, m̃_j = φ(z_j) the soft one (:mod:`geofl.server.cgf`): an accepted
update contributes its soft confidence, a rejected one 0; the floor r_min (Table A: 0.1)
keeps rejected clients eligible for recovery. The round's survivors P(t) are combined with

    ω_j = r_j(t) / Σ_{i∈P(t)} r_i(t)                                               (Eq. 9)

(the reputations *after* this round's update, as Eq. 9 writes r_j(t)).

Absent clients (not sampled, or their upload lost) — §2.6: "not treated as malicious;
their reputation is either held unchanged or decayed with a separate dropout coefficient".
``absent: hold`` (default) leaves r_j unchanged; ``absent: decay`` multiplies it by the
dropout coefficient γ (``absent_decay``), floored at r_min: r_j ← max(r_min, γ r_j).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = ["HraSettings", "ReputationBook", "reputation_step", "reputation_weights"]

Absent = Literal["hold", "decay"]


@dataclass(frozen=True)
class HraSettings:
    """HRA's parameters (004 §2.6; defaults from 004 Appendix A, Table A).

    Attributes:
        beta: Momentum β ∈ (0, 1) (Table A: 0.92; §2.6 recommends 0.9–0.95).
        r_min: Floor r_min ∈ [0, 1) (Table A: 0.1).
        r_init: r_j(0) ∈ (0, 1] (§2.6: 0.5).
        absent: Rule for clients without an update this round: ``hold`` or ``decay``.
        absent_decay: γ ∈ (0, 1] of ``decay``.
    """

    beta: float = 0.92
    r_min: float = 0.1
    r_init: float = 0.5
    absent: Absent = "hold"
    absent_decay: float = 0.99


def reputation_step(
    previous: torch.Tensor,
    hard: torch.Tensor,
    soft: torch.Tensor,
    *,
    beta: float,
    r_min: float,
) -> torch.Tensor:
    """Eq. 8 for the round's participants: max(r_min, β r + (1 − β) m m̃).

    Args:
        previous: ``[K]`` float64 r_j(t−1).
        hard: ``[K]`` bool m_j.
        soft: ``[K]`` float64 m̃_j ∈ [0, 1].

    Returns:
        ``[K]`` float64 r_j(t).
    """
    evidence = hard.to(torch.float64) * soft.to(torch.float64)
    return (beta * previous + (1.0 - beta) * evidence).clamp_min(r_min)


def reputation_weights(reputation: torch.Tensor, survivors: torch.Tensor) -> torch.Tensor:
    """Eq. 9: ``[K]`` float64 ω_j = r_j / Σ_{i∈P} r_i on the survivors, 0 elsewhere.

    If every survivor's reputation is 0 (r_min = 0 and no evidence yet), they share equally.
    """
    r = torch.where(survivors, reputation.to(torch.float64), 0.0)
    total = float(r.sum())
    if total > 0:
        return r / total
    n = int(survivors.sum())
    return survivors.to(torch.float64) / n if n else r


class ReputationBook:
    """Every client's reputation across rounds (004 Eq. 8), checkpointed by its strategy.

    Args:
        settings: β, r_min, r_init and the absent-client rule.
        num_clients: N; client ids are 0 … N − 1.
    """

    def __init__(self, settings: HraSettings, num_clients: int) -> None:
        self.s = settings
        self.r = torch.full((num_clients,), settings.r_init, dtype=torch.float64)

    def update(self, clients: torch.Tensor, hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        """One round: Eq. 8 for ``clients`` (``[K]`` int64 ids), the absent rule for the rest.

        Returns:
            ``[K]`` float64 r_j(t) of ``clients``.
        """
        new = reputation_step(self.r[clients], hard, soft, beta=self.s.beta, r_min=self.s.r_min)
        if self.s.absent == "decay":
            absent = torch.ones_like(self.r, dtype=torch.bool)
            absent[clients] = False
            decayed = (self.s.absent_decay * self.r).clamp_min(self.s.r_min)
            self.r = torch.where(absent, torch.minimum(self.r, decayed), self.r)
        self.r[clients] = new
        return new

    def state_dict(self) -> dict[str, Any]:
        return {"reputation": self.r.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.r = state["reputation"].clone().to(torch.float64)
