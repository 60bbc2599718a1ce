"""Spatial-consistency weighting from label histograms (000 §3.4, Eq. 9–16, Alg. 2).

Each participant k shares its label histogram h_k (Eq. 9–10); the server turns it into a
distribution p_k (Eq. 11), compares it with the participants' pooled distribution p_global
(Eq. 12, Alg. 2 lines 2–3) by the Jensen–Shannon divergence (Eq. 13–14, natural log, so
0 ≤ JS ≤ ln 2), maps it to a consistency score S_k = exp(−β·JS) ∈ (0, 1] (Eq. 15) and
normalises the scores to aggregation weights α_k = S_k / Σ_j S_j (Eq. 16). The weighted mean
of the updates with these α is Eq. 17 (:func:`geofl.server.aggregators.weighted_mean`).

The participants P are the updates the weighting is called with: in
:class:`~geofl.server.strategy.FlatTier`, those the defenses kept, so p_global pools only
their histograms. Everything is computed in float64, as in the paper (ε = 1e-12 "in
double-precision").

Smoothing by ε (000 §3.4: "a small constant ε > 0 is added to each probability component
during normalization"): the paper does not say whether the result is renormalised; here it
is, so that p stays a distribution::

    p_c = (h_c / Σ_c' h_c' + ε) / (1 + C·ε)

With ε = 1e-12 this moves JS by at most about C·ε·ln(1/ε) (3e-10 for C = 10). ε = 0 is
allowed too: the KL terms use the convention 0·log 0 = 0, so empty classes never give NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import AggregationError
from geofl.registry import CheckContext
from geofl.server.weighting import WEIGHTINGS, Weighting, check_num_samples_shared
from geofl.update import UpdateMeta

__all__ = [
    "DEFAULT_EPS",
    "ConsistencyParams",
    "consistency_scores",
    "consistency_weights",
    "global_distribution",
    "histograms_from_metas",
    "js_divergence",
    "label_distributions",
]

#: ε of 000 §3.4 ("ε = 10⁻¹² is used in double-precision floating-point computation").
DEFAULT_EPS = 1e-12


def _check_eps(eps: float) -> None:
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be finite and ≥ 0, got {eps!r}")


def _check_beta(beta: float) -> None:
    if not (math.isfinite(beta) and beta > 0.0):
        raise ValueError(f"beta must be finite and > 0 (000 Eq. 15), got {beta!r}")


def _check_histograms(histograms: torch.Tensor) -> torch.Tensor:
    """``histograms`` as a validated ``[K, C]`` float64 tensor (K ≥ 1, C ≥ 1)."""
    if histograms.ndim != 2 or histograms.shape[0] == 0 or histograms.shape[1] == 0:
        raise ValueError(
            f"expected label histograms [K, C] with K ≥ 1 clients and C ≥ 1 classes, got "
            f"shape {tuple(histograms.shape)}"
        )
    h = histograms.detach().to(torch.float64)
    bad = ~torch.isfinite(h).all(dim=1)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0])
        raise AggregationError(
            f"label histogram row {row} has non-finite counts {h[row].tolist()}; "
            "histograms must hold finite class counts"
        )
    neg = (h < 0).any(dim=1)
    if bool(neg.any()):
        row = int(torch.nonzero(neg)[0])
        raise AggregationError(
            f"label histogram row {row} has negative counts {h[row].tolist()}; "
            "histograms must hold class counts ≥ 0"
        )
    empty = h.sum(dim=1) <= 0
    if bool(empty.any()):
        row = int(torch.nonzero(empty)[0])
        raise AggregationError(
            f"label histogram row {row} is all zeros; a client without labelled samples "
            "cannot be scored, leave it out of the round"
        )
    return h


def _smooth(h: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise counts along the last dim and add ε: (h/Σh + ε) / (1 + C·ε)."""
    c = h.shape[-1]
    return (h / h.sum(dim=-1, keepdim=True) + eps) / (1.0 + c * eps)


