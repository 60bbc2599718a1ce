"""Split-level metric functions: average precision, ROC-AUC, F1 from counts, R² from moments.

Pure tensor functions with scikit-learn semantics (checked against it in
``tests/tasks/test_scoring.py``), vectorised over classes: one sort of an ``[N, C]`` score
matrix ranks every class at once, and tied scores are handled by tie-group bounds computed
with cumulative min/max instead of a Python loop over thresholds. Everything is computed
in float64.

Ranking metrics depend on the order of the scores only, so callers may pass logits rather
than probabilities: the order is the same, and logits avoid the ties that a saturated
float32 sigmoid (exactly 1.0 for logits above ≈ 17) would create.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "Moments",
    "average_precision",
    "f1_from_counts",
    "r2_from_moments",
    "roc_auc",
    "tie_group_bounds",
]

_NAN = float("nan")


def tie_group_bounds(sorted_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last position of each element's group of equal scores along dim 0.

    Args:
        sorted_scores: ``[N]`` or ``[N, C]`` scores, each column sorted (either direction).

    Returns:
        ``(first, last)``, int64 of the input's shape: ``first[i, c]`` / ``last[i, c]`` is
        the smallest / largest ``j`` with ``sorted_scores[j, c] == sorted_scores[i, c]``.
    """
    n = sorted_scores.shape[0]
    shape = (n,) + (1,) * (sorted_scores.ndim - 1)
    idx = torch.arange(n, dtype=torch.int64).view(shape).expand_as(sorted_scores)
    differs = sorted_scores[1:] != sorted_scores[:-1]
    edge = torch.ones_like(sorted_scores[:1], dtype=torch.bool)
    starts = torch.cat([edge, differs])
    ends = torch.cat([differs, edge])
    first = torch.where(starts, idx, -1).cummax(dim=0).values
    last = torch.where(ends, idx, n).flip(0).cummin(dim=0).values.flip(0)
    return first, last


