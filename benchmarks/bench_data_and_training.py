"""Synthetic-data generation rate and model training/evaluation throughput on CPU.

Usage::

    .venv/bin/python benchmarks/bench_data_and_training.py [--quick] [--patches 2048]
        [--repeats 3] [--threads 2] [--skip-resnet]

What is measured and why: an experiment's wall time is data generation (once per dataset,
then cached) plus local training and evaluation, so these rates decide how long the demo
and the paper presets take on a 2-core machine.

* **Synthetic generator** — ``generate_synthetic`` patches/s at 64×64×13 and 32×32×13 over
  ``--patches`` (≥ 2000) patches; median of ``--repeats`` after a 256-patch warm-up.
  Target ≥ 2,000 patches/s.
* **Training** — images/s of one SGD step (forward, cross-entropy, backward, SGD with
  momentum 0.9 and weight decay 1e-4; batch 64) of the GroupNorm small CNN (``small_cnn``
  defaults) at 32×32×13, 64×64×13 and 64×64×3, and of ResNet-18 at 64×64×13 with
  torchvision's 7×7/2 + max-pool stem and, for a couple of batches only (slow on CPU), with
  ``small_input_stem`` (3×3/1, no max-pool: 16× the compute). Also the engine's own
  ``LocalSGD`` trainer on a client of 10 batches at 32×32×13, as a ratio to the bare loop
  (trainer overhead).
* **Evaluation** — images/s of ``geofl.engine.evaluation.heldout.evaluate`` (inference_mode, batch
  1024) for the small CNN at 32×32×13 and 64×64×13.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.nn import functional as F

from _common import footer, header, median_time, print_table, set_threads
from geofl import plugins
from geofl.client.data import ClientData
from geofl.client.trainer import LocalSGD, LocalTrainParams
from geofl.data.synthetic.landcover import SyntheticParams, generate_synthetic
from geofl.engine.evaluation.heldout import evaluate
from geofl.models.base import MODELS, FlatModel
from geofl.rng import torch_generator
from geofl.tasks import TASKS, Task
from geofl.update import ClientDirectives

TARGET_PATCHES_PER_S = 2000.0
NUM_CLASSES = 10


def bench_generator(sizes: list[int], patches: int, repeats: int) -> list[list[object]]:
    """Patches/s of the synthetic generator at each patch size."""
    rows: list[list[object]] = []
    for size in sizes:
        generate_synthetic(SyntheticParams(num_samples=256, size=size, seed=99))  # warm-up
        times = []
        for rep in range(repeats):
            params = SyntheticParams(num_samples=patches, size=size, seed=rep)
            t0 = time.perf_counter()
            out = generate_synthetic(params)
            times.append(time.perf_counter() - t0)
            assert out["images"].shape == (patches, 13, size, size)
        med = float(np.median(times))
        rate = patches / med
        verdict = "met" if rate >= TARGET_PATCHES_PER_S else "MISSED"
        rows.append([f"{size}×{size}×13", patches, med, rate, f"≥ 2,000: {verdict}"])
    return rows


def build_model(name: str, bands: int, params: dict[str, object] | None = None) -> torch.nn.Module:
    """A registered model with seeded weights."""
    return MODELS.build(
        name,
        params or {},
        in_channels=bands,
        num_classes=NUM_CLASSES,
        generator=torch_generator(0, "bench", name),
    )


def train_step_time(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    warmup: int,
    steps: int,
    repeats: int,
) -> float:
    """Median seconds of one SGD step (forward, loss, backward, optimizer step)."""
    t = LocalTrainParams()
    opt = torch.optim.SGD(
        model.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay
    )
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    med, _ = median_time(step, repeats=repeats, warmup=warmup, number=steps)
    return med


def bench_training(args: argparse.Namespace) -> list[list[object]]:
    """Images/s of training steps for each (model, input) case."""
    gen = torch.Generator().manual_seed(0)
    b = args.batch
    cases: list[tuple[str, int, int, int, int, int]] = [
        # model (+ " small stem"), bands, size, batch, steps per repeat, repeats
        ("small_cnn", 13, 32, b, args.steps, args.repeats),
        ("small_cnn", 13, 64, b, args.steps, args.repeats),
        ("small_cnn", 3, 64, b, args.steps, args.repeats),
    ]
    if not args.skip_resnet:
        cases.append(("resnet18", 13, 64, args.resnet_batch, args.steps, args.repeats))
        cases.append(("resnet18 small stem", 13, 64, args.resnet_batch, 1, args.resnet_steps))
    rows: list[list[object]] = []
    for name, bands, size, batch, steps, repeats in cases:
        key, _, variant = name.partition(" ")
        model = build_model(key, bands, {"small_input_stem": True} if variant else None)
        n_params = sum(p.numel() for p in model.parameters())
        x = torch.randn(batch, bands, size, size, generator=gen)
        y = torch.randint(0, NUM_CLASSES, (batch,), generator=gen)
        warm = 1 if key == "resnet18" else 3
        sec = train_step_time(model, x, y, warmup=warm, steps=steps, repeats=repeats)
        rows.append(
            [
                name,
                f"{size}×{size}×{bands}",
                n_params,
                batch,
                steps * repeats,
                sec * 1e3,
                batch / sec,
            ]
        )
    return rows


def _task(labels: torch.Tensor) -> Task:
    """The single-label classification task over ``NUM_CLASSES`` fitted on ``labels``."""
    return TASKS.build("classification", {}, num_classes=NUM_CLASSES, train_targets=labels)


def bench_trainer_ratio(args: argparse.Namespace) -> tuple[float, float]:
    """Images/s of the engine's LocalSGD (10 batches, 32×32×13) and of the bare loop."""
    gen = torch.Generator().manual_seed(1)
    batch, n = args.batch, 10 * args.batch
    images = torch.randn(n, 13, 32, 32, generator=gen)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    data = ClientData(0, images, labels, np.bincount(labels.numpy(), minlength=NUM_CLASSES))
    workspace = FlatModel(build_model("small_cnn", 13))
    trainer = LocalSGD(workspace, LocalTrainParams(batch_size=batch), _task(labels))
    params = workspace.snapshot()
    directives = ClientDirectives(1, 0)
    t_trainer, _ = median_time(
        lambda: trainer(params, data, directives, torch_generator(0, "bench")),
        repeats=args.repeats,
        warmup=1,
    )
    bare = build_model("small_cnn", 13)
    t_step = train_step_time(
        bare, images[:batch], labels[:batch], warmup=3, steps=10, repeats=args.repeats
    )
    return n / t_trainer, batch / t_step


