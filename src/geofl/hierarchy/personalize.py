"""Downlink personalisation: regional adapters and the on-tractor mix (003 §2.2.6).

w_{i,new} = α ŵ^{t+1} + β A_{r(i)} + (1 − α − β) w_i^{t+1}, α, β ≥ 0, α + β ≤ 1.

Regional adapter A_r (the paper says only "lightweight regional adapters"): our choice is
the *regional model* — the unweighted mean of the models accepted from region r in the
aggregation horizon (e.g. the cluster models of drivers whose cluster lies in region r),
a point in parameter space like ŵ and w_i, so the mix stays a convex combination of models.
(An adapter stored as a delta A_r − ŵ would shrink the mixed weights by β unless added back
to ŵ, which gives the same point.) A region with no accepted model this horizon gets
``fallback`` (the global model ŵ: personalisation then only blends global and local). We
send the full regional model; "lightweight" is not modelled beyond its byte count.
"""

from __future__ import annotations

import math

import torch

from geofl.errors import HierarchyError

__all__ = ["personalize", "regional_adapters"]

#: Slack on α + β ≤ 1 for values like 0.7 + 0.3 that round above 1.
_SIMPLEX_SLACK = 1e-12


def personalize(
    global_model: torch.Tensor,
    adapter: torch.Tensor,
    local: torch.Tensor,
    *,
    alpha: float,
    beta: float,
) -> torch.Tensor:
    """003 §2.2.6: α ŵ + β A_r + (1 − α − β) w_i, in float64, cast to ``local``'s dtype.

    Args:
        global_model: ``[..., D]`` ŵ^{t+1}.
        adapter: ``[..., D]`` A_{r(i)} (broadcasts, e.g. ``[K, D]`` rows per tractor).
        local: ``[..., D]`` w_i^{t+1}.
        alpha, beta: α, β ≥ 0 with α + β ≤ 1.

    Raises:
        HierarchyError: α or β negative or not finite, α + β > 1, or shapes that do not
            broadcast.
    """
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not (math.isfinite(v) and v >= 0):
            raise HierarchyError(f"personalization.{name}: need a finite weight ≥ 0, got {v!r}")
    if alpha + beta > 1.0 + _SIMPLEX_SLACK:
        raise HierarchyError(
            f"personalization.alpha + beta = {alpha + beta:g} > 1; the local model's weight "
            "1 − α − β would be negative"
        )
    gamma = max(0.0, 1.0 - alpha - beta)
    try:
        out = (
            alpha * global_model.to(torch.float64)
            + beta * adapter.to(torch.float64)
            + gamma * local.to(torch.float64)
        )
    except RuntimeError as exc:
        raise HierarchyError(
            f"personalization: shapes {tuple(global_model.shape)}, {tuple(adapter.shape)}, "
            f"{tuple(local.shape)} do not broadcast"
        ) from exc
    return out.to(local.dtype)


def regional_adapters(
    models: torch.Tensor, region: torch.Tensor, *, num_regions: int, fallback: torch.Tensor
) -> torch.Tensor:
    """``[R, D]`` A_r = mean of the rows of ``models`` tagged with region r, else ``fallback``.

    Args:
        models: ``[N, D]`` models accepted in the horizon.
        region: ``[N]`` int region of each row, in 0 … R − 1.
        num_regions: R.
        fallback: ``[D]`` for regions with no row (the global model).
    """
    if models.ndim != 2 or region.shape != (models.shape[0],):
        raise HierarchyError(
            f"regional adapters: expected models [N, D] and region [N], got "
            f"{tuple(models.shape)} and {tuple(region.shape)}"
        )
    if fallback.shape != (models.shape[1],):
        raise HierarchyError(f"fallback: expected [{models.shape[1]}], got {tuple(fallback.shape)}")
    r = region.to(torch.int64)
    if r.numel() and (int(r.min()) < 0 or int(r.max()) >= num_regions):
        raise HierarchyError(f"region: ids must lie in 0..{num_regions - 1}")
    sums = torch.zeros(num_regions, models.shape[1], dtype=torch.float64)
    sums.index_add_(0, r, models.to(torch.float64))
    counts = torch.bincount(r, minlength=num_regions).to(torch.float64)
    out = torch.where(
        counts[:, None] > 0,
        sums / counts.clamp_min(1.0)[:, None],
        fallback.to(torch.float64)[None, :],
    )
    return out.to(models.dtype)
