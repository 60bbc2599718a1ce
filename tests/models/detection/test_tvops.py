"""geofl's CPU kernels for torchvision's ``nms`` and ``roi_align`` against slow references.

The references are written from the C++ kernels' definitions (greedy NMS; bilinear RoIAlign
per sample, per bin, per roi) with plain Python loops.
"""

from __future__ import annotations

import math

import pytest
import torch

from geofl.models.detection.cpu_kernels import nms_cpu, roi_align_cpu
from geofl.models.detection.tvops import ensure_torchvision_ops

ensure_torchvision_ops()


def greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, thr: float) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    keep: list[int] = []
    for i in order:
        ok = True
        for j in keep:
            a, b = boxes[i].tolist(), boxes[j].tolist()
            iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
            ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            inter = iw * ih
            union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
            if union > 0 and inter / union > thr:
                ok = False
                break
        if ok:
            keep.append(i)
    return keep


def _random_boxes(g: torch.Generator, n: int) -> torch.Tensor:
    xy = torch.rand(n, 2, generator=g) * 50
    wh = torch.rand(n, 2, generator=g) * 20 + 1
    return torch.cat([xy, xy + wh], dim=1)


@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_matches_greedy_reference(thr: float) -> None:
    g = torch.Generator().manual_seed(0)
    boxes = _random_boxes(g, 200)
    scores = torch.rand(200, generator=g)
    want = greedy_nms(boxes, scores, thr)
    assert nms_cpu(boxes, scores, thr).tolist() == want
    assert nms_cpu(boxes, scores, thr, block=7).tolist() == want  # row blocks of the matrix


def test_nms_ties_and_identical_boxes() -> None:
    box = torch.tensor([0.0, 0.0, 10.0, 10.0])
    boxes = torch.stack([box, box, box + 20, box, box + 20])
    scores = torch.tensor([0.5, 0.9, 0.9, 0.9, 0.1])
    # Ties keep input order: 1 (first 0.9), 2 (other place), then 3 is box 1's twin.
    assert nms_cpu(boxes, scores, 0.5).tolist() == [1, 2]
    assert greedy_nms(boxes, scores, 0.5) == [1, 2]
    # Identical boxes with IoU 1 are never suppressed at threshold 1 (IoU > thr is strict).
    assert nms_cpu(boxes, scores, 1.0).tolist() == [1, 2, 3, 0, 4]


def test_nms_empty_and_through_torchvision() -> None:
    import torchvision

    empty = torchvision.ops.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)
    assert empty.dtype == torch.int64 and empty.numel() == 0
    g = torch.Generator().manual_seed(1)
    boxes, scores = _random_boxes(g, 50), torch.rand(50, generator=g)
    idx = torch.randint(0, 3, (50,), generator=g)
    kept = torchvision.ops.batched_nms(boxes, scores, idx, 0.4)
    want = []
    for c in range(3):
        sel = (idx == c).nonzero().flatten()
        want += [int(sel[i]) for i in greedy_nms(boxes[sel], scores[sel], 0.4)]
    assert sorted(kept.tolist()) == sorted(want)


def ref_roi_align(inp, rois, scale, ph, pw, ratio, aligned):  # type: ignore[no-untyped-def]
    """Per-roi, per-bin, per-sample bilinear RoIAlign (``roi_align_kernel.cpp``)."""
    _, c, h, w = inp.shape
    out = torch.zeros(rois.shape[0], c, ph, pw, dtype=inp.dtype)
    off = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois.tolist()):
        sx, sy = x1 * scale - off, y1 * scale - off
        rw, rh = x2 * scale - off - sx, y2 * scale - off - sy
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        count = max(gh * gw, 1)
        for i in range(ph):
            for j in range(pw):
                acc = torch.zeros(c, dtype=inp.dtype)
                for iy in range(gh):
                    y = sy + i * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        x = sx + j * bw + (ix + 0.5) * bw / gw
                        acc += _bilinear(inp[int(b)], y, x, h, w)
                out[k, :, i, j] = acc / count
    return out


def _bilinear(f, y, x, h, w):  # type: ignore[no-untyped-def]
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return torch.zeros(f.shape[0], dtype=f.dtype)
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    hy, hx = 1 - ly, 1 - lx
    return (
        hy * hx * f[:, y0, x0]
        + hy * lx * f[:, y0, x1]
        + ly * hx * f[:, y1, x0]
        + ly * lx * f[:, y1, x1]
    )


def _rois(g: torch.Generator, k: int, size: float) -> torch.Tensor:
    xy = torch.rand(k, 2, generator=g, dtype=torch.float64) * size - 2  # some outside
    wh = torch.rand(k, 2, generator=g, dtype=torch.float64) * size / 1.5
    b = torch.randint(0, 2, (k, 1), generator=g).double()
    rois = torch.cat([b, xy, xy + wh], dim=1)
    rois[0, 1:] = torch.tensor([3.0, 3.0, 3.0, 3.0], dtype=torch.float64)  # degenerate
    return rois


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [2, 0, -1])
def test_roi_align_matches_reference(aligned: bool, ratio: int) -> None:
    g = torch.Generator().manual_seed(2)
    inp = torch.randn(2, 3, 9, 11, generator=g, dtype=torch.float64)
    rois = _rois(g, 7, 24.0)
    got = roi_align_cpu(inp, rois, 0.5, 3, 2, ratio, aligned)
    want = ref_roi_align(inp, rois, 0.5, 3, 2, ratio, aligned)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_roi_align_gradcheck_and_torchvision_entry_point() -> None:
    import torchvision

    g = torch.Generator().manual_seed(3)
    inp = torch.randn(2, 2, 5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    rois = _rois(g, 4, 10.0)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torchvision.ops.roi_align(x, rois, (2, 2), 0.8, 0, aligned=True)

    assert torch.autograd.gradcheck(fn, (inp,))
    fp32 = torchvision.ops.roi_align(inp.float(), rois.float(), (2, 2), 0.8, 2)
    torch.testing.assert_close(fp32, ref_roi_align(inp.detach(), rois, 0.8, 2, 2, 2, False).float())


def test_other_ops_raise_clear_error() -> None:
    import torchvision

    from geofl.models.detection.tvops import torchvision_ops_native

    if torchvision_ops_native():
        pytest.skip("torchvision's compiled ops load here: its own kernels serve roi_pool")
    with pytest.raises(NotImplementedError, match="roi_pool has no CPU kernel"):
        torchvision.ops.roi_pool(torch.zeros(1, 1, 4, 4), torch.zeros(1, 5), (2, 2))
