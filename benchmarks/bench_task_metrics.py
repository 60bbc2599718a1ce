"""Cost of a task's metrics per evaluated sample, against the model's forward pass.

Usage::

    .venv/bin/python benchmarks/bench_task_metrics.py [--quick] [--repeats 9] [--threads 1]
        [--image-batch 256] [--tabular-batch 256 4096] [--batches 8]

What is measured and why: evaluation runs every round on the validation and test splits;
the task's metric bookkeeping (per batch ``MetricAccumulator.update`` and, unless the
accumulator owns the loss, ``Task.loss_sum``; ``MetricAccumulator.compute`` once per
split — exactly what ``geofl.engine.evaluation.heldout`` calls) should cost next to nothing compared
with the forward pass it follows (target ≤ 5 % per evaluated sample). Per scenario and
evaluation batch size the script builds the task through ``TASKS`` (fitted on synthetic
training targets) and the model through ``MODELS``, and times, round-robin so that all of
them see the same machine state:

* *forward*: ``model(x)`` on one evaluation batch in ``torch.inference_mode``, called
  often enough per repeat to last ≥ 20 ms (at most ``--batches`` times), per sample =
  time / (calls × batch);
* *metrics*: one whole split of ``--batches`` batches — ``update`` (and ``loss_sum``) per
  batch, then ``compute`` — in ``torch.inference_mode``, per sample = time / split size.
  The outputs are random tensors of the model's output shape (metric cost does not
  depend on the values; continuous scores, so the rank metrics sort without ties);
* *updates*: the per-batch share alone — a fresh accumulator given the split's batches
  (``update``, and ``loss_sum`` where the accumulator does not own the loss), without
  ``compute``; *compute* is the difference, metrics − updates (accumulators that reduce
  in ``compute`` or every ``FLUSH_ENTRIES`` entries do their work there, so ``compute``
  on an already computed accumulator would time nothing).

Each cost is the best of ``--repeats`` repeats (on a machine shared with other jobs the
slower repeats measure the interference, and a 1-ms MLP batch is hit differently from an
8-batch metric pass); the ratio of the medians is printed next to it.

Evaluation batch sizes (realistic ones: what the presets evaluate with): ``eval.batch_size``
defaults to 256, which every image preset and ``ground-uplink-example`` use; the other
tabular presets (paper 003's and the regression and binary examples) set 4096. Image tasks
run at ``--image-batch`` (256), tabular tasks at each of ``--tabular-batch`` (256 and
4096): a small batch is the hard case for an MLP, whose ~1 µs/sample forward pass leaves
~13 µs of metric work per batch of 256.

Image tasks use the small CNN (defaults: width 32, 3 blocks, GroupNorm) on 13-band 32×32
patches, tabular tasks the MLP (hidden 256-128) on 32 features. The single-label
confusion-matrix path of today's engine (``geofl.tasks.metrics``) is a reference row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from _common import footer, header, print_table, set_threads
from geofl.models import MODELS
from geofl.rng import torch_generator
from geofl.tasks import TASKS, Task
from geofl.tasks.metrics import confusion_matrix, metrics_from_confusion

TARGET = 0.05
TRAIN_N = 4096

#: ``(generator, n) -> targets`` of a scenario.
TargetFn = Callable[[torch.Generator, int], torch.Tensor]


@dataclass(frozen=True)
class Scenario:
    """One task on one model."""

    name: str
    task: str
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    targets: TargetFn
    task_params: dict[str, Any] = field(default_factory=dict)
    has_target: bool = True


def _multi_hot(classes: int) -> TargetFn:
    def make(gen: torch.Generator, n: int) -> torch.Tensor:
        prevalence = torch.rand(classes, generator=gen) * 0.3
        return (torch.rand(n, classes, generator=gen) < prevalence).to(torch.float32)

    return make


def _binary(gen: torch.Generator, n: int) -> torch.Tensor:
    return (torch.rand(n, generator=gen) < 0.3).to(torch.int64)


def _values(outputs: int) -> TargetFn:
    def make(gen: torch.Generator, n: int) -> torch.Tensor:
        y = 300.0 + 25.0 * torch.randn(n, outputs, generator=gen)
        return y[:, 0] if outputs == 1 else y

    return make


SCENARIOS = (
    Scenario("multilabel, 19 labels", "multilabel", "small_cnn", (13, 32, 32), 19, _multi_hot(19)),
    Scenario("regression, 1 output", "regression", "small_cnn", (13, 32, 32), 0, _values(1)),
    Scenario("binary (tabular)", "binary", "mlp", (32,), 2, _binary, {"pos_weight": "auto"}),
    Scenario("regression, 3 outputs (tabular)", "regression", "mlp", (32,), 0, _values(3)),
    # Worst case, no target: ranking 19 scores per sample costs more than a ~40k-FLOP MLP.
    Scenario(
        "multilabel, 19 labels (tabular)",
        "multilabel",
        "mlp",
        (32,),
        19,
        _multi_hot(19),
        has_target=False,
    ),
)


def split_metrics(
    task: Task, outputs: list[torch.Tensor], targets: list[torch.Tensor], *, compute: bool = True
) -> Any:
    """Evaluate the metrics of one split from precomputed batch outputs (``compute=False``:
    the per-batch share only)."""
    with torch.inference_mode():
        acc = task.accumulator()
        for out, y in zip(outputs, targets, strict=True):
            acc.update(out, y, None if acc.owns_loss else task.loss_sum(out, y))
        return acc.compute() if compute else acc


def classification_reference(outputs: list[torch.Tensor], targets: list[torch.Tensor]) -> Any:
    """Today's engine: cross-entropy sum and a confusion matrix per batch."""
    classes = outputs[0].shape[1]
    with torch.inference_mode():
        cm = torch.zeros(classes, classes, dtype=torch.long)
        loss_sum = 0.0
        for out, y in zip(outputs, targets, strict=True):
            loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
            cm += confusion_matrix(y, out.argmax(dim=1), classes)
        return metrics_from_confusion(cm, loss_sum)


