"""Per-sample gradient records of the book-keeping engine (:mod:`geofl.client.bookkeeping`).

A layer call as the forward pass recorded it (:class:`LayerRecord`), the hook that hands a
layer's output gradient to its rule inside the backward pass (:class:`GradTap`), the
per-sample gradients of one micro-batch, materialised or ghost (:class:`ParamGrads`,
:class:`LayerGrads`), the normalisation layers' affine rule (:func:`norm_affine_grads`) and
the check that refuses shared layers and in-place modified records (:func:`check_records`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from geofl.client.bk_kernels import group_norm_weight_grads
from geofl.errors import ConfigError

__all__ = [
    "GradTap",
    "LayerGrads",
    "LayerRecord",
    "ParamGrads",
    "check_records",
    "norm_affine_grads",
]


@dataclass
class LayerRecord:
    """One call of a covered layer: its name, module, input, output and their versions."""

    name: str
    module: nn.Module
    a: torch.Tensor
    out: torch.Tensor
    versions: tuple[int, int]
    stats: tuple[torch.Tensor, torch.Tensor] | None = None  # GroupNorm's saved (μ, rstd)


@dataclass
class ParamGrads:
    """One parameter's per-sample gradients: materialised (``per``, ``[b, …]`` in a layout
    that ``layout`` maps to the parameter's shape) or ghost (``product(c) = Σ_i c_i G_i``)."""

    per: torch.Tensor | None = None
    layout: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    product: Callable[[torch.Tensor], torch.Tensor] | None = None

    def clipped_sum(self, c: torch.Tensor) -> torch.Tensor:
        """``Σ_i c_i G_i`` in the parameter's shape."""
        if self.per is not None:
            return self.layout(torch.tensordot(c, self.per, dims=1))
        assert self.product is not None  # one of the two is always set
        return self.product(c)


@dataclass
class LayerGrads:
    """Per-sample gradients of the covered layers of one micro-batch.

    ``sq`` holds ``[b]`` float32 squared norms (one per parameter, or per ghost weight),
    summed in float64 at the end; ``params`` the record of every trainable parameter.
    """

    sq: list[torch.Tensor] = field(default_factory=list)
    params: dict[str, ParamGrads] = field(default_factory=dict)

    def add(self, name: str, per: torch.Tensor, **kw: Any) -> None:
        """Record a materialised ``[b, …]`` gradient and its squared norms."""
        self.sq.append(torch.linalg.vector_norm(per.flatten(1), dim=1).square())
        self.params[name] = ParamGrads(per, **kw)

    def norms(self, b: int) -> torch.Tensor:
        """``[b]`` float64 per-sample norms over every parameter."""
        if not self.sq:
            return torch.zeros(b, dtype=torch.float64)
        return torch.stack(self.sq).double().sum(0).sqrt()


class GradTap(torch.autograd.Function):
    """Identity on a layer's output that hands its gradient to ``callback`` in backward.

    The output is returned in place (``mark_dirty``: no copy, no view, so later in-place
    operations on it stay detectable by its version) with one extra edge to ``anchor``, a
    leaf that backward is asked for: every tap is thereby on the backward path, and no
    layer's weight gradient is (its parameters are not asked for).
    """

    @staticmethod
    def forward(
        ctx: Any, out: torch.Tensor, anchor: torch.Tensor, callback: Callable[[torch.Tensor], None]
    ) -> torch.Tensor:
        ctx.callback = callback
        ctx.mark_dirty(out)
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.callback(g)
        return g, None, None


def check_records(records: list[LayerRecord]) -> None:
    """Refuse shared layers and recorded tensors modified in place after the forward pass."""
    seen: set[str] = set()
    for r in records:
        if r.name in seen:
            raise ConfigError(
                "trainer.engine",
                f"layer {r.name!r} is called twice in one forward pass (shared weights); "
                "use engine: func",
            )
        seen.add(r.name)
        if (r.a._version, r.out._version) != r.versions:
            raise ConfigError(
                "trainer.engine",
                f"the input or output of layer {r.name!r} is modified in place; "
                "make that operation out-of-place or use engine: func",
            )


def norm_affine_grads(lg: LayerGrads, r: LayerRecord, a: torch.Tensor, g: torch.Tensor) -> None:
    """GroupNorm / LayerNorm: per-sample ``Σ g ⊙ x̂`` (weight) and ``Σ g`` (bias)."""
    mod = r.module
    weight, bias = getattr(mod, "weight", None), getattr(mod, "bias", None)
    if isinstance(mod, nn.GroupNorm):
        reduce: tuple[int, ...] = tuple(range(2, a.ndim))
        if weight is not None and weight.requires_grad:
            lg.add(f"{r.name}.weight", group_norm_weight_grads(mod, a, g, r.stats, reduce))
    else:
        assert isinstance(mod, nn.LayerNorm)  # the covered types
        reduce = tuple(range(1, a.ndim - len(mod.normalized_shape)))
        xhat = F.layer_norm(a, mod.normalized_shape, None, None, mod.eps)
        if weight is not None and weight.requires_grad:
            lg.add(f"{r.name}.weight", (g * xhat).sum(reduce) if reduce else g * xhat)
    if bias is not None and bias.requires_grad:
        lg.add(f"{r.name}.bias", g.sum(reduce) if reduce else g)
