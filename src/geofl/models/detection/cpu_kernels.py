"""Pure-torch CPU kernels of torchvision's ``nms`` and ``roi_align`` (forward and backward).

Used by :mod:`geofl.models.detection.tvops` when torchvision's compiled ops do not load.
Each follows the arithmetic of its C++ kernel in ``torchvision/csrc/ops/cpu/`` (compared
with slow references in ``tests/models/detection/test_tvops.py``):

* :func:`nms_cpu` — the IoU matrix of the score-sorted boxes in one tensor expression, then
  the greedy pass over kept boxes only (one vectorised row OR per kept box);
* :func:`roi_align_cpu` — every output bin's bilinear samples as one sparse
  ``[K·PH·PW, B·H·W]`` matrix built without Python loops, applied to the feature map in one
  ``torch.sparse.mm``; RoIAlign is linear in its input, so :func:`roi_align_backward_cpu` is
  the transposed matrix times the output gradient.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["nms_cpu", "roi_align_backward_cpu", "roi_align_cpu"]


def nms_cpu(
    dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float, *, block: int = 1024
) -> torch.Tensor:
    """Greedy non-maximum suppression, as ``torchvision/csrc/ops/cpu/nms_kernel.cpp``.

    Boxes are visited by descending score (stable sort: ties keep input order); a box is
    dropped when its IoU with a kept, higher-ranked box is ``> iou_threshold``. IoU is
    ``inter / (area_i + area_j − inter)`` with ``area = (x2 − x1)(y2 − y1)``; a 0/0 (two
    degenerate boxes) compares false, so it suppresses nothing, like the C++ kernel.

    Args:
        dets: ``[N, 4]`` xyxy boxes.
        scores: ``[N]`` scores.
        iou_threshold: Suppression threshold.
        block: Rows of the ``[N, N]`` overlap matrix computed at once (bounds the float
            temporaries to ``block × N``; the boolean matrix itself is N² bytes).

    Returns:
        ``[K]`` int64 indices of kept boxes, by descending score.
    """
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    order = torch.sort(scores, descending=True, stable=True).indices
    b = dets[order]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    n = b.shape[0]
    later = np.zeros((n, n), dtype=bool)  # later[i, j]: j ranks below i and overlaps it
    for lo in range(0, n, block):
        r = b[lo : lo + block]
        lt = torch.maximum(r[:, None, :2], b[None, :, :2])
        rb = torch.minimum(r[:, None, 2:], b[None, :, 2:])
        wh = (rb - lt).clamp(min=0)
        inter = wh[..., 0] * wh[..., 1]
        over = (inter / (area[lo : lo + block, None] + area[None, :] - inter)) > iou_threshold
        later[lo : lo + block] = torch.triu(over, diagonal=lo + 1).numpy()
    removed = np.zeros(n, dtype=bool)
    keep = []
    for i in range(n):
        if not removed[i]:
            keep.append(i)
            removed |= later[i]
    return order[torch.as_tensor(keep, dtype=torch.long)]


def _sample_grid(
    rois: torch.Tensor,
    spatial_scale: float,
    ph: int,
    pw: int,
    sampling_ratio: int,
    aligned: bool,
) -> tuple[torch.Tensor, ...]:
    """The bilinear sample points of every bin: ``(y [K, PH, GH], x [K, PW, GW], ymask
    [K, GH], xmask [K, GW], count [K])`` — the grid per side is ``sampling_ratio`` or
    ``ceil(roi_size / pooled_size)`` (adaptive, per roi), padded to the largest; the masks
    mark the real samples, ``count`` is each bin's ``max(grid_h·grid_w, 1)``."""
    dt = rois.dtype
    k = rois.shape[0]
    off = 0.5 if aligned else 0.0
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
    return y, x, iy[None, :] < gh[:, None], ix[None, :] < gw[:, None], count


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
    y, x, ymask, xmask, count = _sample_grid(rois, spatial_scale, ph, pw, sampling_ratio, aligned)
    ylo, yhi, ly, yok = _axis(y, height, ymask[:, None, :])
    xlo, xhi, lx, xok = _axis(x, width, xmask[:, None, :])

    # Broadcast to [K, PH, PW, GH, GW]
    def yb(t: torch.Tensor) -> torch.Tensor:
        return t[:, :, None, :, None]

    def xb(t: torch.Tensor) -> torch.Tensor:
        return t[:, None, :, None, :]

    ok = (yb(yok) & xb(xok)).to(dt) / count[:, None, None, None, None]
    hy, hx = 1.0 - ly, 1.0 - lx
    base = rois[:, 0].long()[:, None, None, None, None] * (height * width)
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


def roi_align_backward_cpu(
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
