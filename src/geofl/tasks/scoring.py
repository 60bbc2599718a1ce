"""Split-level metric functions: average precision, ROC-AUC, F1 from counts, R² from sums.

Pure tensor functions with scikit-learn semantics (checked against it in
``tests/tasks/test_scoring.py``), vectorised over classes: one sort of an ``[N, C]`` score
matrix ranks every class at once, and tied scores are handled by tie-group bounds computed
with cumulative min/max instead of a Python loop over thresholds. Counts and sums are
float64; scores are ranked in their own precision (float32 or float64), which keeps their
order and ties exactly.

Ranking metrics depend on the order of the scores only, so callers may pass logits rather
than probabilities: the order is the same, and logits avoid the ties that a saturated
float32 sigmoid (exactly 1.0 for logits above ≈ 17) would create.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "average_precision",
    "f1_from_counts",
    "group_first",
    "group_last",
    "mse_mae_r2",
    "mse_mae_r2_scalar",
    "r2_from_sums",
    "roc_auc",
    "roc_auc_1d",
    "shifted_sum_of_squares",
    "tie_group_bounds",
]

_NAN = float("nan")


def tie_group_bounds(sorted_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First and last position of each element's group of equal scores along the last dim.

    Args:
        sorted_rows: ``[N]`` or ``[C, N]`` scores, each row sorted (either direction).

    Returns:
        ``(first, last)``, int64 of the input's shape: ``first[c, i]`` / ``last[c, i]`` is
        the smallest / largest ``j`` with ``sorted_rows[c, j] == sorted_rows[c, i]``.
    """
    return group_first(sorted_rows), group_last(sorted_rows)


def _changes(sorted_rows: torch.Tensor) -> torch.Tensor | None:
    """``[…, N − 1]`` bool: where each sorted row's value changes; None if it always does
    (no ties, the common case for continuous scores: every scan below is then skipped)."""
    differs = sorted_rows[..., 1:] != sorted_rows[..., :-1]
    return None if bool(differs.all()) else differs


def _positions(like: torch.Tensor) -> torch.Tensor:
    return torch.arange(like.shape[-1], dtype=torch.int64).expand_as(like)