def label_distributions(histograms: torch.Tensor, *, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """p_k = h_k / Σ_c h_{k,c}, smoothed by ε (000 Eq. 11 and the ε of §3.4).

    p_{k,c} = (h_{k,c} / Σ_c' h_{k,c'} + ε) / (1 + C·ε): ε is added to every component of
    the normalised histogram, which is then renormalised to sum 1.

    Args:
        histograms: ``[K, C]`` class counts h_{k,c} ≥ 0 (any real dtype), no all-zero row.
        eps: ε ≥ 0.

    Returns:
        ``[K, C]`` float64, every row a distribution.

    Raises:
        ValueError: on a wrong shape or ε < 0.
        AggregationError: on negative or non-finite counts or an all-zero row (named).
    """
    _check_eps(eps)
    return _smooth(_check_histograms(histograms), eps)


def global_distribution(histograms: torch.Tensor, *, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """p_global from the participants' summed histograms (000 Eq. 12, Alg. 2 lines 2–3).

    h_global = Σ_k h_k, then normalised and smoothed exactly like :func:`label_distributions`.
    It is a count-weighted pool: a client with more samples pulls p_global more.

    Args:
        histograms: ``[K, C]`` class counts of the round's participants.
        eps: ε ≥ 0.

    Returns:
        ``[C]`` float64 distribution.
    """
    _check_eps(eps)
    return _smooth(_check_histograms(histograms).sum(dim=0), eps)


def _kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KL(a‖b) = Σ_c a_c log(a_c / b_c) along the last dim, with 0·log 0 = 0 (000 Eq. 14)."""
    # Wherever a_c > 0 here, b_c ≥ a_c / 2 > 0 (b is a midpoint containing a).
    terms = torch.where(a > 0, a * torch.log(a / b), torch.zeros_like(a))
    return terms.sum(dim=-1)


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """JS(p_k ‖ q) = ½ KL(p_k ‖ m_k) + ½ KL(q ‖ m_k), m_k = ½(p_k + q) (000 Eq. 13–14).

    Natural logarithm, so 0 ≤ JS ≤ ln 2; symmetric; 0 iff p_k = q.

    Args:
        p: ``[K, C]`` distributions (rows sum to 1), e.g. :func:`label_distributions`.
        q: ``[C]`` reference distribution, e.g. :func:`global_distribution`.

    Returns:
        ``[K]`` float64.
    """
    if p.ndim != 2 or q.shape != (p.shape[1],):
        raise ValueError(f"expected p [K, C] and q [C], got {tuple(p.shape)} and {tuple(q.shape)}")
    p64, q64 = p.to(torch.float64), q.to(torch.float64).expand_as(p)
    m = 0.5 * (p64 + q64)
    js = 0.5 * _kl(p64, m) + 0.5 * _kl(q64, m)
    return js.clamp_(0.0, math.log(2.0))  # rounding can leave ±1e-17 outside


def _divergences(histograms: torch.Tensor, eps: float) -> torch.Tensor:
    _check_eps(eps)
    h = _check_histograms(histograms)
    return js_divergence(_smooth(h, eps), _smooth(h.sum(dim=0), eps))


def consistency_scores(
    histograms: torch.Tensor, *, beta: float, eps: float = DEFAULT_EPS
) -> torch.Tensor:
    """S_k = exp(−β · JS(p_k ‖ p_global)) ∈ (0, 1] (000 Eq. 15, Alg. 2 lines 4–7).

    Args:
        histograms: ``[K, C]`` class counts of the round's participants (000 Eq. 9–10).
        beta: β > 0, the decay rate (000 §4.6 uses β = 5).
        eps: ε ≥ 0 of the smoothing (see the module docstring).

    Returns:
        ``[K]`` float64. (For huge β, S_k can underflow to 0; :func:`consistency_weights`
        does not.)

    Raises:
        ValueError: on β ≤ 0 or non-finite, ε < 0, or a wrong shape.
        AggregationError: on negative or non-finite counts or an all-zero row.
    """
    _check_beta(beta)
    return torch.exp(-beta * _divergences(histograms, eps))


def consistency_weights(
    histograms: torch.Tensor,
    *,
    beta: float,
    eps: float = DEFAULT_EPS,
    num_samples: torch.Tensor | None = None,
) -> torch.Tensor:
    """α_k = S_k / Σ_j S_j (000 Eq. 16, Alg. 2 line 8).

    Computed as softmax(−β·JS), which equals Eq. 16 and cannot divide 0 by 0 when every
    S_k underflows. With ``num_samples`` = n (not in the paper) α_k ∝ n_k · S_k, i.e.
    FedAvg's sample-size weights damped by the consistency score.

    Args:
        histograms: ``[K, C]`` class counts of the round's participants.
        beta: β > 0.
        eps: ε ≥ 0.
        num_samples: optional ``[K]`` positive sample counts n_k.

    Returns:
        ``[K]`` float64 summing to 1.
    """
    _check_beta(beta)
    logits = -beta * _divergences(histograms, eps)
    if num_samples is not None:
        n = num_samples.detach().to(torch.float64)
        if n.shape != logits.shape:
            raise ValueError(
                f"expected num_samples [K] = [{logits.shape[0]}], got {tuple(n.shape)}"
            )
        if not bool((n > 0).all()) or not bool(torch.isfinite(n).all()):
            raise AggregationError(f"num_samples must be positive and finite, got {n.tolist()}")
        logits = logits + torch.log(n)
    return torch.softmax(logits, dim=0)


def histograms_from_metas(metas: Sequence[UpdateMeta]) -> torch.Tensor:
    """Stack the updates' ``label_histogram`` into ``[K, C]`` float64.

    Raises:
        AggregationError: if there are no metas, a histogram is missing (the protocol must
            share them), has a different length, negative or non-finite counts, or is all
            zeros; the message names the client.
    """
    if not metas:
        raise AggregationError("consistency weighting got no updates (K = 0)")
    rows: list[np.ndarray[Any, np.dtype[np.float64]]] = []
    for m in metas:
        if m.label_histogram is None:
            raise AggregationError(
                f"client {m.client_id} sent no label_histogram; the consistency weighting "
                "needs every update's label histogram, so the protocol must share them"
            )
        h = np.asarray(m.label_histogram, dtype=np.float64)
        if h.ndim != 1 or h.size == 0:
            raise AggregationError(
                f"client {m.client_id} label_histogram must be 1-D [C], got shape {h.shape}"
            )
        if rows and h.shape != rows[0].shape:
            raise AggregationError(
                f"client {m.client_id} label_histogram has {h.size} classes, client "
                f"{metas[0].client_id} has {rows[0].size}; all clients must count the same classes"
            )
        if not np.isfinite(h).all() or (h < 0).any():
            raise AggregationError(
                f"client {m.client_id} label_histogram has negative or non-finite counts "
                f"{h.tolist()}; expected class counts ≥ 0"
            )
        if h.sum() <= 0:
            raise AggregationError(
                f"client {m.client_id} label_histogram is all zeros; a client without "
                "labelled samples cannot be scored, leave it out of the round"
            )
        rows.append(h)
    return torch.from_numpy(np.stack(rows))


class ConsistencyParams(BaseModel):
    """Parameters of the ``consistency`` weighting (000 Eq. 15–16)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    beta: float = Field(5.0, gt=0.0, allow_inf_nan=False, description="β of Eq. 15 (000 §4.6: 5)")
    eps: float = Field(
        DEFAULT_EPS, ge=0.0, allow_inf_nan=False, description="ε added to each probability"
    )
    times_data_size: bool = Field(
        False, description="α_k ∝ n_k·S_k instead of the paper's α_k ∝ S_k (Eq. 16)"
    )


def _check(params: ConsistencyParams, ctx: CheckContext) -> None:
    if params.times_data_size:
        check_num_samples_shared(params, ctx)


@WEIGHTINGS.register("consistency", params=ConsistencyParams, check=_check)
def build_consistency(params: ConsistencyParams) -> Weighting:
    """JS label-distribution consistency α_k ∝ exp(−β·JS(p_k‖p_global)) (000 Eq. 9–16)."""

    def weighting(metas: Sequence[UpdateMeta], round_idx: int) -> torch.Tensor:
        hist = histograms_from_metas(metas)
        sizes = None
        if params.times_data_size:
            sizes = torch.tensor([m.num_samples for m in metas], dtype=torch.float64)
        return consistency_weights(hist, beta=params.beta, eps=params.eps, num_samples=sizes)

    return weighting
