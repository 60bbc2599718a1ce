"""torchvision's detection operators on a CPU-only torch, when its compiled ops cannot load.

Why this exists. The venv pins ``torch==2.13.0+cpu``; PyPI's ``torchvision==0.28.0`` wheel
for Linux is built against the CUDA torch, so its extension cannot be loaded beside the
CPU build::

    $ ldd .venv/lib/python3.*/site-packages/torchvision/_C.so | grep 'not found'
        libc10.so => not found        libtorch_cpu.so => not found
        libtorch.so => not found      libtorch_python.so => not found
        libc10_cuda.so => not found   libtorch_cuda.so => not found

``torchvision.extension`` swallows that failure, then ``torchvision/_meta_registrations.py``
calls ``torch.library.register_fake("torchvision::nms")`` for an operator nobody defined,
and ``import torchvision`` dies with ``RuntimeError: operator torchvision::nms does not
exist``. A torch installed from PyPI's default index (CUDA build) loads ``_C`` and needs
none of this; :func:`ensure_torchvision_ops` is then a no-op.

What it does, only when ``torchvision/_C*.so`` is absent or ``torch.ops.load_library``
refuses it (probed without importing torchvision):

1. defines every ``torchvision::`` operator schema of torchvision 0.28 (the strings below
   are those of ``torchvision/csrc/ops/*.cpp``, as they appear in ``strings _C.so``);
2. registers pure-torch CPU kernels for the two operators torchvision's detectors call:
   ``nms`` (exact greedy NMS; RetinaNet/FCOS/SSD post-processing, the RPN of Faster R-CNN)
   and ``roi_align`` with ``_roi_align_backward`` and autograd (Faster R-CNN's
   ``MultiScaleRoIAlign``), bit-for-bit the arithmetic of ``roi_align_kernel.cpp``;
3. the other operators (``roi_pool``, ``ps_roi_*``, ``deform_conv2d``, quantised ops,
   ``box_iou_rotated``) get a kernel raising :class:`NotImplementedError` naming the fix;
4. imports torchvision and marks its ops available (``torchvision.extension._has_ops``),
   so that ``torchvision.ops.nms``/``roi_align`` dispatch to the kernels of step 2.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "SCHEMAS",
    "ensure_torchvision_ops",
    "nms_cpu",
    "roi_align_cpu",
    "torchvision_ops_native",
]

log = logging.getLogger("geofl")

#: torchvision 0.28 operator schemas (``csrc/ops/*.cpp``; ``strings torchvision/_C.so``).
SCHEMAS: tuple[str, ...] = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, "
    "float rois_scale, int rois_zero_point, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width) -> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, "
    "float spatial_scale, SymInt pooled_height, SymInt pooled_width, SymInt batch_size, "
    "SymInt channels, SymInt height, SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, "
    "Tensor mask, Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, "
    "SymInt dilation_h, SymInt dilation_w, SymInt groups, SymInt offset_groups, "
    "bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "box_iou_rotated(Tensor boxes1, Tensor boxes2) -> Tensor",
)

_state: dict[str, Any] = {"done": False, "native": None, "libs": []}
# torch.library and torch.ops are untyped; the typed names keep mypy strict elsewhere.
_LIBRARY: Any = torch.library.Library
_TORCH_OPS: Any = torch.ops


def torchvision_ops_native() -> bool:
    """Whether torchvision's compiled ``_C`` extension loads beside this torch.

    Probed with :func:`importlib.util.find_spec` and ``torch.ops.load_library`` on the file,
    without importing torchvision (whose import fails when ``_C`` does not load).
    """
    if _state["native"] is None:
        _state["native"] = _probe_native()
    return bool(_state["native"])


def _probe_native() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        for lib in sorted(Path(folder).glob("_C*.so")) + sorted(Path(folder).glob("_C*.pyd")):
            try:
                _TORCH_OPS.load_library(str(lib))
            except (OSError, RuntimeError) as err:
                log.debug("torchvision _C does not load (%s); using geofl's CPU ops", err)
                return False
            return True
    return False


def ensure_torchvision_ops() -> None:
    """Make ``import torchvision`` and its detection operators work (idempotent).

    With a loadable ``_C`` this only imports torchvision. Otherwise it defines the operator
    schemas, registers the CPU kernels of this module, imports torchvision and marks its
    ops available (module docstring).
    """
    if _state["done"]:
        return
    if not torchvision_ops_native():
        _register_fallback()
    import torchvision.extension

    if not torchvision_ops_native():
        # ``torchvision.ops.roi_align`` is the function; its module is in sys.modules.
        tv_roi_align = sys.modules["torchvision.ops.roi_align"]
        # ``_assert_has_ops`` reads the extension module's ``_has_ops``; ``roi_align`` bound
        # its own copy at import (without ops it would torch.compile a Python fallback).
        torchvision.extension._has_ops = _available
        tv_roi_align._has_ops = _available  # type: ignore[attr-defined]
    _state["done"] = True


def _available() -> bool:
    return True


def _register_fallback() -> None:
    lib = _LIBRARY("torchvision", "DEF")
    for schema in SCHEMAS:
        lib.define(schema)
    impl = _LIBRARY("torchvision", "IMPL")
    impl.impl("nms", nms_cpu, "CPU")
    impl.impl("roi_align", _roi_align_op, "CPU")
    impl.impl("_roi_align_backward", _roi_align_backward_op, "CPU")
    for schema in SCHEMAS:
        name = schema.split("(", 1)[0]
        if name not in ("nms", "roi_align", "_roi_align_backward"):
            impl.impl(name, _unavailable(name), "CPU")
    torch.library.register_autograd(
        "torchvision::roi_align", _roi_align_grad, setup_context=_roi_align_setup
    )
    _state["libs"] = [lib, impl]  # a Library deregisters its ops when collected


def _unavailable(name: str) -> Any:
    def kernel(*args: Any) -> Any:
        raise NotImplementedError(
            f"torchvision::{name} has no CPU kernel here: torchvision's compiled ops do not "
            "load beside this torch build (see geofl.models.detection.tvops); install a "
            "torch/torchvision pair built together to use it"
        )

    return kernel


def nms_cpu(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression, as ``torchvision/csrc/ops/cpu/nms_kernel.cpp``.

    Boxes are visited by descending score (stable sort: ties keep input order); a box is
    dropped when its IoU with a kept, higher-ranked box is ``> iou_threshold``. IoU is
    ``inter / (area_i + area_j − inter)`` with ``area = (x2 − x1)(y2 − y1)``; a 0/0 (two
    degenerate boxes) compares false, so it suppresses nothing, like the C++ kernel.

    Args:
        dets: ``[N, 4]`` xyxy boxes.
        scores: ``[N]`` scores.
        iou_threshold: Suppression threshold.

    Returns:
        ``[K]`` int64 indices of kept boxes, by descending score.
    """
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    order = torch.sort(scores, descending=True, stable=True).indices
    b = dets[order]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.maximum(b[:, None, :2], b[None, :, :2])
    rb = torch.minimum(b[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    over = (inter / (area[:, None] + area[None, :] - inter)) > iou_threshold
    later = torch.triu(over, diagonal=1).numpy()  # only lower-ranked boxes are suppressed
    n = later.shape[0]
    removed = np.zeros(n, dtype=bool)
    keep = []
    for i in range(n):
        if not removed[i]:
            keep.append(i)
            removed |= later[i]
    return order[torch.as_tensor(keep, dtype=torch.long)]


def _sample_plan(
    rois: torch.Tensor,
    spatial_scale: float,
    ph: int,
    pw: int,
    sampling_ratio: int,
    aligned: bool,
    height: int,
    width: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where each output bin reads the input, as a sparse ``[K·PH·PW, B·H·W]`` matrix.

    Follows ``roi_align_kernel.cpp``: the bin grid is ``sampling_ratio`` per side, or
    ``ceil(roi_size / pooled_size)`` (adaptive, per roi); samples outside ``[-1, H]`` /
    ``[-1, W]`` contribute 0; coordinates are clamped into the map and interpolated
    bilinearly from four pixels; each bin averages its ``max(grid_h·grid_w, 1)`` samples.

    Returns:
        ``(rows, cols, weights)``: COO entries (duplicates add up).
    """
    dt = rois.dtype
    k = rois.shape[0]
    off = 0.5 if aligned else 0.0
    batch = rois[:, 0].long()
    x0, y0 = rois[:, 1] * spatial_scale - off, rois[:, 2] * spatial_scale - off
    rw = rois[:, 3] * spatial_scale - off - x0
    rh = rois[:, 4] * spatial_scale - off - y0
    if not aligned:
        rw, rh = rw.clamp(min=1.0), rh.clamp(min=1.0)
    if sampling_ratio > 0:
        gh = torch.full((k,), sampling_ratio, dtype=torch.long)
        gw = gh.clone()
    else:
        gh, gw = torch.ceil(rh / ph).long(), torch.ceil(rw / pw).long()
    gmax_h = max(int(gh.max()), 1) if k else 1
    gmax_w = max(int(gw.max()), 1) if k else 1
    count = (gh * gw).clamp(min=1).to(dt)
    iy = torch.arange(gmax_h, dtype=dt)
    ix = torch.arange(gmax_w, dtype=dt)
    bh, bw = rh / ph, rw / pw
    # y: [K, PH, GH], x: [K, PW, GW]
    y = (
        y0[:, None, None]
        + torch.arange(ph, dtype=dt)[None, :, None] * bh[:, None, None]
        + (iy[None, None, :] + 0.5) * (bh / gh.clamp(min=1).to(dt))[:, None, None]
    )
    x = (
        x0[:, None, None]
        + torch.arange(pw, dtype=dt)[None, :, None] * bw[:, None, None]
        + (ix[None, None, :] + 0.5) * (bw / gw.clamp(min=1).to(dt))[:, None, None]
    )
    ymask = iy[None, :] < gh[:, None]  # [K, GH]
    xmask = ix[None, :] < gw[:, None]
    ylo, yhi, ly, yok = _axis(y, height, ymask[:, None, :])
    xlo, xhi, lx, xok = _axis(x, width, xmask[:, None, :])

    # Broadcast to [K, PH, PW, GH, GW]
    def yb(t: torch.Tensor) -> torch.Tensor:
        return t[:, :, None, :, None]

    def xb(t: torch.Tensor) -> torch.Tensor:
        return t[:, None, :, None, :]

    ok = (yb(yok) & xb(xok)).to(dt) / count[:, None, None, None, None]
    hy, hx = 1.0 - ly, 1.0 - lx
    base = batch[:, None, None, None, None] * (height * width)
    cols = torch.stack(
        [
            base + yb(ylo) * width + xb(xlo),
            base + yb(ylo) * width + xb(xhi),
            base + yb(yhi) * width + xb(xlo),
            base + yb(yhi) * width + xb(xhi),
        ],
        dim=-1,
    )
    w = (
        torch.stack([yb(hy) * xb(hx), yb(hy) * xb(lx), yb(ly) * xb(hx), yb(ly) * xb(lx)], dim=-1)
        * ok[..., None]
    )
    rows = torch.arange(k * ph * pw).view(k, ph, pw, 1, 1, 1).expand_as(cols)
    return rows.reshape(-1), cols.reshape(-1), w.reshape(-1)


def _axis(
    v: torch.Tensor, size: int, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Low/high pixel, fractional weight and validity of sample coordinates along one axis
    (``bilinear_interpolate`` of ``roi_align_kernel.cpp``)."""
    ok = (v >= -1.0) & (v <= size) & mask
    v = v.clamp(min=0.0)
    lo = v.long()
    at_edge = lo >= size - 1
    lo = torch.where(at_edge, torch.full_like(lo, size - 1), lo)
    hi = torch.where(at_edge, lo, lo + 1)
    v = torch.where(at_edge, lo.to(v.dtype), v)
    return lo, hi, v - lo.to(v.dtype), ok


def _plan_matrix(
    rois: torch.Tensor,
    spatial_scale: float,
    ph: int,
    pw: int,
    sampling_ratio: int,
    aligned: bool,
    batch: int,
    height: int,
    width: int,
    *,
    transpose: bool = False,
) -> torch.Tensor:
    rows, cols, w = _sample_plan(
        rois, spatial_scale, ph, pw, sampling_ratio, aligned, height, width
    )
    shape = (rois.shape[0] * ph * pw, batch * height * width)
    idx = torch.stack([cols, rows]) if transpose else torch.stack([rows, cols])
    size = shape[::-1] if transpose else shape
    return torch.sparse_coo_tensor(idx, w, size, check_invariants=False)


def roi_align_cpu(
    input: torch.Tensor,
    rois: torch.Tensor,
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    sampling_ratio: int,
    aligned: bool,
) -> torch.Tensor:
    """RoIAlign (He et al. 2017) as ``roi_align_kernel.cpp``, as one sparse matrix product.

    Args:
        input: ``[B, C, H, W]`` feature map.
        rois: ``[K, 5]`` (batch index, x1, y1, x2, y2) in input-image coordinates.
        spatial_scale: Feature-map pixels per image pixel.
        pooled_height: PH.
        pooled_width: PW.
        sampling_ratio: Samples per bin side (``<= 0``: adaptive, ``ceil(roi / pooled)``).
        aligned: Shift by half a pixel (Detectron2's ``ROIAlignV2``).

    Returns:
        ``[K, C, PH, PW]``.
    """
    b, c, h, w = input.shape
    k = rois.shape[0]
    if k == 0:
        return input.new_zeros((0, c, pooled_height, pooled_width))
    m = _plan_matrix(
        rois.to(input.dtype),
        spatial_scale,
        pooled_height,
        pooled_width,
        sampling_ratio,
        aligned,
        b,
        h,
        w,
    )
    x = input.permute(0, 2, 3, 1).reshape(b * h * w, c)
    out: torch.Tensor = torch.sparse.mm(m, x)  # [K·PH·PW, C]
    return out.view(k, pooled_height, pooled_width, c).permute(0, 3, 1, 2).contiguous()


def _roi_align_op(
    input: torch.Tensor,
    rois: torch.Tensor,
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    sampling_ratio: int,
    aligned: bool,
) -> torch.Tensor:
    return roi_align_cpu(
        input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned
    )


def _roi_align_backward_op(
    grad: torch.Tensor,
    rois: torch.Tensor,
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    batch_size: int,
    channels: int,
    height: int,
    width: int,
    sampling_ratio: int,
    aligned: bool,
) -> torch.Tensor:
    """∂L/∂input of :func:`roi_align_cpu`: the transposed sampling matrix times the
    output gradient (RoIAlign is linear in its input)."""
    k = rois.shape[0]
    if k == 0:
        return grad.new_zeros((batch_size, channels, height, width))
    mt = _plan_matrix(
        rois.to(grad.dtype),
        spatial_scale,
        pooled_height,
        pooled_width,
        sampling_ratio,
        aligned,
        batch_size,
        height,
        width,
        transpose=True,
    )
    g = grad.permute(0, 2, 3, 1).reshape(k * pooled_height * pooled_width, channels)
    out: torch.Tensor = torch.sparse.mm(mt, g)  # [B·H·W, C]
    return out.view(batch_size, height, width, channels).permute(0, 3, 1, 2).contiguous()


def _roi_align_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    inp, rois, scale, ph, pw, ratio, aligned = inputs
    ctx.save_for_backward(rois)
    ctx.args = (tuple(inp.shape), scale, ph, pw, ratio, aligned)


def _roi_align_grad(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:
    (rois,) = ctx.saved_tensors
    (b, c, h, w), scale, ph, pw, ratio, aligned = ctx.args
    grad_input = torch.ops.torchvision._roi_align_backward(
        grad_output.contiguous(), rois, scale, ph, pw, b, c, h, w, ratio, aligned
    )
    return grad_input, None, None, None, None, None, None