def _first(differs: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    starts = torch.cat([torch.ones_like(differs[..., :1]), differs], dim=-1)
    return torch.where(starts, idx, -1).cummax(dim=-1).values


def _last(differs: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ends = torch.cat([differs, torch.ones_like(differs[..., :1])], dim=-1)
    return torch.where(ends, idx, idx.shape[-1]).flip(-1).cummin(dim=-1).values.flip(-1)


def group_first(sorted_rows: torch.Tensor) -> torch.Tensor:
    """First position of each element's tie group (a running max over group starts)."""
    idx, differs = _positions(sorted_rows), _changes(sorted_rows)
    return idx.contiguous() if differs is None else _first(differs, idx)


def group_last(sorted_rows: torch.Tensor) -> torch.Tensor:
    """Last position of each element's tie group (a reversed running min over group ends)."""
    idx, differs = _positions(sorted_rows), _changes(sorted_rows)
    return idx.contiguous() if differs is None else _last(differs, idx)


def _sorted_rows(
    scores: torch.Tensor, targets: torch.Tensor, *, descending: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each class's scores sorted, with the targets in the same order.

    ``[N, C]`` (or ``[N]``) inputs become ``[C, N]`` (``[1, N]``) rows, so every later
    scan runs along contiguous memory. The sort is numpy's (SIMD introsort), several
    times faster than ``torch.sort`` on CPU; its order within a tie group is arbitrary,
    which no metric here depends on. numpy sorts NaN last, so a row is finite iff its
    first and last sorted scores are.

    Returns:
        ``(sorted_scores [C, N], sorted_targets [C, N] bool, finite [C] bool)``.
    """
    if scores.shape != targets.shape:
        raise ValueError(f"scores {tuple(scores.shape)} and targets {tuple(targets.shape)} differ")
    exact = torch.float64 if scores.dtype == torch.float64 else torch.float32
    s = scores.detach().to("cpu", exact).reshape(scores.shape[0], -1).T.contiguous()
    y = (targets.detach().cpu() != 0).reshape(targets.shape[0], -1).T.contiguous()
    key = -s if descending else s
    order = torch.from_numpy(np.argsort(key.numpy(), axis=1))
    s_sorted = s.gather(1, order)
    finite = torch.isfinite(s_sorted[:, 0]) & torch.isfinite(s_sorted[:, -1])
    return s_sorted, y.gather(1, order), finite


def _shaped(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[C]`` per-class values back to the caller's layout (a scalar for ``[N]`` input)."""
    return values[0] if like.ndim == 1 else values


def average_precision(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Average precision of every class (column), as ``sklearn.metrics.average_precision_score``.

    AP = Σ_k (R_k − R_{k−1}) · P_k over the distinct score thresholds in decreasing order
    (scikit-learn's step-wise definition, no interpolation; Zhu 2004). Samples with equal
    scores enter at the same threshold, so all positives of a tie group share the precision
    at the end of the group, and

        AP = (1 / n_pos) · Σ_{i positive} TP(≤ end of g_i) / (end of g_i + 1),

    with ``g_i`` the tie group of sample ``i`` and positions 0-based in decreasing score.
    One sort of the ``[C, N]`` rows serves every class.

    Args:
        scores: ``[N, C]`` (or ``[N]``) scores; larger means more likely positive.
        targets: Same shape, 0/1 (any dtype; non-zero is positive).

    Returns:
        ``[C]`` (or scalar) float64 AP; NaN for a class without positives (scikit-learn
        warns and returns 0 there) or with a non-finite score.
    """
    if scores.shape[0] == 0:
        return torch.full(scores.shape[1:], _NAN, dtype=torch.float64)
    s_sorted, y, finite = _sorted_rows(scores, targets, descending=True)
    tp = y.cumsum(dim=-1)
    last = group_last(s_sorted)
    precision_at_end = tp.gather(-1, last).to(torch.float64) / (last + 1)
    n_pos = y.sum(dim=-1).to(torch.float64)
    ap = (precision_at_end * y).sum(dim=-1) / n_pos
    ap = torch.where((n_pos == 0) | ~finite, torch.full_like(ap, _NAN), ap)
    return _shaped(ap, scores)


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
    if scores.shape[0] == 0:
        return torch.full(scores.shape[1:], _NAN, dtype=torch.float64)
    if scores.ndim == 1 and scores.shape == targets.shape:
        fast = roc_auc_1d(scores.detach().cpu().numpy(), (targets.detach().cpu() != 0).numpy())
        if fast is not None:
            return torch.tensor(fast, dtype=torch.float64)
    s_sorted, y, finite = _sorted_rows(scores, targets, descending=False)
    idx, differs = _positions(s_sorted), _changes(s_sorted)
    if differs is None:  # no ties: rank = position + 1
        rank = (idx + 1).to(torch.float64)
    else:
        rank = (_first(differs, idx) + _last(differs, idx)).to(torch.float64) / 2 + 1
    n_pos = y.sum(dim=-1).to(torch.float64)
    n_neg = scores.shape[0] - n_pos
    u = (rank * y).sum(dim=-1) - n_pos * (n_pos + 1) / 2
    auc = u / (n_pos * n_neg)
    auc = torch.where((n_pos == 0) | (n_neg == 0) | ~finite, torch.full_like(auc, _NAN), auc)
    return _shaped(auc, scores)


#: Largest float64 split :func:`roc_auc_1d` ranks by binary search (up to here the searched
#: array stays in cache); float32 scores take the compiled radix sort at any size.
SEARCH_MAX = 8192


def roc_auc_1d(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """ROC-AUC of ``[N]`` scores (N ≥ 1) as :func:`roc_auc` gives it, to the bit: float32
    scores by one compiled radix sort (:func:`geofl.tasks.kernels.auc_float32`: 15 µs
    for 2,048 scores and 0.2 ms for 32,768 on the project's 2-core VM, against 34 µs and
    1.4 ms for numpy's sort), float64 scores by :func:`_auc_search` up to
    :data:`SEARCH_MAX`; None for larger float64 splits (the caller takes the general path).

    Args:
        scores: ``[N]`` real scores; larger means more likely positive.
        positive: ``[N]`` bool labels.
    """
    if scores.dtype == np.float32:
        from geofl.tasks.kernels import auc_float32

        return float(auc_float32(scores, positive))
    if scores.size <= SEARCH_MAX:
        return _auc_search(scores, positive)
    return None


def _auc_search(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC-AUC of ``[N]`` scores (N ≥ 1) as :func:`roc_auc` gives it, to the bit, from one
    sort of the scores in their own precision and one binary search per positive.

    With ``s`` the sorted scores, ``left_i`` (``right_i``) the number of scores below (at or
    below) positive i's score — the 0-based first position of its tie group and one past
    the last —

        2U = Σ_{i positive} (left_i + right_i − 1) − n_pos (n_pos − 1),

    the Mann–Whitney statistic of :func:`roc_auc` with average ranks; without ties
    ``right_i = left_i + 1``, so one search serves. U is an exact integer or half-integer
    here as there, so the AUC U / (n_pos · n_neg) is the same float64. −0 and +0 compare
    equal (one tie group) in the sort and the searches alike. Non-finite scores (NaN sorts
    last) and single-class splits give NaN.

    Args:
        scores: ``[N]`` real scores; larger means more likely positive.
        positive: ``[N]`` bool labels.
    """
    s = np.sort(scores)
    if not (s[0] > -np.inf and s[-1] < np.inf):
        return _NAN
    pos = scores[positive]
    n_pos = int(pos.size)
    n_neg = int(s.size) - n_pos
    if n_pos == 0 or n_neg == 0:
        return _NAN
    left = int(np.searchsorted(s, pos, side="left").sum())
    if bool((s[1:] != s[:-1]).all()):
        bounds = 2 * left
    else:
        bounds = left + int(np.searchsorted(s, pos, side="right").sum()) - n_pos
    return (bounds - n_pos * (n_pos - 1)) / 2 / (float(n_pos) * float(n_neg))


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


def shifted_sum_of_squares(
    sum_d: np.ndarray, sum_d2: np.ndarray, n: int, constant: np.ndarray
) -> np.ndarray:
    """Σ (d − d̄)² from running sums of shifted data d = (y − K) / s.

    SS = Σd² − (Σd)² / n, the one-pass "shifted data" algorithm discussed by Chan, Golub &
    LeVeque (1983, "Algorithms for computing the sample variance"): with the shift K close
    to the data's mean (a training mean, for a validation or test split) both terms are of
    the order of n·var and their difference keeps its precision; without the shift,
    Σy² − (Σy)²/n cancels catastrophically for targets with a large offset. Rounding can
    leave a tiny non-zero value for data that is exactly constant, so ``constant``
    (known from the running min and max) forces SS = 0 there, which R²'s constant-target
    rule needs. numpy, not torch: a split's final arithmetic is a few ``[T]`` vectors,
    where torch's per-call overhead would dominate (the same IEEE operations either way).

    Args:
        sum_d: ``[T]`` float64 Σd.
        sum_d2: ``[T]`` float64 Σd².
        n: Samples summed.
        constant: ``[T]`` bool, True where every d was equal.

    Returns:
        ``[T]`` float64 sum of squared deviations, in the units of d (multiply by s²).
    """
    ss = np.maximum(sum_d2 - sum_d * sum_d / max(n, 1), 0.0)
    out: np.ndarray = np.where(constant, 0.0, ss)
    return out


def r2_from_sums(ss_res: np.ndarray, ss_tot: np.ndarray, n: int) -> np.ndarray:
    """Coefficient of determination per output, as ``sklearn.metrics.r2_score``.

    R² = 1 − SS_res / SS_tot. For an output whose targets are constant (SS_tot = 0),
    scikit-learn's ``force_finite=True`` rule: 1.0 if the predictions are perfect
    (SS_res = 0), else 0.0. Fewer than two samples: NaN (scikit-learn warns and returns
    NaN).

    Args:
        ss_res: ``[T]`` float64 residual sums of squares Σ (y − ŷ)².
        ss_tot: ``[T]`` float64 Σ (y − ȳ)² over the same samples.
        n: Number of samples.

    Returns:
        ``[T]`` float64 R² (average it for scikit-learn's ``multioutput="uniform_average"``).
    """
    if n < 2:
        return np.full(ss_res.shape, _NAN)
    r2 = 1 - ss_res / np.maximum(ss_tot, np.finfo(np.float64).tiny)
    out: np.ndarray = np.where(ss_tot > 0, r2, np.where(ss_res == 0, 1.0, 0.0))
    return out


def mse_mae_r2(
    sums: np.ndarray, constant: np.ndarray, var: np.ndarray, sigma: np.ndarray, n: int
) -> np.ndarray:
    """A regression split's per-output MSE, MAE and R² in target units from standardised sums.

    With d = (y − μ)/σ and e = d − ẑ summed over n samples: MSE = σ²·Σe² / n,
    MAE = σ·Σ|e| / n, R² from SS_res = σ²·Σe² and SS_tot = σ²·(Σd² − (Σd)²/n)
    (:func:`shifted_sum_of_squares`, :func:`r2_from_sums`).

    Args:
        sums: ``[4, T]`` float64 Σd, Σd², Σe², Σ|e|.
        constant: ``[T]`` bool, True where every d was equal.
        var: ``[T]`` σ².
        sigma: ``[T]`` σ.
        n: Samples summed (≥ 1).

    Returns:
        ``[3, T]`` float64 rows MSE, MAE, R².
    """
    sum_d, sum_d2, sum_e2, sum_abs = sums
    out = np.empty((3, sums.shape[1]))
    with np.errstate(all="ignore"):  # inf / NaN as torch gives them, without warnings
        ss_res = var * sum_e2
        ss_tot = var * shifted_sum_of_squares(sum_d, sum_d2, n, constant)
        np.divide(ss_res, n, out=out[0])
        np.divide(sigma * sum_abs, n, out=out[1])
        out[2] = r2_from_sums(ss_res, ss_tot, n)
    return out


def mse_mae_r2_scalar(
    sums: list[list[float]], constant: list[bool], var_sigma: list[tuple[float, float]], n: int
) -> list[list[float]]:
    """:func:`mse_mae_r2` output by output on Python floats: the same operations in the
    same order, so the same bits; for a few outputs it saves ~20 numpy calls.

    Args:
        sums: ``[4][T]`` Σd, Σd², Σe², Σ|e|.
        constant: ``[T]`` True where every d was equal.
        var_sigma: ``[T]`` pairs (σ², σ).
        n: Samples summed (≥ 1).
    """
    rows: list[list[float]] = [[], [], []]
    for t, (var, sigma) in enumerate(var_sigma):
        sum_d, sum_d2, sum_e2, sum_abs = sums[0][t], sums[1][t], sums[2][t], sums[3][t]
        ss_res = var * sum_e2
        # shifted_sum_of_squares, then r2_from_sums
        ss_tot = var * (0.0 if constant[t] else max(sum_d2 - sum_d * sum_d / n, 0.0))
        if n < 2:
            r2 = _NAN
        elif ss_tot > 0:
            r2 = 1 - ss_res / max(ss_tot, _TINY)
        else:
            r2 = 1.0 if ss_res == 0 else 0.0
        rows[0].append(ss_res / n)
        rows[1].append(sigma * sum_abs / n)
        rows[2].append(r2)
    return rows


_TINY = float(np.finfo(np.float64).tiny)
