"""Krum and Multi-Krum (Blanchard et al. 2017, "Machine learning with adversaries: Byzantine
tolerant gradient descent", §4) over exact pairwise distances."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from geofl.errors import AggregationError
from geofl.server.robust._common import _check_updates
from geofl.server.robust.distances import pairwise_squared_distances

__all__ = ["KrumResult", "krum", "krum_scores", "multi_krum"]


@dataclass(frozen=True)
class KrumResult:
    """Output of :func:`multi_krum`.

    Attributes:
        aggregate: ``[D]`` mean of the selected updates (the selected update when m = 1).
        selected: ``[m]`` int64 row indices, lowest score first (ties: lowest index first).
        scores: ``[K]`` float64 Krum scores.
    """

    aggregate: torch.Tensor
    selected: torch.Tensor
    scores: torch.Tensor


def _check_krum(k: int, num_byzantine: int) -> None:
    if isinstance(num_byzantine, bool) or not isinstance(num_byzantine, int) or num_byzantine < 0:
        raise ValueError(f"num_byzantine must be an integer ≥ 0, got {num_byzantine!r}")
    need = 2 * num_byzantine + 2
    if k <= need:
        raise AggregationError(
            f"Krum needs more than 2f+2 = {need} updates, got {k}; "
            "lower num_byzantine or raise participation"
        )


def _scores_from_distances(dist: torch.Tensor, num_byzantine: int) -> torch.Tensor:
    """Sum of each row's K − f − 2 smallest off-diagonal entries."""
    k = dist.shape[0]
    others = dist.clone()
    others.fill_diagonal_(math.inf)
    return torch.sort(others, dim=1).values[:, : k - num_byzantine - 2].sum(dim=1)


def krum_scores(updates: torch.Tensor, *, num_byzantine: int) -> torch.Tensor:
    """Krum score of every update (Blanchard et al. 2017, §4).

    s_i = Σ_{j ∈ N_i} ‖Δw_i − Δw_j‖², N_i = the K − f − 2 updates nearest to Δw_i (itself
    excluded). Requires K > 2f + 2.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        num_byzantine: f ≥ 0, the number of Byzantine updates tolerated.

    Returns:
        ``[K]`` float64.

    Raises:
        AggregationError: if K ≤ 2f + 2.
    """
    k, _ = _check_updates(updates)
    _check_krum(k, num_byzantine)
    return _scores_from_distances(pairwise_squared_distances(updates), num_byzantine)


def multi_krum(updates: torch.Tensor, *, num_byzantine: int, num_selected: int) -> KrumResult:
    """Multi-Krum (Blanchard et al. 2017, §4): mean of the m lowest-score updates.

    m = 1 is Krum (the single lowest-score update, returned as a copy). Ties in the score
    are broken by the lowest row index, so the choice is deterministic. Unweighted.

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        num_byzantine: f ≥ 0; requires K > 2f + 2.
        num_selected: m, 1 ≤ m ≤ K − f (Blanchard et al. use m = K − f).

    Returns:
        :class:`KrumResult` with the ``[D]`` aggregate, the selected rows and all scores.

    Raises:
        AggregationError: if K ≤ 2f + 2 or m > K − f.
        ValueError: if f < 0 or m < 1.
    """
    k, _ = _check_updates(updates)
    _check_krum(k, num_byzantine)
    if isinstance(num_selected, bool) or not isinstance(num_selected, int) or num_selected < 1:
        raise ValueError(f"num_selected must be an integer ≥ 1, got {num_selected!r}")
    if num_selected > k - num_byzantine:
        raise AggregationError(
            f"Multi-Krum num_selected={num_selected} exceeds K − f = {k - num_byzantine} "
            f"(K={k}, num_byzantine={num_byzantine}); lower num_selected"
        )
    scores = _scores_from_distances(pairwise_squared_distances(updates), num_byzantine)
    selected = torch.sort(scores, stable=True).indices[:num_selected]
    if num_selected == 1:
        aggregate = updates[int(selected[0])].clone()
    else:
        # One pass over the rows (as fast as mean(0)); gathering m rows first is 6–25× slower.
        mask = torch.zeros(k, dtype=updates.dtype, device=updates.device)
        mask[selected] = 1.0 / num_selected
        aggregate = mask @ updates
    return KrumResult(aggregate, selected, scores)


def krum(updates: torch.Tensor, *, num_byzantine: int) -> KrumResult:
    """Krum (Blanchard et al. 2017): the update with the lowest score; see :func:`multi_krum`."""
    return multi_krum(updates, num_byzantine=num_byzantine, num_selected=1)
