"""The draw of a committee election (000 §3.5.2, Eq. 23): weights Rep^α·(1 + γ·p), the
first-draw probabilities, and sequential weighted draws without replacement.

:mod:`geofl.governance.committee` elects with these (its docstring gives the full rule and
why Eq. 23 is the probability of the *first* member only).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from geofl.errors import GovernanceError

__all__ = ["election_probabilities", "election_weights", "weighted_sample_without_replacement"]

FloatArray = npt.NDArray[np.float64]


def election_weights(
    *,
    reputation: npt.ArrayLike,
    alpha: float,
    protection: npt.ArrayLike | None = None,
    protection_weight: float = 0.0,
) -> FloatArray:
    """``[C]`` draw weights Rep_i^α·(1 + γ·p_i) (Eq. 23's numerator, with the protection term).

    Raises:
        GovernanceError: on γ < 0, or ``protection`` of the wrong length or outside [0, 1].
    """
    rep = np.asarray(reputation, dtype=np.float64)
    w = rep**alpha
    if protection is None or protection_weight == 0.0:
        return w
    if not protection_weight >= 0:
        raise GovernanceError(f"protection_weight: must be >= 0, got {protection_weight}")
    p = np.asarray(protection, dtype=np.float64)
    if p.shape != rep.shape or not np.all((p >= 0) & (p <= 1)):
        raise GovernanceError(f"protection: need {rep.size} values in [0, 1], got {p.tolist()}")
    return w * (1.0 + protection_weight * p)


def election_probabilities(
    *,
    reputation: npt.ArrayLike,
    alpha: float,
    protection: npt.ArrayLike | None = None,
    protection_weight: float = 0.0,
) -> FloatArray:
    """P(i) = w_i / Σ_j w_j, w_i = Rep_i^α·(1 + γ·p_i), over the given candidates (000 Eq. 23).

    With γ = 0 (or no ``protection``) this is Eq. 23 as printed. The factor 1 + γ·p_i is
    geofl's reading of §3.5.2 item 2 ("nodes with stronger data protection capability are
    assigned higher election weights"), which gives no formula.

    Args:
        reputation: ``[C]`` non-negative reputations of the candidates.
        alpha: α > 0.
        protection: ``[C]`` relative data protection p_i ∈ [0, 1], or None.
        protection_weight: γ ≥ 0.

    Returns:
        ``[C]`` probabilities summing to 1 (uniform if every Rep^α is 0).

    Raises:
        GovernanceError: on α ≤ 0, an empty set, or negative / non-finite reputations.
    """
    rep = np.asarray(reputation, dtype=np.float64)
    if not alpha > 0:
        raise GovernanceError(f"alpha: must be > 0, got {alpha}")
    if rep.size == 0:
        raise GovernanceError("reputation: no candidates")
    if not np.all(np.isfinite(rep)) or np.any(rep < 0):
        raise GovernanceError("reputation: values must be finite and >= 0")
    w = election_weights(
        reputation=rep, alpha=alpha, protection=protection, protection_weight=protection_weight
    )
    total = w.sum()
    if total <= 0:
        return np.full(rep.shape, 1.0 / rep.size)
    return np.asarray(w / total, dtype=np.float64)


def weighted_sample_without_replacement(
    *, weights: npt.ArrayLike, size: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Sequential weighted draws without replacement, renormalising after each draw.

    Args:
        weights: ``[C]`` non-negative weights (e.g. Rep^α).
        size: Number of draws, ≤ C.
        rng: Generator (one uniform variate per draw).

    Returns:
        ``[size]`` indices into ``weights`` in draw order.
    """
    w = [float(x) for x in np.asarray(weights, dtype=np.float64).ravel()]
    if size > len(w):
        raise GovernanceError(f"size: cannot draw {size} from {len(w)} candidates")
    if any(not x >= 0 for x in w):  # also catches NaN
        raise GovernanceError("weights: must be >= 0")
    remaining = list(range(len(w)))
    out = np.empty(size, dtype=np.int64)
    for k in range(size):
        u = float(rng.random())
        positive = [i for i in remaining if w[i] > 0]
        if not positive:  # only zero weights left: uniform among the remaining
            pick = remaining[min(int(u * len(remaining)), len(remaining) - 1)]
        else:  # inverse CDF over the remaining weights (Σ renormalises)
            target = u * sum(w[i] for i in positive)
            acc, pick = 0.0, positive[-1]  # the last one absorbs float round-off
            for i in positive:
                acc += w[i]
                if acc > target:
                    pick = i
                    break
        out[k] = pick
        remaining.remove(pick)
    return out
