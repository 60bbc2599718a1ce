"""Book-keeping per-sample clipping: one forward, one backward (001 Eq. 14, 16).

The ``bk`` engine of DP-SGD computes the clipped sum ``Σ_i min(1, C/‖g_i‖) g_i`` without a
per-sample backward pass (Bu et al. 2023, "Differentially private optimization on large
model at small cost", BK): one ordinary forward pass records each layer's input ``a``, one
backward pass of the summed loss gives each layer's output gradient ``g`` (only those: the
weight gradients of that pass are never formed), and every parameter gradient is a known
contraction of the two. Per layer with ``T`` positions per sample (pixels of a convolution's
output, tokens, or 1 for a linear layer on ``[b, d_in]``), inputs ``a_i ∈ R^{T×d_in}`` (for a
convolution, its unfolded patches) and output gradients ``g_i ∈ R^{T×d_out}``:

* the per-sample weight gradient is ``G_i = g_iᵀ a_i`` (``[d_out, d_in]``), so
* its squared norm is either read off the materialised ``G_i`` (``b·T·d_in·d_out``
  multiply-adds, memory ``b·d_in·d_out``) or, by the **ghost norm** (Goodfellow 2015;
  Li et al. 2022; Lee & Kifer 2021), ``‖G_i‖² = Σ_{t,t'} (a_t·a_t')(g_t·g_t')`` from two
  ``T×T`` Gram matrices (``b·T²·(d_in + d_out)``, memory ``b·T²``), which for ``T = 1`` is
  ``‖a_i‖²‖g_i‖²``;
* the clipped sum is ``Σ_i c_i G_i`` — of the materialised ``G_i``, or for a ghost layer
  one matrix product ``gᵀ diag(c) a`` over the whole batch (BK's book-kept gradient; for a
  convolution, the weight-gradient convolution of ``c``-scaled output gradients).

Rule per layer (BK's hybrid: per layer, the cheaper of ghost norm and instantiation). Both
paths are compared by what they add to a plain step, which computes the weight gradient
``T·d_in·d_out`` per sample with oneDNN's weight-gradient convolution. The ghost path keeps
that kernel for its product and adds the Gram products, ``T²(d_in + d_out)``; the
materialised path replaces it by batched GEMMs of the same ``T·d_in·d_out``, which run
slower per multiply-add on CPU, patch copies included (MKL against oneDNN; measured on the
small CNN's convolutions, see ``benchmarks/README.md``) and add a pass over
``b·d_in·d_out`` — so it adds about ``T·d_in·d_out``. A layer is therefore **ghost** when
``T(d_in + d_out) < d_in·d_out`` (few positions, wide layer: linear layers, late
convolution stages) and **materialised** otherwise (early convolutions with many pixels).
Extra memory per micro-batch of ``b``: ``b·d_in·d_out`` for a materialised layer, ``b·T²``
(smaller, by the rule) for a ghost one — at most what the per-sample gradients of the
``func`` engine take, so micro-batches bound it. On CPU the materialised products run as
batched GEMMs (``torch.bmm``, MKL), the ghost products as oneDNN weight-gradient
convolutions; patches are a strided channels-last copy (not ``F.unfold``, several times
slower on CPU) of a few samples at a time (:mod:`geofl.client.bk_kernels`), so they are
read back from cache and never take more than a few MB.

Every layer is processed inside the backward pass, as soon as its output gradient exists
(a hook, :class:`~geofl.client.bk_grads.GradTap`): the gradient is still in cache, and the
backward pass frees each layer's output gradient and input as a plain one does instead of
holding all of them to its end (a peak that, on the small CNN, grew the heap by ~30 MB of
freshly faulted pages per step). The squared norms are summed in forward order after the pass.

The summed loss is the task's mean loss times ``b`` (as for the ``opacus`` engine), so the
task loss must be a mean over samples — every geofl task's is. The result equals the
per-example loop up to float rounding (tests: to 1e-6 on the small CNN and the MLP); it
differs from the ``func`` engine's in the last bits only.

Biases and the affine parameters of GroupNorm/LayerNorm have cheap per-sample gradients
(``Σ_t g`` and ``Σ_t g ⊙ x̂`` with ``x̂`` the normalised input, from ``a`` and the statistics
GroupNorm saved, or recomputed for LayerNorm); they are always materialised. Layers
covered: ``nn.Linear``, ``nn.Conv2d`` (zero padding, one group), ``nn.GroupNorm``,
``nn.LayerNorm``. Any other module that owns a trainable parameter, a layer called twice in
one forward pass (shared weights) or an output modified in place is refused with an error
that names the layer; ``engine: func`` handles them. The engine turns off ``inplace`` on
ReLU-type activations of the model it is given (their in-place write would overwrite a
recorded layer output).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from geofl.client.bk_grads import (
    GradTap,
    LayerGrads,
    LayerRecord,
    ParamGrads,
    check_records,
    norm_affine_grads,
)
from geofl.client.bk_kernels import conv_ghost_norms, per_sample_conv
from geofl.errors import ConfigError

__all__ = ["BookKeepingEngine", "ghost_is_cheaper"]

LossFn = Callable[[torch.Tensor, Any], torch.Tensor]

#: Norms below this are treated as zero when forming ``C/‖g‖`` (as ``clip_and_sum``).
_TINY = 1e-12
_RELEASED = torch.empty(0)  # what a processed layer's record points at
_SUPPORTED = (nn.Linear, nn.Conv2d, nn.GroupNorm, nn.LayerNorm)
_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.Hardtanh, nn.SiLU)


def ghost_is_cheaper(positions: int, d_in: int, d_out: int) -> bool:
    """The per-layer rule: ghost norm iff ``T·(d_in + d_out) < d_in·d_out``."""
    return positions * (d_in + d_out) < d_in * d_out


class BookKeepingEngine:
    """Clipped per-sample gradient sums from one forward and one backward pass (BK).

    Args:
        model: The network; every module owning a trainable parameter must be covered.
        loss: ``loss(output, targets)`` → mean loss of a batch (a task's loss).
        force: ``"ghost"`` or ``"materialise"`` for every layer (tests); None: the rule.

    Raises:
        ConfigError: ``trainer.engine`` — a layer with no book-keeping rule.
    """

    def __init__(self, model: nn.Module, loss: LossFn, force: str | None = None) -> None:
        self.model, self.loss, self.force = model, loss, force
        self.layers: dict[nn.Module, str] = {}
        for name, mod in model.named_modules():
            if not any(p.requires_grad for p in mod.parameters(recurse=False)):
                continue
            if type(mod) not in _SUPPORTED or not _plain_conv(mod):
                raise ConfigError(
                    "trainer.engine",
                    f"layer {name!r} ({type(mod).__name__}) has no book-keeping rule "
                    "(bk covers Linear, Conv2d with zero padding and one group, GroupNorm, "
                    "LayerNorm); use engine: func",
                )
            self.layers[mod] = name
        for mod in model.modules():  # an in-place activation would overwrite a recorded output
            if isinstance(mod, _ACTIVATIONS) and getattr(mod, "inplace", False):
                mod.inplace = False
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]

    def clipped_sum(
        self, x: torch.Tensor, y: Any, clip: float, out: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, float]:
        """Add ``Σ_i min(1, C/‖g_i‖) g_i`` into ``out`` (001 Eq. 14, 16's sum).

        Args:
            x: ``[b, …]`` inputs of one micro-batch.
            y: Their targets.
            clip: C > 0.
            out: ``{name: [*shape]}`` accumulators (views of the flat gradient), added to.

        Returns:
            ``([b] per-sample norms before clipping, summed loss of the b samples)``.
        """
        b = x.shape[0]
        if b == 0:
            return torch.zeros(0), 0.0
        lg, total = self._layer_grads(x, y)
        with torch.no_grad():
            norms = lg.norms(b)
            factors = (clip / norms.clamp_min(_TINY)).clamp(max=1.0).to(torch.float32)
            for name, pg in lg.params.items():
                out[name].add_(pg.clipped_sum(factors))
        return norms.to(torch.float32), total

    def __call__(self, x: torch.Tensor, y: Any) -> tuple[dict[str, torch.Tensor], float]:
        """``({name: [b, *shape]}, summed loss)``: every per-sample gradient materialised."""
        saved, self.force = self.force, "materialise"
        try:
            lg, total = self._layer_grads(x, y)
        finally:
            self.force = saved
        named = dict(self.model.named_parameters())
        grads = {n: torch.zeros((x.shape[0], *named[n].shape)) for n in self.names}
        for name, pg in lg.params.items():  # a layer not reached keeps zero gradients
            assert pg.per is not None  # materialised by force
            grads[name] = pg.layout(pg.per)
        return grads, total

    def _layer_grads(self, x: torch.Tensor, y: Any) -> tuple[LayerGrads, float]:
        """One forward pass recording the covered layers, one backward pass to their outputs.

        Each layer is processed by its rule inside the backward pass, as soon as its output
        gradient ``g`` exists (:class:`GradTap`): ``g`` is still in cache, and neither ``g``
        nor the layer's input is held past that point (a ghost layer keeps both for its
        product) — the backward pass frees them as a plain one does, instead of every
        layer's output gradient living until the pass ends. The squared norms are kept per
        layer and summed in forward order, as if the layers were processed after the pass.
        """
        records: list[LayerRecord] = []
        done: dict[int, LayerGrads] = {}
        anchor = torch.zeros((), requires_grad=True)  # every tap points at it

        def process(i: int, g: torch.Tensor) -> None:
            r, lg = records[i], LayerGrads()
            self._rule(lg, r, g)
            done[i] = lg
            r.a = r.out = _RELEASED  # the layer's tensors are no longer needed here

        def hook(mod: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
            if not args or not isinstance(output, torch.Tensor):
                raise ConfigError(
                    "trainer.engine",
                    f"layer {self.layers[mod]!r} is not called on one positional tensor; "
                    "use engine: func",
                )
            stats = _saved_stats(output) if isinstance(mod, nn.GroupNorm) else None
            i = len(records)
            output = GradTap.apply(output, anchor, lambda g: process(i, g))  # type: ignore[no-untyped-call]
            a = args[0]
            versions = (a._version, output._version)
            records.append(LayerRecord(self.layers[mod], mod, a, output, versions, stats))
            return output

        handles = [mod.register_forward_hook(hook) for mod in self.layers]
        try:
            total = self.loss(self.model(x), y) * x.shape[0]
        finally:
            for h in handles:
                h.remove()
        try:
            check_records(records)
            torch.autograd.grad(total, [anchor], allow_unused=True)
        finally:  # a record's output leads to its tap, whose callback holds ``records``
            records.clear()
        lg = LayerGrads()
        for i in sorted(done):  # forward order
            lg.sq += done[i].sq
            lg.params.update(done[i].params)
        return lg, float(total.detach())

    def _rule(self, lg: LayerGrads, r: LayerRecord, g: torch.Tensor) -> None:
        mod, a = r.module, r.a.detach()
        if isinstance(mod, nn.Conv2d):
            self._conv(lg, r.name, mod, a, g)
        elif isinstance(mod, nn.Linear):
            self._linear(lg, r.name, mod, a, g)
        else:
            norm_affine_grads(lg, r, a, g)

    def _ghost(self, positions: int, d_in: int, d_out: int) -> bool:
        if self.force is not None:
            return self.force == "ghost"
        return ghost_is_cheaper(positions, d_in, d_out)

    def _linear(
        self, lg: LayerGrads, name: str, mod: nn.Linear, a: torch.Tensor, g: torch.Tensor
    ) -> None:
        """``a``: ``[b, …, d_in]``, ``g``: ``[b, …, d_out]`` (the middle axes are positions)."""
        b = a.shape[0]
        a3, g3 = a.reshape(b, -1, a.shape[-1]), g.reshape(b, -1, g.shape[-1])

        def product(c: torch.Tensor) -> torch.Tensor:  # Σ_i c_i g_iᵀ a_i: [d_out, d_in]
            gs = (g3 * c[:, None, None]).reshape(-1, g3.shape[-1])
            return gs.T @ a3.reshape(-1, a3.shape[-1])

        self._weight_and_bias(lg, name, mod, a3, g3, product, lambda t: t)

    def _conv(
        self, lg: LayerGrads, name: str, mod: nn.Conv2d, a: torch.Tensor, g: torch.Tensor
    ) -> None:
        """Patches ``[b, T, kh·kw·C_in]`` (channels last) against ``g`` as ``[b, T, C_out]``.

        Both rules form the patches a few samples at a time (:mod:`~geofl.client.bk_kernels`).
        """
        b, c_out = g.shape[:2]
        kh, kw = mod.kernel_size
        g3 = g.permute(0, 2, 3, 1).reshape(b, -1, c_out)
        t, d_in = g3.shape[1], kh * kw * a.shape[1]
        if mod.weight.requires_grad and self._ghost(t, d_in, c_out):

            def product(c: torch.Tensor) -> torch.Tensor:  # the weight-gradient convolution
                grads: tuple[torch.Tensor, ...] = torch.ops.aten.convolution_backward(
                    g * c[:, None, None, None],
                    a,
                    mod.weight,
                    None,
                    mod.stride,
                    mod.padding,
                    mod.dilation,
                    False,
                    [0, 0],
                    1,
                    [False, True, False],
                )
                return grads[1]

            lg.sq.append(conv_ghost_norms(a, g3, mod))
            lg.params[f"{name}.weight"] = ParamGrads(product=product)
        elif mod.weight.requires_grad:

            def layout(t: torch.Tensor) -> torch.Tensor:  # [.., C_out, kh·kw·C_in] → weight's
                return t.reshape(*t.shape[:-1], kh, kw, -1).movedim(-1, -3)

            lg.add(f"{name}.weight", per_sample_conv(a, g3, mod), layout=layout)
        if mod.bias is not None and mod.bias.requires_grad:
            lg.add(f"{name}.bias", g3.sum(1))

    def _weight_and_bias(
        self,
        lg: LayerGrads,
        name: str,
        mod: nn.Linear | nn.Conv2d,
        a: torch.Tensor,
        g: torch.Tensor,
        product: Callable[[torch.Tensor], torch.Tensor],
        layout: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        """Weight (``a``: ``[b, T, d_in]``, ``g``: ``[b, T, d_out]``) and bias of one layer."""
        t, d_in = a.shape[1:]
        if mod.weight.requires_grad:
            if not self._ghost(t, d_in, g.shape[2]):
                lg.add(f"{name}.weight", torch.bmm(g.transpose(1, 2), a), layout=layout)
            else:
                if t == 1:  # ‖g aᵀ‖² = ‖a‖²‖g‖²
                    sq = a.square().sum((1, 2)) * g.square().sum((1, 2))
                else:  # Σ_{t,t'} (a_t·a_t')(g_t·g_t')
                    sq = (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum(
                        (1, 2)
                    )
                lg.sq.append(sq)
                lg.params[f"{name}.weight"] = ParamGrads(product=product)
        if mod.bias is not None and mod.bias.requires_grad:
            lg.add(f"{name}.bias", g.sum(1))


def _plain_conv(mod: nn.Module) -> bool:
    if not isinstance(mod, nn.Conv2d):
        return True
    return mod.groups == 1 and mod.padding_mode == "zeros" and isinstance(mod.padding, tuple)


def _saved_stats(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """GroupNorm's ``(μ, rstd)`` (``[b, groups]``) from its output's autograd node, or None.

    Detached: a saved output read back from Python holds the node that saved it, and that
    node's edges lead through the previous layer's tap to its callback, whose closure holds
    the records (these statistics among them) and the engine's model — a cycle through C++
    autograd nodes that Python's collector cannot see, so every step's records, gradients
    and model stayed alive to the end of the process (issue 35: +300 MB per one-round DP
    method of the 001 rows, growing with every step).
    """
    node = out.grad_fn
    mean, rstd = getattr(node, "_saved_result1", None), getattr(node, "_saved_result2", None)
    if isinstance(mean, torch.Tensor) and isinstance(rstd, torch.Tensor):
        return mean.detach(), rstd.detach()
    return None
