"""FLAME (Nguyen et al., USENIX Security 2022) as an algorithm: the 004 Table 7 baseline.

The method's own defenses run first; FLAME (:func:`geofl.server.flame.flame`) clusters the
updates they kept, clips the majority cluster to the round's median norm S_t, averages it
uniformly (Nguyen et al. 2022 Alg. 1: the plain mean of the clipped admitted updates, so
the method must say ``weighting: {name: uniform}``; any other weighting is refused at
load rather than silently changing the baseline) and adds
N(0, (λ S_t)² I) from the generator ``(seed, "flame", "noise", round)``; then the plain
server step. The round record's effective weights are the pre-clipping weights of the kept
updates; ``flame.*`` scalars report S_t, σ, how many were kept and clipped.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.algorithms.base import ALGORITHMS, Algorithm, AlgorithmContext, fail_method_field
from geofl.algorithms.dual_shield import check_mean_and_weighting
from geofl.registry import CheckContext
from geofl.rng import torch_generator
from geofl.server.flame import FLAME_LAMBDA_IC, flame
from geofl.server.optimizers import PlainServerOptimizer
from geofl.server.strategy import ComposedStrategy, StrategyResult, UpdateBatch
from geofl.server.tier import FlatTier

__all__ = ["FlameParams", "FlameStrategy"]


class FlameParams(BaseModel):
    """FLAME's noise level (Nguyen et al. 2022, §6)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    noise_lambda: float = Field(
        FLAME_LAMBDA_IC,
        ge=0.0,
        allow_inf_nan=False,
        description="λ of σ = λ·S_t (FLAME §6: 0.001 for image classification, 0.01 for NLP)",
    )


class FlameStrategy(ComposedStrategy):
    """Defenses → HDBSCAN majority → clip to the median norm → weighted mean + noise."""

    def __init__(self, tier: FlatTier, server_lr: float, noise_lambda: float, seed: int) -> None:
        super().__init__(tier, PlainServerOptimizer(server_lr))
        self.noise_lambda = noise_lambda
        self.seed = seed

    def aggregate(
        self, round_idx: int, global_params: torch.Tensor, batch: UpdateBatch
    ) -> StrategyResult:
        updates, k = batch.deltas, batch.deltas.shape[0]
        screened, w = self.tier.select(updates, batch.metas, round_idx)
        idx = torch.nonzero(screened).flatten()
        kept = torch.zeros(k, dtype=torch.bool)
        weights = torch.zeros(k, dtype=torch.float64)
        info = {"flame.kept": 0.0, "flame.clipped": 0.0}
        if idx.numel() == 0:
            delta = torch.zeros_like(global_params)
        else:
            gen = torch_generator(self.seed, "flame", "noise", round_idx)
            res = flame(
                updates if idx.numel() == k else updates[idx],
                w,
                noise_lambda=self.noise_lambda,
                generator=gen,
            )
            delta = res.delta
            kept[idx], weights[idx] = res.kept, res.weights
            info = {
                "flame.kept": float(int(res.kept.sum())),
                "flame.clipped": float(res.clipped),
                "flame.clip_bound": res.clip_bound,
                "flame.noise_std": res.noise_std,
            }
        params = self.optimizer.step(global_params, delta)
        return StrategyResult(params, delta, weights, kept, info)


def _check(_: FlameParams, ctx: CheckContext) -> None:
    """FLAME's own combiner replaces the aggregator, and its mean is uniform.

    Nguyen et al. 2022 (Alg. 1) average the clipped admitted updates with equal
    weights; data-size weighting would let a client that claims many samples pull the
    aggregate, which is what the clipping is there to bound. So the weighting is refused
    unless it is ``uniform``.
    """
    check_mean_and_weighting("flame", "the clipped mean, Nguyen et al. 2022 Alg. 1", ctx)
    weighting = ((ctx.method or {}).get("weighting") or {}).get("name", "data_size")
    if weighting != "uniform":
        fail_method_field(
            ctx,
            "weighting.name",
            f"flame averages the clipped admitted updates uniformly (Nguyen et al. 2022, "
            f"Alg. 1); the {weighting!r} weighting would change the baseline — use "
            "weighting: {name: uniform}",
        )


@ALGORITHMS.register("flame", params=FlameParams, check=_check)
def build_flame(params: FlameParams, *, ctx: AlgorithmContext) -> Algorithm:
    """FLAME (Nguyen et al. 2022): HDBSCAN cosine clustering, median-norm clipping, noise."""
    strategy = FlameStrategy(ctx.tier, ctx.server_lr, params.noise_lambda, ctx.seed)
    return Algorithm(strategy)
