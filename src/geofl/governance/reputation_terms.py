"""Per-equation reputation terms of 000 Eq. 18–22 as pure functions over ``[N, T]`` arrays.

Nodes × window-rounds arrays, NaN meaning "no value". The formulas and their choices are
documented in :mod:`geofl.governance.reputation`, which composes them round by round.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from geofl.errors import GovernanceError

__all__ = [
    "BEHAVIOR_FEATURES",
    "DeltaAccMap",
    "FloatArray",
    "behavior_matrix",
    "behavior_variance",
    "consistency_reputation",
    "contribution_reputation",
    "normalize_behavior",
    "normalize_delta_acc",
    "participation_reputation",
    "participation_step",
    "total_reputation",
    "update_quality",
]

FloatArray = npt.NDArray[np.float64]
DeltaAccMap = Literal["linear", "tanh", "clip"]

#: Feature order of a behaviour vector b_i^(r) (000 Eq. 20).
BEHAVIOR_FEATURES = ("update_norm", "noise_sigma", "participation")

SUM_TOL = 1e-9


def _f64(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def normalize_delta_acc(
    *, delta_acc: npt.ArrayLike, mapping: DeltaAccMap = "linear", scale: float = 0.05
) -> FloatArray:
    """g(ΔAcc): map marginal accuracy effects into [0, 1] (000 Eq. 19, normalisation).

    Args:
        delta_acc: ΔAcc values as fractions (any shape); NaN stays NaN.
        mapping: ``linear`` = clip(½ + ΔAcc/(2·scale), 0, 1), ``tanh`` =
            ½(1 + tanh(ΔAcc/scale)), ``clip`` = clip(ΔAcc, 0, 1).
        scale: s > 0, the ΔAcc mapped to 1 by ``linear``.

    Returns:
        Array of the input's shape with values in [0, 1] (or NaN).
    """
    d = _f64(delta_acc)
    if mapping == "linear":
        return np.clip(0.5 + d / (2.0 * scale), 0.0, 1.0)
    if mapping == "tanh":
        return 0.5 * (1.0 + np.tanh(d / scale))
    if mapping == "clip":
        return np.clip(d, 0.0, 1.0)
    raise GovernanceError(f"delta_acc_map: unknown mapping {mapping!r}; use linear, tanh, clip")


def update_quality(
    *,
    delta_acc: npt.ArrayLike,
    consistency: npt.ArrayLike,
    lambda_acc: float,
    lambda_consistency: float,
    mapping: DeltaAccMap = "linear",
    scale: float = 0.05,
) -> FloatArray:
    """Quality(Δw_i^(t)) = λ1·g(ΔAcc_i^(t)) + λ2·S_i^(t) (000 Eq. 19).

    Where exactly one term is NaN the other is used alone; where both are NaN the
    quality is NaN (no update delivered).

    Args:
        delta_acc: ΔAcc, ``[N, T]`` (or any shape broadcasting with ``consistency``).
        consistency: S of 000 Eq. 15 in [0, 1], same shape.
        lambda_acc: λ1.
        lambda_consistency: λ2 (λ1 + λ2 = 1).
        mapping: g, see :func:`normalize_delta_acc`.
        scale: s of g.

    Returns:
        Quality in [0, 1] or NaN.
    """
    g = normalize_delta_acc(delta_acc=delta_acc, mapping=mapping, scale=scale)
    s = _f64(consistency)
    g, s = np.broadcast_arrays(g, s)
    both = lambda_acc * g + lambda_consistency * s
    return np.where(np.isnan(g), s, np.where(np.isnan(s), g, both))


def contribution_reputation(*, quality: npt.ArrayLike, default: float = 0.5) -> FloatArray:
    """Rep_contrib,i = (1/T) Σ_t Quality(Δw_i^(t)) over the window (000 Eq. 18).

    Args:
        quality: ``[N, T]``; NaN entries (no update) are left out of the mean.
        default: value for a node whose window holds no quality at all.

    Returns:
        ``[N]`` contributions.
    """
    q = _f64(quality)
    valid = ~np.isnan(q)
    cnt = valid.sum(axis=-1)
    total = np.where(valid, q, 0.0).sum(axis=-1)
    return np.where(cnt > 0, total / np.maximum(cnt, 1), default)


def participation_step(
    *,
    ratio: npt.ArrayLike,
    streak: npt.ArrayLike,
    participated: npt.ArrayLike,
    recovery: float,
    decay: float,
    streak_penalty: float,
) -> tuple[FloatArray, npt.NDArray[np.int64], FloatArray]:
    """One round of the participation reputation (000 §3.5.2 item 2; module docstring).

    Args:
        ratio: ``[N]`` smoothed participation ratio r before the round.
        streak: ``[N]`` consecutive misses m before the round.
        participated: ``[N]`` 1 = accepted, 0 = expected but failed, NaN = not expected.
        recovery: ρ_up.
        decay: ρ_down.
        streak_penalty: κ.

    Returns:
        ``(ratio, streak, participation)`` after the round, participation = r·exp(−κ·m).
    """
    r = _f64(ratio)
    m = np.asarray(streak, dtype=np.int64)
    x = _f64(participated)
    hit, miss = x == 1.0, x == 0.0
    r = np.where(hit, r + recovery * (1.0 - r), np.where(miss, (1.0 - decay) * r, r))
    m = np.where(hit, 0, np.where(miss, m + 1, m)).astype(np.int64)
    return r, m, r * np.exp(-streak_penalty * m)


def participation_reputation(
    *,
    participated: npt.ArrayLike,
    init: float = 1.0,
    recovery: float = 0.25,
    decay: float = 0.5,
    streak_penalty: float = 0.25,
) -> FloatArray:
    """Rep_part of every node after every round of a history (000 §3.5.2 item 2).

    Args:
        participated: ``[N, R]`` over the rounds so far: 1 / 0 / NaN (not expected).
        init: r before the first round.
        recovery: ρ_up.
        decay: ρ_down.
        streak_penalty: κ.

    Returns:
        ``[N, R]``: column t is Rep_part after round t.
    """
    x = np.atleast_2d(_f64(participated))
    r = np.full(x.shape[0], init)
    m = np.zeros(x.shape[0], dtype=np.int64)
    out = np.empty_like(x)
    for t in range(x.shape[1]):
        r, m, out[:, t] = participation_step(
            ratio=r,
            streak=m,
            participated=x[:, t],
            recovery=recovery,
            decay=decay,
            streak_penalty=streak_penalty,
        )
    return out


def behavior_matrix(
    *, update_norm: npt.ArrayLike, noise_sigma: npt.ArrayLike, participated: npt.ArrayLike
) -> FloatArray:
    """Stack the behaviour vectors b_i^(r) = (‖Δw̃‖, σ, x) of a window (000 Eq. 20).

    A failed round (x = 0) released nothing: its norm and σ are 0. A round the node was
    not expected in (x NaN) is NaN in every feature and left out of the variance.

    Args:
        update_norm: ``[N, T]``.
        noise_sigma: ``[N, T]``.
        participated: ``[N, T]`` 1 / 0 / NaN.

    Returns:
        ``[N, T, 3]`` in the order of :data:`BEHAVIOR_FEATURES`.
    """
    x = _f64(participated)
    feats = []
    for f in (_f64(update_norm), _f64(noise_sigma)):
        f = np.where(x == 0.0, 0.0, f)
        feats.append(np.where(np.isnan(x), np.nan, f))
    feats.append(x)
    return np.stack(feats, axis=-1)


def normalize_behavior(*, behavior: npt.ArrayLike) -> FloatArray:
    """Divide each feature by its largest |value| over all nodes × rounds (to [0, 1]).

    A feature that is 0 (or NaN) everywhere is left unchanged.

    Args:
        behavior: ``[N, T, F]``.

    Returns:
        ``[N, T, F]``.
    """
    b = _f64(behavior)
    absb = np.where(np.isnan(b), 0.0, np.abs(b))
    top = absb.reshape(-1, b.shape[-1]).max(axis=0) if b.size else np.zeros(b.shape[-1])
    return b / np.where(top > 0, top, 1.0)


def behavior_variance(
    *, behavior: npt.ArrayLike, weights: npt.ArrayLike = (1.0, 1.0, 1.0)
) -> FloatArray:
    """Var(Behavior_i): weighted mean over features of the window's variances (000 Eq. 21).

    Per feature, the population variance (ddof = 0) over the node's non-NaN rounds; a
    feature with fewer than two values has variance 0.

    Args:
        behavior: ``[N, T, F]`` (normalise first with :func:`normalize_behavior`).
        weights: ``[F]`` non-negative feature weights.

    Returns:
        ``[N]`` variances.
    """
    b = _f64(behavior)
    w = _f64(weights)
    valid = ~np.isnan(b)
    cnt = valid.sum(axis=1)  # [N, F]
    safe = np.maximum(cnt, 1)
    mean = np.where(valid, b, 0.0).sum(axis=1) / safe
    sq = np.where(valid, (b - mean[:, None, :]) ** 2, 0.0).sum(axis=1) / safe
    var = np.where(cnt >= 2, sq, 0.0)  # [N, F]
    return np.asarray((var * w).sum(axis=-1) / w.sum(), dtype=np.float64)


def consistency_reputation(
    *,
    variance: npt.ArrayLike,
    miss_fraction: npt.ArrayLike | None = None,
    variance_floor: float = 0.0,
    inactivity_penalty: float = 0.0,
) -> FloatArray:
    """Rep_consist,i = (1 − Var_i / max_j Var_j) · (1 − π·miss_i) (000 Eq. 21, §4.7).

    Args:
        variance: ``[N]`` Var(Behavior_i) of the nodes compared with each other.
        miss_fraction: ``[N]`` failed / expected rounds in the window (None = all 0).
        variance_floor: v_floor; the denominator is max(max_j Var_j, v_floor). When it is
            0 (all variances 0, no floor) the first factor is 1.
        inactivity_penalty: π in [0, 1].

    Returns:
        ``[N]`` in [0, 1].
    """
    v = _f64(variance)
    denom = max(float(v.max()) if v.size else 0.0, variance_floor)
    stable = np.ones_like(v) if denom <= 0.0 else 1.0 - v / denom
    miss = np.zeros_like(v) if miss_fraction is None else _f64(miss_fraction)
    return np.asarray(np.clip(stable * (1.0 - inactivity_penalty * miss), 0.0, 1.0))


def total_reputation(
    *,
    contribution: npt.ArrayLike,
    participation: npt.ArrayLike,
    consistency: npt.ArrayLike,
    weights: tuple[float, float, float],
) -> FloatArray:
    """Rep_i = w1·Rep_contrib,i + w2·Rep_part,i + w3·Rep_consist,i (000 Eq. 22).

    Args:
        contribution: ``[N]``.
        participation: ``[N]``.
        consistency: ``[N]``.
        weights: (w1, w2, w3), each > 0, summing to 1.

    Returns:
        ``[N]`` reputations.

    Raises:
        GovernanceError: if the weights are not positive or do not sum to 1.
    """
    w1, w2, w3 = weights
    if min(weights) <= 0 or not math.isclose(w1 + w2 + w3, 1.0, abs_tol=SUM_TOL):
        raise GovernanceError(f"weights: need w1, w2, w3 > 0 summing to 1, got {weights}")
    return w1 * _f64(contribution) + w2 * _f64(participation) + w3 * _f64(consistency)
