"""Per-sample tensor kernels of the book-keeping engine (:mod:`geofl.client.bookkeeping`).

Convolution patches, per-sample convolution weight gradients and their ghost norms, and
GroupNorm's per-sample affine gradients — each over a few samples at a time
(:func:`chunks`): on CPU, a kernel whose intermediate (patches, ``a − μ``) is formed for
the whole micro-batch writes tens of MB into fresh pages each step (a page fault costs
~4.5 µs on the VMs geofl is benchmarked on) and reads them back from memory, while a
cache-sized chunk is reused from the heap and read back from cache. Per-sample products
and reductions do not depend on how many samples share a call, so chunking changes no bit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CHUNK_BYTES",
    "chunks",
    "conv_ghost_norms",
    "group_norm_weight_grads",
    "patches",
    "per_sample_conv",
]

#: Bytes of patches (or of ``a − μ``) formed at once: a few samples, about twice a core's
#: L2 cache on the benchmark VM, so the product reads them from cache.
CHUNK_BYTES = 2 << 20


def chunks(b: int, bytes_per_sample: int) -> list[slice]:
    """Slices of ``b`` samples whose patches take about :data:`CHUNK_BYTES` each."""
    step = max(1, CHUNK_BYTES // max(bytes_per_sample, 1))
    return [slice(j, j + step) for j in range(0, b, step)]


def per_sample_conv(a: torch.Tensor, g3: torch.Tensor, mod: nn.Conv2d) -> torch.Tensor:
    """``[b, C_out, kh·kw·C_in]`` per-sample weight gradients ``g_iᵀ a_i`` of a convolution.

    Args:
        a: ``[b, C_in, H, W]`` the layer's input.
        g3: ``[b, T, C_out]`` its output gradient, positions flattened.

    The patches are formed and multiplied a few samples at a time (:func:`chunks`)
    instead of for the whole micro-batch: each chunk's patches are still in cache when the
    batched GEMM reads them, and no ``b·T·kh·kw·C_in`` buffer is allocated (on the first
    convolution of the small CNN that buffer is 30 MB; writing it into fresh pages cost
    more than the GEMM). Every sample's product is the same GEMM as in one call, so the
    result is bitwise that of one call.
    """
    b, t, c_out = g3.shape
    d_in = mod.kernel_size[0] * mod.kernel_size[1] * a.shape[1]
    per = torch.empty(b, c_out, d_in, dtype=g3.dtype)
    for s in chunks(b, t * d_in * g3.element_size()):
        torch.bmm(g3[s].transpose(1, 2), patches(a[s], mod), out=per[s])
    return per


def conv_ghost_norms(a: torch.Tensor, g3: torch.Tensor, mod: nn.Conv2d) -> torch.Tensor:
    """``[b]`` squared per-sample weight-gradient norms by the ghost norm, chunked.

    ``‖g_iᵀ a_i‖² = Σ_{t,t'} (a_t·a_t')(g_t·g_t')`` (Li et al. 2022), or ``‖a_i‖²‖g_i‖²`` for
    one position; the patches of a few samples at a time (:func:`chunks`).
    """
    b, t, _ = g3.shape
    if t == 1:
        p = patches(a, mod)
        return p.square().sum((1, 2)) * g3.square().sum((1, 2))
    sq = torch.empty(b, dtype=g3.dtype)
    d_in = mod.kernel_size[0] * mod.kernel_size[1] * a.shape[1]
    for s in chunks(b, t * d_in * g3.element_size()):
        p, gs = patches(a[s], mod), g3[s]
        gram = torch.bmm(p, p.transpose(1, 2)) * torch.bmm(gs, gs.transpose(1, 2))
        torch.sum(gram, (1, 2), out=sq[s])
    return sq


def patches(x: torch.Tensor, mod: nn.Conv2d) -> torch.Tensor:
    """``[b, T, kh·kw·C]`` patches of a convolution's input, channels last (one strided copy).

    Equal to ``F.unfold`` up to the order of a patch's entries (kh, kw, C here), which
    keeps every patch row a run of contiguous channels: many times faster than ``unfold``
    on CPU.
    """
    ph, pw = (int(v) for v in mod.padding)  # a tuple: the engine refuses "same"/"valid"
    (sh, sw), (dh, dw), (kh, kw) = mod.stride, mod.dilation, mod.kernel_size
    xp = F.pad(x, (pw, pw, ph, ph)) if ph or pw else x
    xp = xp.contiguous(memory_format=torch.channels_last)
    b, c, hp, wp = xp.shape
    ho, wo = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    s_b, s_c, s_h, s_w = xp.stride()
    view = xp.as_strided((b, ho, wo, kh, kw, c), (s_b, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c))
    return view.reshape(b, ho * wo, kh * kw * c)


def group_norm_weight_grads(
    mod: nn.GroupNorm,
    a: torch.Tensor,
    g: torch.Tensor,
    stats: tuple[torch.Tensor, torch.Tensor] | None,
    reduce: tuple[int, ...],
) -> torch.Tensor:
    """``[b, C]`` per-sample ``Σ_t g ⊙ x̂`` with ``x̂ = (a − μ)·rstd``.

    μ and rstd are the statistics GroupNorm saved for its backward pass (no second pass over
    ``a`` for them); ``a − μ`` is formed before the product, so a large common offset does
    not cancel digits. Without them (another autograd layout), ``x̂`` is recomputed.
    """
    if stats is None:
        return (g * F.group_norm(a, mod.num_groups, None, None, mod.eps)).sum(reduce)
    b, c = a.shape[:2]
    mu, rs = (t.reshape(b, -1).repeat_interleave(c // mod.num_groups, dim=1) for t in stats)
    mu = mu.reshape(b, c, *([1] * (a.ndim - 2)))
    out = torch.empty(b, c, dtype=g.dtype)
    for s in chunks(b, a.numel() // max(b, 1) * a.element_size()):  # a cache-sized a − μ at a time
        torch.sum((a[s] - mu[s]).mul_(g[s]), reduce, out=out[s])
    return out * rs
