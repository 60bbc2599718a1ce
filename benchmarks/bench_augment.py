"""Cost of the training-time augmentations (001 §6.1.2) per local step, as a ratio.

Usage::

    .venv/bin/python benchmarks/bench_augment.py [--quick] [--threads 2]

One local training step of the small CNN (width 16, 13 bands, 32×32, batch 64: forward,
backward, SGD step) is timed next to the augmentation pipeline of the paper on the same
batch (band_jitter U[0.9, 1.1], gaussian_noise 0.01, band_dropout 0.1,
illumination_contrast, in reflectance space: un-standardise, augment, standardise),
interleaved round-robin so that both see the same load. Reported: ms per call of each and
augment ÷ step.
"""

from __future__ import annotations

import argparse
import time

import torch

from _common import fmt, footer, header, interleaved_medians, print_table, set_threads
from geofl.client.augment import build_pipeline
from geofl.models import MODELS
from geofl.rng import torch_generator

PAPER = [
    ("band_jitter", {"low": 0.9, "high": 1.1}),
    ("gaussian_noise", {"std": 0.01}),
    ("band_dropout", {"p": 0.1}),
    ("illumination_contrast", {}),
]


def main() -> None:
    """Time one step and one augmentation of the same batch; print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (smoke mode)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    set_threads(args.threads)
    t_start = time.perf_counter()
    header("bench_augment", args)
    gen = torch_generator(0, "bench")
    x = torch.randn(args.batch, 13, args.size, args.size, generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)
    model = MODELS.build("small_cnn", {"width": 16}, in_channels=13, num_classes=10, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    pipe = build_pipeline(
        PAPER, mean=torch.full((1, 13, 1, 1), 0.2), std=torch.full((1, 13, 1, 1), 0.05)
    )
    aug_gen = torch_generator(0, "augment")

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()

    times = interleaved_medians(
        {"step": step, "augment": lambda: pipe(x, aug_gen)},
        repeats=5 if args.quick else 30,
        warmup=2,
    )
    print_table(
        ["step ms", "augment ms", "augment ÷ step"],
        [
            [
                fmt(1e3 * times["step"]),
                fmt(1e3 * times["augment"]),
                fmt(times["augment"] / times["step"]),
            ]
        ],
        title=f"small_cnn 13×{args.size}×{args.size}, batch {args.batch}",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