def average_precision(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Average precision of every class (column), as ``sklearn.metrics.average_precision_score``.

    AP = Σ_k (R_k − R_{k−1}) · P_k over the distinct score thresholds in decreasing order
    (scikit-learn's step-wise definition, no interpolation; Zhu 2004). Samples with equal
    scores enter at the same threshold, so all positives of a tie group share the precision
    at the end of the group, and

        AP = (1 / n_pos) · Σ_{i positive} TP(g_i) / |{j : rank(j) ≤ end of g_i}|,

    with ``g_i`` the tie group of sample ``i``. One stable sort of ``[N, C]`` serves every
    class.

    Args:
        scores: ``[N, C]`` (or ``[N]``) scores; larger means more likely positive.
        targets: Same shape, 0/1 (any dtype; non-zero is positive).

    Returns:
        ``[C]`` (or scalar) float64 AP; NaN for a class without positives (scikit-learn
        warns and returns 0 there) or with a non-finite score.
    """
    if scores.shape != targets.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} differ")
    s = scores.detach().to(torch.float64)
    if s.shape[0] == 0:
        return torch.full(s.shape[1:], _NAN, dtype=torch.float64)
    order = torch.argsort(s, dim=0, descending=True, stable=True)
    s_sorted = s.gather(0, order)
    y = (targets.detach() != 0).gather(0, order).to(torch.float64)
    tp = y.cumsum(dim=0)
    _, last = tie_group_bounds(s_sorted)
    precision_at_end = tp.gather(0, last) / (last + 1).to(torch.float64)
    n_pos = y.sum(dim=0)
    ap = (y * precision_at_end).sum(dim=0) / n_pos
    bad = (n_pos == 0) | ~torch.isfinite(s).all(dim=0)
    return torch.where(bad, torch.full_like(ap, _NAN), ap)


def roc_auc(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Area under the ROC curve, as ``sklearn.metrics.roc_auc_score`` (per column for 2-D).

    Computed as the Mann–Whitney statistic with average ranks for ties (Hanley & McNeil
    1982, Eq. 2), which equals scikit-learn's trapezoidal area under the ROC curve built
    at distinct thresholds (a tie between a positive and a negative counts ½):

        AUC = (Σ_{i positive} rank_i − n_pos (n_pos + 1) / 2) / (n_pos · n_neg),

    ranks 1-based in increasing score, tied scores given the mean of their ranks.

    Args:
        scores: ``[N]`` or ``[N, C]`` scores; larger means more likely positive.
        targets: Same shape, 0/1 (non-zero is positive).

    Returns:
        Scalar (or ``[C]``) float64; NaN where only one class is present (scikit-learn
        raises there) or a score is non-finite.
    """
    if scores.shape != targets.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} differ")
    s = scores.detach().to(torch.float64)
    if s.shape[0] == 0:
        return torch.full(s.shape[1:], _NAN, dtype=torch.float64)
    order = torch.argsort(s, dim=0, stable=True)
    s_sorted = s.gather(0, order)
    y = (targets.detach() != 0).gather(0, order).to(torch.float64)
    first, last = tie_group_bounds(s_sorted)
    rank = (first + last).to(torch.float64) / 2 + 1
    n_pos = y.sum(dim=0)
    n_neg = s.shape[0] - n_pos
    u = (rank * y).sum(dim=0) - n_pos * (n_pos + 1) / 2
    auc = u / (n_pos * n_neg)
    bad = (n_pos == 0) | (n_neg == 0) | ~torch.isfinite(s).all(dim=0)
    return torch.where(bad, torch.full_like(auc, _NAN), auc)


def f1_from_counts(tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
    """F1 = 2·TP / (2·TP + FP + FN), elementwise, NaN where undefined.

    The denominator is 0 only when a class has no positives and no predicted positives;
    F1 is then NaN, as ``sklearn.metrics.f1_score(..., zero_division=np.nan)``.

    Args:
        tp: True-positive counts, any shape.
        fp: False-positive counts, same shape.
        fn: False-negative counts, same shape.

    Returns:
        float64 tensor of the input shape.
    """
    tp, fp, fn = (t.to(torch.float64) for t in (tp, fp, fn))
    denom = 2 * tp + fp + fn
    return torch.where(denom > 0, 2 * tp / denom.clamp_min(1.0), torch.full_like(denom, _NAN))


@dataclass
class Moments:
    """Count, mean and sum of squared deviations per output, merged batch by batch.

    Batches merge with the pairwise update of Chan, Golub & LeVeque (1979, Eq. 2.1):
    for parts A and B, δ = mean_B − mean_A,
    ``M2 = M2_A + M2_B + δ² · n_A n_B / (n_A + n_B)``, which avoids the cancellation of
    ``Σy² − (Σy)²/n`` on targets with a large offset (e.g. elevations in metres).

    Attributes:
        n: Samples merged so far.
        mean: ``[T]`` float64 running mean.
        m2: ``[T]`` float64 sum of squared deviations from the mean.
    """

    n: int
    mean: torch.Tensor
    m2: torch.Tensor

    @classmethod
    def empty(cls, outputs: int) -> Moments:
        """Moments of no samples for ``outputs`` outputs."""
        zeros = torch.zeros(outputs, dtype=torch.float64)
        return cls(0, zeros, zeros.clone())

    def add(self, values: torch.Tensor) -> None:
        """Merge a batch ``[B, T]`` (two-pass moments within the batch)."""
        b = values.shape[0]
        if b == 0:
            return
        v = values.detach().to(torch.float64)
        mean_b = v.mean(dim=0)
        m2_b = ((v - mean_b) ** 2).sum(dim=0)
        total = self.n + b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (b / total)
        self.m2 = self.m2 + m2_b + delta**2 * (self.n * b / total)
        self.n = total


def r2_from_moments(ss_res: torch.Tensor, targets: Moments) -> torch.Tensor:
    """Coefficient of determination per output, as ``sklearn.metrics.r2_score``.

    R² = 1 − SS_res / SS_tot with SS_tot = Σ (y − ȳ)² (``targets.m2``). For an output
    whose targets are constant (SS_tot = 0), scikit-learn's ``force_finite=True`` rule:
    1.0 if the predictions are perfect (SS_res = 0), else 0.0. Fewer than two samples:
    NaN (scikit-learn warns and returns NaN).

    Args:
        ss_res: ``[T]`` float64 residual sums of squares Σ (y − ŷ)².
        targets: Moments of the targets over the same samples.

    Returns:
        ``[T]`` float64 R² (average it for scikit-learn's ``multioutput="uniform_average"``).
    """
    if targets.n < 2:
        return torch.full_like(ss_res, _NAN, dtype=torch.float64)
    ss_tot = targets.m2
    r2 = 1 - ss_res / ss_tot.clamp_min(torch.finfo(torch.float64).tiny)
    constant = torch.where(ss_res == 0, 1.0, 0.0).to(torch.float64)
    return torch.where(ss_tot > 0, r2, constant)