def _calls_for(model: torch.nn.Module, x: torch.Tensor, most: int) -> int:
    """Forward calls per timed repeat: enough to last ≥ 20 ms (a fast MLP batch takes
    ~1 ms, which one scheduler tick on a shared machine would distort), at most ``most``."""
    with torch.inference_mode():
        model(x)
        t0 = time.perf_counter()
        model(x)
        once = time.perf_counter() - t0
    return max(1, min(most, round(0.02 / max(once, 1e-6))))


def measure(sc: Scenario, b: int, args: argparse.Namespace) -> list[Any]:
    """Time forward, split metrics and compute of one scenario at evaluation batch ``b``;
    one table row."""
    gen = torch_generator(0, "bench_task_metrics", sc.name)
    task: Task = TASKS.build(
        sc.task, sc.task_params, num_classes=sc.num_classes, train_targets=sc.targets(gen, TRAIN_N)
    )
    model = MODELS.build(
        sc.model,
        {},
        in_channels=sc.input_shape[0],
        num_classes=task.num_outputs,
        generator=torch_generator(0, "bench_task_metrics", "init"),
    ).eval()
    x = torch.randn(b, *sc.input_shape, generator=gen)
    outputs = [torch.randn(b, task.num_outputs, generator=gen) for _ in range(args.batches)]
    targets = [sc.targets(gen, b) for _ in range(args.batches)]
    fwd_calls = _calls_for(model, x, args.batches)

    def forward() -> None:
        with torch.inference_mode():
            for _ in range(fwd_calls):
                model(x)

    fns = {
        "forward": forward,
        "metrics": lambda: split_metrics(task, outputs, targets),
        "updates": lambda: split_metrics(task, outputs, targets, compute=False),
    }
    per_sample = {
        "forward": b * fwd_calls,
        "metrics": b * args.batches,
        "updates": b * args.batches,
    }
    shape = "×".join(map(str, sc.input_shape))
    return _row(sc.name, sc.model, shape, b, fns, per_sample, args.repeats, judged=sc.has_target)