def bench_eval(args: argparse.Namespace) -> list[list[object]]:
    """Images/s of the engine's evaluate() for the small CNN."""
    gen = torch.Generator().manual_seed(2)
    rows: list[list[object]] = []
    for size in (32, 64):
        n = args.eval_images
        model = build_model("small_cnn", 13)
        x = torch.randn(n, 13, size, size, generator=gen)
        y = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
        sec, _ = median_time(
            lambda m=model, x=x, y=y: evaluate(m, x, y, _task(y), 1024),
            repeats=args.repeats,
            warmup=1,
        )
        rows.append(["small_cnn", f"{size}×{size}×13", n, 1024, sec * 1e3, n / sec])
    return rows


def main() -> None:
    """Parse arguments, run each part, print the tables."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few patches/steps, tiny ResNet run")
    parser.add_argument("--patches", type=int, default=2048, help="patches per generator run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5, help="small-CNN steps per repeat")
    parser.add_argument("--resnet-batch", type=int, default=64)
    parser.add_argument(
        "--resnet-steps", type=int, default=2, help="timed small-stem ResNet-18 batches"
    )
    parser.add_argument("--eval-images", type=int, default=2048)
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.quick:
        args.patches, args.repeats, args.steps = 512, 1, 2
        args.resnet_batch, args.resnet_steps, args.eval_images = 8, 1, 1024
    header("bench_data_and_training", args)
    plugins.load_all()

    gen_rows = bench_generator([64, 32], args.patches, args.repeats)
    print_table(
        ["patch", "patches", "median s", "patches/s", "target"],
        gen_rows,
        title=f"Synthetic generator (median of {args.repeats})",
    )
    train_rows = bench_training(args)
    print_table(
        ["model", "input", "params", "batch", "timed steps", "ms/step", "images/s"],
        train_rows,
        title="Training step: forward + backward + SGD(momentum, wd), GroupNorm",
    )
    small = {r[1]: r[6] for r in train_rows if r[0] == "small_cnn"}
    rate_64_13, rate_32_13, rate_64_3 = small["64×64×13"], small["32×32×13"], small["64×64×3"]
    print(
        f"ratios: small CNN 32→64 px slowdown {rate_32_13 / rate_64_13:.2f}× (4× pixels); "
        f"13→3 bands at 64 px speed-up {rate_64_3 / rate_64_13:.2f}×"
    )
    if not args.skip_resnet:
        resnet = next(r for r in train_rows if r[0] == "resnet18")
        print(f"        small CNN / ResNet-18 at 64×64×13: {rate_64_13 / resnet[6]:.1f}×")
    trainer_rate, bare_rate = bench_trainer_ratio(args)
    print(
        f"LocalSGD trainer (10 batches of {args.batch}, 32×32×13): {trainer_rate:.0f} images/s; "
        f"bare loop {bare_rate:.0f} images/s; trainer/bare {trainer_rate / bare_rate:.2f}×"
    )
    eval_rows = bench_eval(args)
    print_table(
        ["model", "input", "images", "batch", "ms/pass", "images/s"],
        eval_rows,
        title="Evaluation: geofl.engine.evaluation.heldout.evaluate (inference_mode)",
    )
    eval_32 = eval_rows[0][5]
    print(f"ratio: eval / train images/s at 32×32×13: {eval_32 / rate_32_13:.1f}×")
    footer(t_start)


if __name__ == "__main__":
    main()
