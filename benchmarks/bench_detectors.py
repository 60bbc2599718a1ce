"""Which single-stage detector is geofl's default: training images/s and a short accuracy
check of FCOS, RetinaNet and SSDlite (and Faster R-CNN, the two-stage model) on CPU.

Usage::

    .venv/bin/python benchmarks/bench_detectors.py [--size 256] [--threads 2]
        [--steps 60] [--batch 8] [--models fcos ...] [--no-speed] [--object-scale 1.0]
        [--quick]

What is measured. Each detector is built from scratch (GroupNorm, no pretrained weights):
``fcos``, ``retinanet`` and ``faster_rcnn`` as registered in geofl (GroupNorm ResNet-18
layout at width 32, 64 pyramid channels), and torchvision's ``ssdlite320_mobilenet_v3_large``
with GroupNorm in its MobileNetV3 (``width_mult`` 0.5; SSDlite has no FPN). Then:

1. **Speed**: one training step (forward, loss, backward, SGD step) on a batch of
   ``--batch`` synthetic aerial scenes at ``--size`` px, timed round-robin across the
   models (``interleaved_medians``) so that their ratios hold on a loaded machine; images/s
   and the ratio to FCOS are printed.
2. **Accuracy** (skipped with ``--quick``): ``--steps`` Adam steps (``--lr`` 5e-4) on 480
   synthetic scenes, then COCO mAP@0.5 on 64 held-out scenes (same seed and data for all).
   A short check of which model learns fastest per step, not converged accuracy. On a busy
   2-core machine run one model per process (``--models X --no-speed --threads 1``) at
   ``--size 128 --object-scale 1.0`` (the preset's scenes): 256 px costs 4× as much.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from _common import footer, header, interleaved_medians, print_table, set_threads
from geofl.data.synthetic.aerial import AerialParams, generate_aerial
from geofl.models import MODELS
from geofl.models.detection.detectors import TorchvisionDetector, _no_resize
from geofl.models.detection.tvops import ensure_torchvision_ops
from geofl.models.norm import make_norm
from geofl.tasks.detection import DetectionTask, targets_to_dicts


def ssdlite(num_classes: int, size: int, seed: int) -> nn.Module:
    """torchvision's SSDlite320 (MobileNetV3-Large, width 0.5) with GroupNorm, from scratch."""
    ensure_torchvision_ops()
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = ssdlite320_mobilenet_v3_large(
            weights=None,
            weights_backbone=None,
            num_classes=num_classes + 1,
            width_mult=0.5,
            norm_layer=lambda c: make_norm("group", c, 8),
        )
    _no_resize(net, 3)
    return TorchvisionDetector(net, 1, torch.Generator().manual_seed(seed))


MODEL_NAMES = ("fcos", "retinanet", "ssdlite", "faster_rcnn")


def build_all(size: int) -> dict[str, nn.Module]:
    g = torch.Generator().manual_seed
    small = {"width": 32, "fpn_channels": 64}
    return {
        "fcos": MODELS.build("fcos", small, in_channels=3, num_classes=10, generator=g(0)),
        "retinanet": MODELS.build(
            "retinanet", small, in_channels=3, num_classes=10, generator=g(0)
        ),
        "ssdlite": ssdlite(10, size, 0),
        "faster_rcnn": MODELS.build(
            "faster_rcnn", small, in_channels=3, num_classes=10, generator=g(0)
        ),
    }


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: Any) -> float:
    model.train()
    loss = DetectionTask(10).loss(model(x, y), y)
    opt.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()
    return float(loss.detach())


def accuracy(
    model: nn.Module, data: dict[str, Any], steps: int, batch: int, lr: float
) -> tuple[float, float]:
    """(mAP@0.5 on the held-out scenes, seconds of training)."""
    x, t = data["x"], data["t"]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    for _ in range(steps):
        idx = torch.randint(0, 480, (batch,), generator=gen)
        train_step(model, opt, x[idx], targets_to_dicts(t[idx]))
    train_s = time.perf_counter() - t0
    task = DetectionTask(10)
    acc = task.accumulator()
    model.eval()
    with torch.inference_mode():
        for s in range(480, 544, 16):
            y = targets_to_dicts(t[s : s + 16])
            acc.update(model(x[s : s + 16]), y, 0.0)
    return acc.compute().values["map_50"], train_s


def main() -> None:
    t_start = time.perf_counter()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-4, help="Adam's (2e-3 kills FCOS's box branch)")
    p.add_argument("--models", nargs="+", default=list(MODEL_NAMES), choices=MODEL_NAMES)
    p.add_argument("--object-scale", type=float, default=None, help="synthetic_aerial's")
    p.add_argument("--no-speed", action="store_true", help="accuracy check only")
    p.add_argument("--quick", action="store_true", help="speed at 64 px, 1 repeat, no accuracy")
    args = p.parse_args()
    if args.quick:
        args.size, args.repeats, args.batch = 64, 1, 2
    set_threads(args.threads)
    header("bench_detectors", args)
    n = args.batch if args.quick else 544
    scene = AerialParams(num_samples=n, size=args.size, seed=0, object_scale=args.object_scale)
    arrays = generate_aerial(scene)
    x = torch.from_numpy(arrays["images"]).float() / 255.0
    x = (x - x.mean(dim=(0, 2, 3), keepdim=True)) / x.std(dim=(0, 2, 3), keepdim=True)
    data = {"x": x, "t": torch.from_numpy(arrays["boxes"])}
    if not args.no_speed:
        speed(args, data)
    if not args.quick:
        acc_rows = []
        for name in args.models:
            fresh = build_all(args.size)[name]
            m50, train_s = accuracy(fresh, data, args.steps, args.batch, args.lr)
            acc_rows.append([name, args.steps, train_s, m50])
        title = f"short accuracy check, {args.size} px, batch {args.batch}"
        print_table(["model", "steps", "train s", "mAP@0.5"], acc_rows, title)
    footer(t_start)


def speed(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Training images/s of every model, interleaved."""
    x = data["x"]
    models = {k: v for k, v in build_all(args.size).items() if k in args.models}
    xb, yb = x[: args.batch], targets_to_dicts(data["t"][: args.batch])
    steps: dict[str, Callable[[], Any]] = {}
    for name, m in models.items():
        opt = torch.optim.SGD(m.parameters(), lr=1e-4)
        steps[name] = lambda m=m, opt=opt: train_step(m, opt, xb, yb)
    secs = interleaved_medians(steps, repeats=args.repeats)
    rows: list[list[Any]] = []
    for name, m in models.items():
        n = sum(p.numel() for p in m.parameters())
        ref = secs.get("fcos", secs[name])
        rows.append([name, n, args.batch / secs[name], ref / secs[name]])
    print_table(
        ["model", "params", "train img/s", "speed vs fcos"], rows, f"training step, {args.size} px"
    )


if __name__ == "__main__":
    main()
