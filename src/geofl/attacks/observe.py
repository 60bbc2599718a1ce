"""What an honest-but-curious server observes of each update (000 §3.1.3, §4.4).

The server legitimately holds the released (perturbed) updates Δw̃_k, the aggregate it
applied and the sequence of global models. From those alone it can build, per client and
round, a vector of update statistics; the passive attribute-inference attack
(:mod:`geofl.attacks.inference`) learns sensitive client attributes from them. Nothing
here reads client-side logs, label histograms or risk levels.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from geofl.models.base import ParamSpec

__all__ = ["feature_names", "layer_bounds", "update_statistics"]

_GLOBAL = ("norm", "mean", "std", "max_abs", "cos_aggregate", "cos_previous")
_PER_LAYER = ("norm", "mean", "std")


def layer_bounds(spec: ParamSpec) -> list[tuple[str, int, int]]:
    """(name, start, stop) of every trainable tensor in the flat vector."""
    out = []
    for name, shape, off, trainable in zip(
        spec.names, spec.shapes, spec.offsets, spec.trainable, strict=True
    ):
        n = 1
        for s in shape:
            n *= s
        if trainable:
            out.append((name, off, off + n))
    return out


def feature_names(layers: Sequence[tuple[str, int, int]]) -> list[str]:
    """Column names of :func:`update_statistics`."""
    return [*(f"update.{f}" for f in _GLOBAL)] + [
        f"{name}.{f}" for name, _, _ in layers for f in _PER_LAYER
    ]


def _cosine(updates: torch.Tensor, ref: torch.Tensor | None) -> torch.Tensor:
    if ref is None:
        return torch.zeros(updates.shape[0], dtype=torch.float64)
    num = (updates @ ref).to(torch.float64)
    den = torch.linalg.vector_norm(updates, dim=1).to(torch.float64) * float(
        torch.linalg.vector_norm(ref)
    )
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))


def update_statistics(
    updates: torch.Tensor,
    *,
    aggregate: torch.Tensor,
    previous: torch.Tensor | None,
    layers: Sequence[tuple[str, int, int]],
) -> torch.Tensor:
    """Per-client statistics of the released updates of one round.

    Args:
        updates: ``[K, D]`` released updates as the server received them.
        aggregate: ``[D]`` the aggregate applied this round.
        previous: ``[D]`` the previous round's aggregate (the last global-model change),
            or None in the first round.
        layers: (name, start, stop) of each trainable tensor (:func:`layer_bounds`).

    Returns:
        ``[K, F]`` float64 with F = 6 + 3·len(layers), columns as :func:`feature_names`:
        L2 norm, mean, std, max |·|, cosine to this round's aggregate and to the previous
        one, then L2 norm, mean and std of every layer.
    """
    x = updates
    cols = [
        torch.linalg.vector_norm(x, dim=1).to(torch.float64),
        x.mean(dim=1, dtype=torch.float64),
        x.std(dim=1).to(torch.float64),
        x.abs().amax(dim=1).to(torch.float64),
        _cosine(x, aggregate),
        _cosine(x, previous),
    ]
    # A loop over the model's tensors (tens), each step vectorised over [K, n_layer].
    for _, a, b in layers:
        block = x[:, a:b]
        cols.append(torch.linalg.vector_norm(block, dim=1).to(torch.float64))
        cols.append(block.mean(dim=1, dtype=torch.float64))
        cols.append(block.std(dim=1).to(torch.float64) if b - a > 1 else torch.zeros(len(x)))
    return torch.stack([c.to(torch.float64) for c in cols], dim=1)
