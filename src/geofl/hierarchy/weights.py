"""GEO aggregation weights: staleness (003 Eq. 8) × fairness (Eq. 11), normalised (Eq. 12).

* ω_stale(t, t') = exp(−κ (t − t')), κ ≥ 0, t' ≤ t the round the regional model started
  from (Eq. 8, Alg. 3 line 8);
* ω_fair(l) ∝ UniqueFarmCount_l · exp(H_l) / (1 + NQI_loss_l) (Eq. 11, §2.3.4), with H_l the
  Shannon entropy (natural log) of the (crop × soil texture × climate zone) bins of the
  region's accepted updates, H_l = −Σ_b p_b log(p_b + ε) (§2.2.4), and NQI_loss_l ∈ [0, 1] the
  fraction of the region's attempted transmissions that were not delivered;
* ω̃_l = ω_l / Σ_j ω_j with ω_l = ω_stale · ω_fair (Eq. 12, Eq. 17's α_l^t).

All float64 tensors; the counting (unique farms, bins, losses) over the aggregation horizon
is the caller's (the engine knows the horizon).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from geofl.errors import HierarchyError

__all__ = ["context_entropy", "fairness_weights", "geo_weights", "staleness_weights"]

_Vector = Sequence[float] | Sequence[int] | np.ndarray | torch.Tensor


def _vector(values: _Vector, name: str) -> torch.Tensor:
    v = torch.as_tensor(
        np.asarray(values, dtype=np.float64) if not isinstance(values, torch.Tensor) else values,
        dtype=torch.float64,
    )
    if v.ndim != 1 or not bool(torch.isfinite(v).all()):
        raise HierarchyError(f"{name}: expected a finite 1-D vector, got shape {tuple(v.shape)}")
    return v


def staleness_weights(current_round: int, produced_round: _Vector, *, kappa: float) -> torch.Tensor:
    """003 Eq. 8: ``[L]`` float64 exp(−κ (t − t'_l)).

    Args:
        current_round: t, the GEO's current global round.
        produced_round: ``[L]`` t'_l ≤ t, the round each regional model started from.
        kappa: κ ≥ 0 (0: no decay).

    Raises:
        HierarchyError: κ < 0 or not finite, or a t'_l > t.
    """
    if not (math.isfinite(kappa) and kappa >= 0):
        raise HierarchyError(f"kappa: the staleness decay must be finite and ≥ 0, got {kappa!r}")
    produced = _vector(produced_round, "produced_round")
    lag = float(current_round) - produced
    if bool((lag < 0).any()):
        raise HierarchyError(
            f"produced_round: {produced.max().item():g} is after the current round "
            f"{current_round}; a model cannot come from the future"
        )
    return torch.exp(-kappa * lag)


def context_entropy(bins: Sequence[int] | np.ndarray, *, eps: float = 1e-12) -> float:
    """H_l = −Σ_b p_b log(p_b + ε) over the bins of a region's accepted updates (nats).

    ``bins`` holds one bin id per accepted update; p_b is the fraction in bin b. No update:
    0.0 (the region then has no unique farm either, so ω_fair = 0). A single bin gives
    exactly 0.0 (the formula's −log(1 + ε) ≈ −1e-12 is rounding of the ε guard, clamped).
    """
    b = np.asarray(bins, dtype=np.int64).ravel()
    if b.size == 0:
        return 0.0
    if b.min() < 0:
        raise HierarchyError(f"bins: context bins must be ≥ 0, got {int(b.min())}")
    if not eps >= 0:
        raise HierarchyError(f"eps: need ε ≥ 0, got {eps!r}")
    p = np.bincount(b) / b.size
    p = p[p > 0]
    return max(0.0, float(-(p * np.log(p + eps)).sum()))


def fairness_weights(unique_farms: _Vector, entropy: _Vector, nqi_loss: _Vector) -> torch.Tensor:
    """003 Eq. 11 (unnormalised): ``[L]`` UniqueFarmCount_l · exp(H_l) / (1 + NQI_loss_l).

    Raises:
        HierarchyError: a negative count or entropy, a loss outside [0, 1], ragged lengths.
    """
    farms = _vector(unique_farms, "unique_farms")
    h = _vector(entropy, "entropy")
    loss = _vector(nqi_loss, "nqi_loss")
    if not farms.shape == h.shape == loss.shape:
        raise HierarchyError(
            f"fairness inputs: unique_farms, entropy, nqi_loss differ in length "
            f"({farms.numel()}, {h.numel()}, {loss.numel()})"
        )
    if bool((farms < 0).any()) or bool((h < 0).any()):
        raise HierarchyError("unique_farms / entropy: counts and entropies must be ≥ 0")
    if bool(((loss < 0) | (loss > 1)).any()):
        raise HierarchyError(f"nqi_loss: fractions must lie in [0, 1], got {loss.tolist()}")
    return farms * torch.exp(h) / (1.0 + loss)


def geo_weights(stale: _Vector, fair: _Vector) -> torch.Tensor:
    """003 Eq. 12: ``[L]`` float64 ω̃_l = ω_stale,l ω_fair,l / Σ_j ω_stale,j ω_fair,j.

    Raises:
        HierarchyError: negative inputs, ragged lengths, or no positive product.
    """
    s, f = _vector(stale, "stale"), _vector(fair, "fair")
    if s.shape != f.shape:
        raise HierarchyError(f"geo weights: stale ({s.numel()}) and fair ({f.numel()}) differ")
    if bool((s < 0).any()) or bool((f < 0).any()):
        raise HierarchyError("geo weights: staleness and fairness weights must be ≥ 0")
    w = s * f
    total = float(w.sum())
    if not total > 0:
        raise HierarchyError(
            "geo weights: every region's weight is 0 (no farm contributed, or all too stale); "
            "nothing to aggregate this round"
        )
    return w / total