def _row(
    name: str,
    model: str,
    shape: str,
    batch: int,
    fns: dict[str, Callable[[], Any]],
    per_sample: dict[str, int],
    repeats: int,
    *,
    judged: bool = True,
) -> list[Any]:
    """Time ``fns`` round-robin; the table row in µs per sample (best repeat) and ratios.

    Each function's best (minimum) repeat is the estimate of its own cost: on a shared
    machine slower repeats are other processes' interference (``timeit``'s advice), and a
    1-ms MLP batch and an 8-batch metric pass are not hit alike by it. The ratio of the
    medians is printed next to it.
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(repeats):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[key].append((time.perf_counter() - t0) / per_sample[key])
    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = best["metrics"] / best["forward"]
    verdict = ("met" if ratio <= TARGET else "MISSED") if judged else "—"
    updates = best.get("updates", float("nan"))
    return [
        name,
        model,
        shape,
        batch,
        per_sample["metrics"],
        1e6 * best["forward"],
        1e6 * best["metrics"],
        1e6 * updates,
        1e6 * (best["metrics"] - updates),
        100 * ratio,
        100 * med["metrics"] / med["forward"],
        verdict,
    ]


def reference_row(args: argparse.Namespace) -> list[Any]:
    """The single-label confusion-matrix path of today's engine, small CNN, 10 classes."""
    gen = torch_generator(0, "bench_task_metrics", "classification")
    model = MODELS.build(
        "small_cnn", {}, in_channels=13, num_classes=10, generator=torch_generator(0, "init")
    ).eval()
    b = args.image_batch
    x = torch.randn(b, 13, 32, 32, generator=gen)
    outputs = [torch.randn(b, 10, generator=gen) for _ in range(args.batches)]
    targets = [torch.randint(10, (b,), generator=gen) for _ in range(args.batches)]

    def forward() -> None:
        with torch.inference_mode():
            model(x)

    fns = {"forward": forward, "metrics": lambda: classification_reference(outputs, targets)}
    per_sample = {"forward": b, "metrics": b * args.batches}
    return _row(
        "classification (engine today)", "small_cnn", "13×32×32", b, fns, per_sample, args.repeats
    )


def main() -> None:
    """Parse arguments, time every scenario, print the table."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 repeats, 2 batches of 64 (fixed costs dominate the ratios)",
    )
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--image-batch", type=int, default=256, help="evaluation batch of the image tasks"
    )
    parser.add_argument(
        "--tabular-batch",
        type=int,
        nargs="+",
        default=[256, 4096],
        help="evaluation batch sizes of the tabular tasks",
    )
    parser.add_argument("--batches", type=int, default=8, help="batches per split")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.image_batch, args.tabular_batch, args.batches = 2, 64, [64], 2
    set_threads(args.threads)
    header("bench_task_metrics", args)

    rows = [
        measure(sc, b, args)
        for sc in SCENARIOS
        for b in ([args.image_batch] if len(sc.input_shape) > 1 else args.tabular_batch)
    ] + [reference_row(args)]
    print_table(
        [
            "task",
            "model",
            "input",
            "batch",
            "split N",
            "forward µs/sample",
            "metrics µs/sample",
            "updates µs/sample",
            "compute µs/sample",
            "metrics / forward %",
            "same, medians %",
            f"≤ {100 * TARGET:.0f} %",
        ],
        rows,
        title=f"metric cost per evaluated sample (best of {args.repeats} interleaved repeats)",
    )
    judged = [r for r in rows if r[-1] != "—"]
    worst = max(judged, key=lambda r: r[-3])
    print(
        f"\nworst task with a target: {worst[0]} (batch {worst[3]}) at {worst[-3]:.2f} % of the "
        "forward pass "
        f"(target ≤ {100 * TARGET:.0f} %: {worst[-1]})"
    )
    footer(t_start)


if __name__ == "__main__":
    main()
