"""Cosine-similarity update checkpointer (003 Alg. 1 lines 2–5, §2.1.5).

Before an upload the tractor compares its update with a reference and holds it back when
it carries little new information: ``s_cos = ⟨a, b⟩ / (‖a‖ ‖b‖)`` above ``1 − τ_cos`` (Alg.
1: ``1 − s_cos < τ_cos``), and — when ``τ_dot`` is set — the inner product changed by less
than ``τ_dot`` since the last check (``|s_dot − s_dot_prev| < τ_dot``). The reference is the
last *transmitted* update (§2.1.5: "if similarity exceeds a predefined threshold, the
upload is skipped"); Alg. 1 writes it against the global weights, where the cosine of two
nearby weight vectors is ≈ 1 and the test loses meaning, so updates are compared. A held
update is not lost: the caller coalesces it into the next one that is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CheckpointParams", "GateDecision", "cosine_gate", "row_cosine"]


class CheckpointParams(BaseModel):
    """Thresholds of the checkpointer (Alg. 1's (τ_cos, τ_dot); the paper gives no values)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tau_cos: float = Field(
        0.05, ge=0.0, le=2.0, description="hold when 1 − cos(update, last sent) < τ_cos; 0: off"
    )
    tau_dot: float | None = Field(
        None, gt=0.0, description="also require |s_dot − s_dot_prev| < τ_dot; None: cosine only"
    )


@dataclass(frozen=True)
class GateDecision:
    """What the checkpointer decided for each of K updates.

    Attributes:
        send: ``[K]`` bool: transmit (True) or hold back.
        cosine: ``[K]`` s_cos to the reference (0 where there is none).
        dot: ``[K]`` s_dot = ⟨update, reference⟩.
    """

    send: torch.Tensor
    cosine: torch.Tensor
    dot: torch.Tensor


def row_cosine(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise cosine and inner product of ``a, b [K, D]`` (cosine 0 for a zero row)."""
    dot = (a * b).sum(1)
    norms = torch.linalg.vector_norm(a, dim=1) * torch.linalg.vector_norm(b, dim=1)
    cos = torch.where(norms > 0, dot / norms.clamp_min(torch.finfo(a.dtype).tiny), 0.0)
    return cos, dot


def cosine_gate(
    updates: torch.Tensor,
    reference: torch.Tensor,
    has_reference: torch.Tensor,
    tau_cos: float,
    *,
    tau_dot: float | None = None,
    dot_prev: torch.Tensor | None = None,
) -> GateDecision:
    """Alg. 1 lines 2–5 for K tractors at once.

    Args:
        updates: ``[K, D]`` this round's updates.
        reference: ``[K, D]`` last transmitted updates (any row where ``has_reference``
            is False is ignored).
        has_reference: ``[K]`` bool; a tractor that never sent always sends.
        tau_cos: τ_cos ∈ [0, 2]: hold when 1 − s_cos < τ_cos (0 never holds).
        tau_dot: τ_dot, or None to test the cosine alone.
        dot_prev: ``[K]`` s_dot of the previous check (needed with ``tau_dot``).
    """
    if not 0.0 <= tau_cos <= 2.0:
        raise ValueError(f"tau_cos: {tau_cos} is outside [0, 2]")
    cos, dot = row_cosine(updates, reference)
    redundant = has_reference & ((1.0 - cos) < tau_cos)
    if tau_dot is not None:
        if dot_prev is None:
            raise ValueError("tau_dot needs dot_prev, the previous check's inner products")
        redundant &= (dot - dot_prev).abs() < tau_dot
    return GateDecision(~redundant, torch.where(has_reference, cos, 0.0), dot)
