"""FLAME (Nguyen et al., "FLAME: Taming backdoors in federated learning", USENIX Security
2022, Alg. 1): cluster, clip, noise — the 004 Table 7 baseline.

1. **Filter**: pairwise cosine distances c_ij = 1 − cos(Δw_i, Δw_j) of the round's K updates
   (``[K, K]`` from one float64-accumulated Gram pass over ``[K, D]``), HDBSCAN on them
   (scikit-learn's ``sklearn.cluster.HDBSCAN``, ``metric="precomputed"``) with
   min_cluster_size = ⌊K/2⌋ + 1 and min_samples = 1, single-cluster result allowed (as the
   FLAME authors' code); the largest cluster is kept, noise points and smaller clusters are
   dropped. If HDBSCAN finds no cluster (or K < 3), nothing is dropped. In single-cluster
   mode HDBSCAN labels as members only the points that stay in the cluster longest, so a
   benign update at the edge of the majority can be dropped too (as in FLAME's own call).
2. **Clip**: S_t = median of the L2 norms e_j = ‖Δw_j‖ of *all* K updates (Alg. 1 computes
   e over every local model); each kept update is scaled by min(1, S_t / e_j).
3. **Aggregate** the clipped kept updates with the given weights. FLAME's rule is the
   plain mean; the ``flame`` algorithm (:mod:`geofl.algorithms.flame`) refuses any method
   weighting but ``uniform`` at load, so its weights here are always equal.
4. **Noise**: N(0, σ² I) added to the aggregate with σ = λ · S_t; λ = 0.001 for image
   classification (Nguyen et al. 2022, §6 "noise level λ = 0.001 for IC", 0.01 for NLP).
   The noise comes from an explicit generator (:mod:`geofl.rng`), never a global RNG.

FLAME works on the local models W_i; the distances here are on the updates Δw_i = W_i − G
(the cosine of whole models is dominated by the shared G), and the noise goes on the
aggregated update, so on the model when the server step is plain with η_s = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from geofl.server.robust.distances import _blockwise_sum

__all__ = ["FLAME_LAMBDA_IC", "FlameResult", "cosine_distance_matrix", "flame", "flame_mask"]

#: λ of FLAME's adaptive noise for image classification (Nguyen et al. 2022, §6).
FLAME_LAMBDA_IC = 0.001


@dataclass(frozen=True)
class FlameResult:
    """One FLAME round.

    Attributes:
        delta: ``[D]`` clipped, weighted, noised aggregate.
        kept: ``[K]`` bool, the majority cluster.
        weights: ``[K]`` float64 normalised weights of the kept rows (0 elsewhere).
        clip_bound: S_t, the median norm.
        noise_std: σ = λ S_t.
        clipped: How many kept rows were scaled down.
    """

    delta: torch.Tensor
    kept: torch.Tensor
    weights: torch.Tensor
    clip_bound: float
    noise_std: float
    clipped: int


def _gram(updates: torch.Tensor) -> torch.Tensor:
    """``[K, K]`` float64 U Uᵀ, accumulated per column block in float64."""
    k = updates.shape[0]

    def block(part: torch.Tensor, buf: torch.Tensor, acc: torch.Tensor) -> None:
        buf.copy_(part)
        acc.addmm_(buf, buf.T)

    return _blockwise_sum(updates, block, (k, k), k)


def cosine_distance_matrix(updates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``([K, K] float64 1 − cos(Δw_i, Δw_j) in [0, 2], [K] float64 norms)``.

    A zero-norm row has cosine 0 to every other row (distance 1); the diagonal is 0.
    """
    gram = _gram(updates.detach())
    norms = gram.diagonal().clamp_min(0.0).sqrt()
    outer = norms[:, None] * norms[None, :]
    cos = torch.where(outer > 0, gram / torch.where(outer > 0, outer, 1.0), 0.0)
    dist = (1.0 - cos).clamp_(0.0, 2.0)
    dist = 0.5 * (dist + dist.T)
    dist.fill_diagonal_(0.0)
    return dist, norms


def flame_mask(distances: torch.Tensor) -> torch.Tensor:
    """``[K]`` bool: the largest HDBSCAN cluster of a ``[K, K]`` distance matrix.

    min_cluster_size = ⌊K/2⌋ + 1, min_samples = 1, single cluster allowed (FLAME, Alg. 1).
    """
    from sklearn.cluster import HDBSCAN

    k = distances.shape[0]
    if k < 3:
        return torch.ones(k, dtype=torch.bool)
    labels = HDBSCAN(
        min_cluster_size=k // 2 + 1,
        min_samples=1,
        metric="precomputed",
        allow_single_cluster=True,
        copy=False,  # the array below is ours
    ).fit_predict(distances.numpy().astype(np.float64, copy=True))
    clusters = labels[labels >= 0]
    if clusters.size == 0:
        return torch.ones(k, dtype=torch.bool)
    majority = np.bincount(clusters).argmax()
    return torch.from_numpy(labels == majority)


def flame(
    updates: torch.Tensor,
    weights: torch.Tensor,
    *,
    noise_lambda: float,
    generator: torch.Generator,
) -> FlameResult:
    """FLAME over one round (module docstring, steps 1–4).

    Args:
        updates: ``[K, D]`` floating, finite; not modified.
        weights: ``[K]`` non-negative weights of every row (renormalised over the kept ones).
        noise_lambda: λ ≥ 0 of σ = λ S_t (0: no noise).
        generator: Source of the noise (e.g. ``torch_generator(seed, "flame", round)``).
    """
    dist, norms = cosine_distance_matrix(updates)
    kept = flame_mask(dist)
    bound = float(torch.quantile(norms, 0.5))
    scale = torch.where(norms > bound, bound / norms.clamp_min(1e-300), 1.0)
    w = torch.where(kept, weights.to(torch.float64), 0.0)
    w = w / w.sum() if float(w.sum()) > 0 else kept.to(torch.float64) / int(kept.sum())
    delta = (w * scale).to(updates.dtype) @ updates
    std = noise_lambda * bound
    if std > 0:
        noise = torch.randn(delta.shape, generator=generator, dtype=delta.dtype)
        delta.add_(noise, alpha=std)
    clipped = int((kept & (norms > bound)).sum())
    return FlameResult(delta, kept, w, bound, std, clipped)
