"""Cosine-guided filter, CGF (004 §2.5, Eq. 6–7): directional anomalies, scale-invariant.

Per round, over the ``[K, D]`` update tensor and a reference direction r̄ (``[D]``):

    s_j = 1 − ⟨Δw_j, r̄⟩ / (‖Δw_j‖ ‖r̄‖) ∈ [0, 2]                                (Eq. 6)
    z_j = (s_j − med(s)) / (1.4826 · MAD(s) + ε_MAD),  m_j = 1[z_j ≤ λ]          (Eq. 7)
    m̃_j = φ(z_j) = 1 / (1 + exp(k (z_j − λ)))                         (soft mask, §2.5)

with MAD(s) = med|s − med(s)|, ε_MAD = 1e-12 (§2.5), medians the midpoint for even K.
Because cosines ignore the norm, a benign client that takes a large step in the common
direction keeps s ≈ 0, while an update pointing elsewhere — rotated, or scaled by a negative
factor — gets a large s. (An honest update scaled by a *positive* factor keeps its
direction and passes; that case is for norm-based defenses, e.g. FLAME's clipping.)

Reference direction (``reference``): ``previous_mean`` (the paper's: the arithmetic mean
of the previous round's survivors), ``median`` / ``trimmed_mean`` (coordinate-wise, of the
current round, :mod:`geofl.server.robust`), ``geometric_median`` (of the current round,
vectorised Weiszfeld, :func:`geometric_median`) or ``history`` (the trusted historical
direction). Before any round has survivors (round 1), ``previous_mean`` and ``history`` use
the current round's coordinate median: the current mean would follow a few large outliers.

Trusted history (§2.5: "the trusted historical direction as the fallback reference"): the
paper does not define it; here it is an exponential moving average h ← η h + (1 − η) r̄_t of
the survivors' means r̄_t of the rounds with at least K_min survivors (η = ``history_decay``;
h starts as the first round's survivors' mean, whatever their number, so that a federation
with fewer than K_min updates per round still gets a history to fall back to).
Fallback: when fewer than K_min updates survive, the scores are
recomputed against h (logged with the reason); without h yet, the round keeps its mask.

Numerics. ⟨Δw_j, r̄⟩ and ‖Δw_j‖² come from one read of ``[K, D]`` in cache-sized column
blocks (:func:`geofl.server.columns.dots_and_norms`: a float32 matrix–vector product and a
row-norm reduction per block, summed over blocks in float64; no float64 or normalised copy
of the stack, nor a copy of the scored rows when only some are scored: ``rows``), s_j good
to ~1e-7 absolute. Near-parallel
rows (s_j < 1e-3, where that form loses relative precision — e.g. updates sharing a large
common offset) are recomputed from differences, s_j = ½‖Δw_j/‖Δw_j‖ − r̄/‖r̄‖‖² in float64,
which cancels nothing. BLAS rounds each row a little differently depending on its position
(identical updates can get scores 1e-8 apart), which matters only when the scores barely
spread: when MAD < 1e-5 every row is recomputed from differences, so that equal updates get
equal scores whatever their order. A zero-norm update or reference has no direction: its
cosine is taken as 0 (s = 1). If MAD = 0 (more than half the scores equal), ε_MAD bounds
the denominator: equal scores get z = 0 and are kept, any larger one is rejected.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from geofl.server.columns import dots_and_norms
from geofl.server.robust import coordinate_median, trimmed_mean

__all__ = [
    "EPS_MAD",
    "MAD_SCALE",
    "CgfResult",
    "CgfSettings",
    "CosineFilter",
    "Reference",
    "cgf_scores",
    "cosine_distances",
    "geometric_median",
    "mad_scores",
    "soft_mask",
]

log = logging.getLogger("geofl")

#: ε_MAD of 004 §2.5: lower bound of the MAD denominator.
EPS_MAD = 1e-12
#: 1.4826 · MAD estimates the standard deviation of normal data (004 Eq. 7).
MAD_SCALE = 1.4826
#: Rows with s below this are recomputed from differences (see the module docstring).
REFINE_BELOW = 1e-3
#: Below this MAD the round's scores are recomputed exactly (see the module docstring).
MAD_RESOLUTION = 1e-5
#: Columns of one float64 block of the exact (difference) path.
BLOCK_COLUMNS = 1 << 12

Reference = Literal["previous_mean", "median", "trimmed_mean", "geometric_median", "history"]


@dataclass(frozen=True)
class CgfSettings:
    """CGF's parameters (004 §2.5; defaults from 004 Appendix A, Table A).

    Attributes:
        lam: λ > 0, the threshold on z (Table A: 1.0; Table 10's plateau 1.0–1.5).
        slope: k > 0 of the soft mask φ (Table A: 1.0).
        k_min: K_min ≥ 1, fewest survivors before falling back to the history (§2.5: 5).
        reference: Which reference direction r̄ (module docstring).
        trim_fraction: β of the ``trimmed_mean`` reference.
        history_decay: η ∈ [0, 1) of the trusted-history EMA.
        eps_mad: ε_MAD > 0.
    """

    lam: float = 1.0
    slope: float = 1.0
    k_min: int = 5
    reference: Reference = "previous_mean"
    trim_fraction: float = 0.1
    history_decay: float = 0.9
    eps_mad: float = EPS_MAD


@dataclass(frozen=True)
class CgfResult:
    """One round of CGF over K updates.

    Attributes:
        distances: ``[K]`` float64 s_j (Eq. 6).
        z: ``[K]`` float64 MAD-normalised scores (Eq. 7).
        hard: ``[K]`` bool m_j.
        soft: ``[K]`` float64 m̃_j = φ(z_j).
        mad: MAD(s) of the round.
        fallback: Whether the scores are against the trusted history after a degenerate
            round (fewer than K_min survivors against the first reference).
        reason: Why a fallback happened or could not ("" when none was needed).
    """

    distances: torch.Tensor
    z: torch.Tensor
    hard: torch.Tensor
    soft: torch.Tensor
    mad: float
    fallback: bool = False
    reason: str = ""


# ----------------------------------------------------------------------------- distances


def _exact_distances(updates: torch.Tensor, rows: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``[R]`` float64 ½‖u_j/‖u_j‖ − r/‖r‖‖² for ``rows`` (difference form: one pass for
    the float64 norms, one for the differences; the rare path, so single-threaded)."""
    d = updates.shape[1]
    buf = torch.empty((rows.numel() + 1, BLOCK_COLUMNS), dtype=torch.float64)

    def blocks() -> Iterator[torch.Tensor]:
        for a in range(0, d, BLOCK_COLUMNS):
            part = buf[:, : min(BLOCK_COLUMNS, d - a)]
            part[:-1].copy_(updates[:, a : a + BLOCK_COLUMNS].index_select(0, rows))
            part[-1].copy_(ref[a : a + BLOCK_COLUMNS])
            yield part

    sq = torch.zeros(rows.numel() + 1, dtype=torch.float64)
    for part in blocks():
        sq += part.square().sum(1)
    norms = sq.sqrt()
    inv = torch.where(norms > 0, 1.0 / torch.where(norms > 0, norms, 1.0), 0.0)
    out = torch.zeros(rows.numel(), dtype=torch.float64)
    for part in blocks():
        part.mul_(inv[:, None])
        out += (part[:-1] - part[-1]).square_().sum(1)
    zero = (norms[:-1] == 0) | (norms[-1] == 0)
    return torch.where(zero, 1.0, 0.5 * out)


def cosine_distances(
    updates: torch.Tensor,
    reference: torch.Tensor,
    *,
    exact: bool = False,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """s_j = 1 − cos(Δw_j, r̄) for every row (004 Eq. 6); vectorised, no loop over clients.

    The dots and row norms from one blocked read of ``updates``; rows with s < 1e-3 (or all
    rows, with ``exact``, the slow reference) recomputed from differences in float64.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        reference: ``[D]`` r̄.
        exact: Compute every row from differences (row-order independent, ~1e-16).
        rows: ``[R]`` int64 indices of the rows to score (default all): the blocked pass
            reads every row rather than copy the selected ones.

    Returns:
        ``[K]`` (or ``[R]``) float64 in [0, 2]; 1 for a zero-norm row or reference.
    """
    if updates.ndim != 2 or reference.shape != (updates.shape[1],):
        raise ValueError(
            f"expected updates [K, D] and reference [D], got {tuple(updates.shape)} and "
            f"{tuple(reference.shape)}"
        )
    x = updates.detach()
    ref = reference.detach().to(x.dtype)
    sel = torch.arange(x.shape[0]) if rows is None else rows
    if exact:
        return _exact_distances(x, sel, ref).clamp_(0.0, 2.0)
    dots, sq, ref_sq = dots_and_norms(x, ref)  # one read of [K, D]
    if rows is not None:
        dots, sq = dots[rows], sq[rows]
    norms = sq.sqrt()
    ref_norm = math.sqrt(ref_sq)
    denom = norms * ref_norm
    cos = torch.where(denom > 0, dots / torch.where(denom > 0, denom, 1.0), 0.0)
    s = (1.0 - cos).clamp_(0.0, 2.0)
    risky = torch.nonzero((s < REFINE_BELOW) & (denom > 0)).flatten()
    if risky.numel():
        s[risky] = _exact_distances(x, sel[risky], ref).clamp_(0.0, 2.0)
    return s


# ----------------------------------------------------------------------------- scores


def _median(x: torch.Tensor) -> torch.Tensor:
    """Median of a 1-D float64 tensor, the midpoint of the two middle values for even n."""
    srt = torch.sort(x).values
    n = srt.numel()
    return srt[n // 2] if n % 2 else 0.5 * (srt[n // 2 - 1] + srt[n // 2])


def mad_scores(distances: torch.Tensor, eps: float = EPS_MAD) -> tuple[torch.Tensor, float]:
    """z_j = (s_j − med(s)) / (1.4826 · MAD + ε_MAD) and MAD (004 Eq. 7).

    Args:
        distances: ``[K]`` s_j, K ≥ 1.
        eps: ε_MAD > 0.

    Returns:
        ``([K] float64 z, MAD)``.
    """
    s = distances.to(torch.float64)
    med = _median(s)
    mad = _median((s - med).abs())
    return (s - med) / (MAD_SCALE * mad + eps), float(mad)


def soft_mask(z: torch.Tensor, lam: float, slope: float) -> torch.Tensor:
    """m̃ = φ(z) = 1 / (1 + exp(k (z − λ))) (004 §2.5): 0.5 at z = λ, → 1 below, → 0 above.

    Computed as sigmoid(−k (z − λ)), which neither overflows nor gives NaN for huge z.
    """
    return torch.sigmoid(-slope * (z.to(torch.float64) - lam))


def cgf_scores(
    updates: torch.Tensor,
    reference: torch.Tensor,
    settings: CgfSettings,
    rows: torch.Tensor | None = None,
) -> CgfResult:
    """Eq. 6–7 and the soft mask against one reference (no fallback), over ``rows``
    (``[R]`` indices; default every row) of ``updates``."""
    s = cosine_distances(updates, reference, rows=rows)
    z, mad = mad_scores(s, settings.eps_mad)
    if mad < MAD_RESOLUTION:  # ties the float32 product cannot resolve: recompute exactly
        s = cosine_distances(updates, reference, exact=True, rows=rows)
        z, mad = mad_scores(s, settings.eps_mad)
    return CgfResult(s, z, z <= settings.lam, soft_mask(z, settings.lam, settings.slope), mad)


def geometric_median(
    updates: torch.Tensor, *, iters: int = 100, tol: float = 1e-7, eps: float = 1e-12
) -> torch.Tensor:
    """Geometric median of the rows, argmin_y Σ_j ‖Δw_j − y‖, by Weiszfeld's iteration.

    y ← Σ_j Δw_j / max(‖Δw_j − y‖, ε) / Σ_j 1 / max(‖Δw_j − y‖, ε), from the coordinate
    mean, until y moves less than ``tol`` × ‖y‖; every step is one distance pass
    (``torch.cdist``, difference form) and one matrix–vector product over ``[K, D]``.

    Returns:
        ``[D]`` in the updates' dtype.
    """
    y = updates.mean(0)
    for _ in range(iters):
        dist = torch.cdist(
            updates[None], y[None, None], compute_mode="donot_use_mm_for_euclid_dist"
        )[0, :, 0].to(torch.float64)
        inv = 1.0 / dist.clamp_min(eps)
        new = (inv / inv.sum()).to(updates.dtype) @ updates
        moved = float(torch.linalg.vector_norm(new - y))
        y = new
        if moved <= tol * max(float(torch.linalg.vector_norm(y)), eps):
            break
    return y


# ----------------------------------------------------------------------------- the filter


class CosineFilter:
    """CGF with its cross-round state: the previous survivors' mean and the trusted history.

    Call :meth:`scores` with the round's updates, then :meth:`observe` with the mean of the
    updates that survived. A strategy that computes that mean in its own pass can avoid the
    ``[D]`` copies instead: write it into :meth:`mean_buffer`, run :meth:`blend` on each
    finished chunk of columns when :meth:`blends` says so, then :meth:`adopt` it.
    """

    def __init__(self, settings: CgfSettings) -> None:
        self.s = settings
        self.previous: torch.Tensor | None = None  # [D] survivors' mean of the last round
        self.history: torch.Tensor | None = None  # [D] trusted-history EMA

    def reference(self, updates: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """``[D]`` r̄ for this round (module docstring), of ``updates[rows]``."""
        ref = self.s.reference
        if ref == "previous_mean" and self.previous is not None:
            return self.previous
        if ref == "history" and self.history is not None:
            return self.history
        scored = updates if rows is None else updates.index_select(0, rows)
        if ref == "trimmed_mean":
            return trimmed_mean(scored, trim_fraction=self.s.trim_fraction)
        if ref == "geometric_median":
            return geometric_median(scored)
        return coordinate_median(scored)  # ``median``, or nothing observed yet

    def scores(self, updates: torch.Tensor, rows: torch.Tensor | None = None) -> CgfResult:
        """CGF over ``updates`` (``[K, D]``) — or its ``rows`` (``[R]`` indices, no copy for
        the history references) — with the K_min fallback to the history."""
        res = cgf_scores(updates, self.reference(updates, rows), self.s, rows)
        kept = int(res.hard.sum())
        if kept >= self.s.k_min:
            return res
        n = updates.shape[0] if rows is None else rows.numel()
        why = f"only {kept} of {n} updates survived (K_min = {self.s.k_min})"
        if self.history is None or self.s.reference == "history":
            reason = f"{why}; no other trusted history to fall back to, mask kept"
            return _with_reason(res, reason, fallback=False)
        back = cgf_scores(updates, self.history, self.s, rows)
        reason = f"{why}; scored against the trusted history: {int(back.hard.sum())} survive"
        return _with_reason(back, reason, fallback=True)

    def observe(self, survivors_mean: torch.Tensor, result: CgfResult) -> None:
        """Record this round's survivors' mean (``[D]``, copied) as next round's references."""
        mean = survivors_mean.detach().clone()
        if self.blends(result):
            self.blend(mean, 0, mean.numel())
        self.adopt(mean)

    def mean_buffer(self, like: torch.Tensor) -> torch.Tensor:
        """A ``[D]`` buffer for this round's survivors' mean, once :meth:`scores` has run:
        the previous mean's storage when it fits (it is not read again), else a new one."""
        prev = self.previous
        fits = prev is not None and (prev.shape, prev.dtype) == (like.shape, like.dtype)
        if prev is not None and fits and prev.device == like.device and prev.is_contiguous():
            return prev
        return torch.empty_like(like, memory_format=torch.contiguous_format)

    def blends(self, result: CgfResult) -> bool:
        """Whether this round's mean moves the trusted history (not a degenerate round,
        and a history exists; the first round seeds it in :meth:`adopt`)."""
        return self.history is not None and not (result.fallback or result.reason)

    def blend(self, mean: torch.Tensor, lo: int, hi: int) -> None:
        """h ← η h + (1 − η) r̄_t on the columns ``[lo, hi)`` (module docstring)."""
        assert self.history is not None
        eta = self.s.history_decay
        self.history[lo:hi].mul_(eta).add_(mean[lo:hi], alpha=1.0 - eta)

    def adopt(self, mean: torch.Tensor) -> None:
        """Keep ``mean`` (``[D]``, not copied) as next round's ``previous_mean`` reference;
        the first round also seeds the history with it. Call after :meth:`blend`."""
        self.previous = mean.detach()
        if self.history is None:  # the first round seeds it (see the module docstring)
            self.history = self.previous.clone()

    def state_dict(self) -> dict[str, Any]:
        return {"previous": _clone(self.previous), "history": _clone(self.history)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.previous = _clone(state.get("previous"))
        self.history = _clone(state.get("history"))


def _with_reason(res: CgfResult, reason: str, *, fallback: bool) -> CgfResult:
    log.warning("CGF: %s", reason)
    return CgfResult(res.distances, res.z, res.hard, res.soft, res.mad, fallback, reason)


def _clone(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().clone()
