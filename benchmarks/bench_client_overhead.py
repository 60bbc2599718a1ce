"""Per-client-update engine overhead of ``FederatedRun.round`` with training taken out.

Usage::

    .venv/bin/python benchmarks/bench_client_overhead.py [--quick] [--clients 100]
        [--rounds 10] [--model small_cnn]

What is measured and why: with many clients per round (cross-device FL, K=100 and more)
the engine's fixed cost per update — generator derivation, release steps, network model,
validation, stacking and aggregation — must stay far below the cost of local training, or
it dominates simulations with cheap local steps. A LocalTrainer registered here as
``bench_noop`` returns a precomputed random Δw of the model's size D without training, so a
round measures the engine alone. A ``FederatedRun`` is built for a ~100k-parameter model
(``small_cnn`` defaults: 98k parameters at 13 bands) with K=100 clients holding 4 tiny
patches each, and rounds are driven through ``FederatedRun.round``. Reported, in ms per
client update (median over rounds, after warm-up rounds):

* ``(round − aggregation) / K`` — the per-client engine path (target ≤ 1 ms),
* ``round / K`` — everything, aggregation included (target ≤ 1 ms),
* the parts: ``client_step`` around the no-op trainer, the per-client loop after it
  (network model, validation) and aggregation (stack + tier + global update).

Both without release steps and with an ``l2_clip`` release step. A second table times the
individual per-client operations in isolation to show where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import footer, header, median_time, print_table, set_threads
from geofl import plugins
from geofl.client.release import RELEASE_STEPS, apply_release
from geofl.client.trainer import LOCAL_TRAINERS
from geofl.config.schema import ExperimentConfig, TrainConfig
from geofl.data.base import SENTINEL2_BANDS, GeoDataset
from geofl.engine.experiment import build_partition
from geofl.engine.loop import FederatedRun, PreparedData
from geofl.models.base import FlatModel
from geofl.registry import NoParams
from geofl.rng import numpy_generator, torch_generator
from geofl.server.validate import validate_update
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

TARGET_MS = 1.0
TRAINER_KEY = "bench_noop"
#: Seconds spent inside the no-op trainer during the current round.
NOOP_TIME = [0.0]


class NoopTrainer:
    """Returns the same precomputed random Δw (``[D]`` float32) for every client."""

    def __init__(self, dim: int) -> None:
        gen = torch.Generator().manual_seed(12345)
        self.delta = 0.01 * torch.randn(dim, generator=gen)

    def __call__(
        self,
        global_params: torch.Tensor,
        data: Any,
        directives: ClientDirectives,
        generator: torch.Generator,
    ) -> ClientUpdate:
        """No training: wrap the precomputed delta with this client's metadata."""
        t0 = time.perf_counter()
        meta = UpdateMeta(
            client_id=data.client_id,
            num_samples=len(data),
            round=directives.round,
            label_histogram=data.label_histogram,
            train_loss=0.0,
            steps=0,
            bytes_sent=self.delta.numel() * self.delta.element_size(),
        )
        update = ClientUpdate(self.delta, meta)
        NOOP_TIME[0] += time.perf_counter() - t0
        return update


@LOCAL_TRAINERS.register(TRAINER_KEY)
def build_noop(_: NoParams, *, workspace: FlatModel, train: TrainConfig) -> Any:
    """No-op trainer returning a fixed random update (benchmark only)."""
    return NoopTrainer(workspace.spec.numel)


def make_run(args: argparse.Namespace, release: list[dict[str, Any]], out: Path) -> FederatedRun:
    """A FederatedRun of K clients with tiny random data and the no-op trainer."""
    plugins.load_all()
    k, per_client, size = args.clients, 4, 16
    cfg = ExperimentConfig.model_validate(
        {
            "name": "bench-client-overhead",
            "model": {"name": args.model, "params": {}},
            "federation": {"num_clients": k, "participation": 1.0, "rounds": args.rounds},
            "methods": [{"name": "noop", "trainer": {"name": TRAINER_KEY}, "release": release}],
        }
    )
    gen = torch.Generator().manual_seed(0)
    n = k * per_client + 20

    def dataset(m: int) -> GeoDataset:
        return GeoDataset(
            torch.randn(m, len(SENTINEL2_BANDS), size, size, generator=gen),
            torch.arange(m) % 10,
            tuple(f"c{i}" for i in range(10)),
            SENTINEL2_BANDS,
        )

    train = dataset(n)
    part = build_partition(cfg, cfg.methods[0], train, np.arange(n), seed=1)
    data = PreparedData(train, dataset(10), dataset(10))
    return FederatedRun(cfg, cfg.methods[0], 1, data, part, out)


def time_rounds(run: FederatedRun, warmup: int, rounds: int) -> dict[str, float]:
    """Median per-round timings (s) over ``rounds`` rounds after ``warmup`` rounds."""
    params = run.init_params
    for r in range(1, warmup + 1):
        params, _ = run.round(params, r)
    samples: dict[str, list[float]] = {}
    for r in range(warmup + 1, warmup + rounds + 1):
        NOOP_TIME[0] = 0.0
        t0 = time.perf_counter()
        params, rec = run.round(params, r)
        outer = time.perf_counter() - t0
        ts = rec["time_s"]
        row = {
            "outer": outer,
            "total": ts["total"],
            "aggregate": ts["aggregate"],
            "client_step": ts["train"],
            "noop trainer": NOOP_TIME[0],
            "loop after step": ts["total"] - ts["train"] - ts["aggregate"],
        }
        for key, val in row.items():
            samples.setdefault(key, []).append(val)
        if len(rec["participants"]) != len(run.clients):
            raise SystemExit(f"round {r}: only {len(rec['participants'])} updates accepted")
    return {k: statistics.median(v) for k, v in samples.items()}


def micro(run: FederatedRun, repeats: int) -> list[list[Any]]:
    """Median µs of each per-client (and per-round) engine operation in isolation."""
    params = run.init_params
    client = run.clients[0]
    d = ClientDirectives(2, 0)
    update = run.trainer(params, client, d, torch_generator(1, "x"))
    clip = RELEASE_STEPS.build("l2_clip", {"bound": 1.0})
    k = len(run.clients)
    updates = [update] * k
    stacked = torch.stack([u.delta for u in updates])
    cases: list[tuple[str, str, Any]] = [
        ("torch_generator(keys) (×2 per client)", "client", lambda: torch_generator(1, "r", 2)),
        ("numpy_generator(keys) (network)", "client", lambda: numpy_generator(1, "r", 2)),
        (
            "network model call",
            "client",
            lambda: run.network(update.meta, numpy_generator(1, "r", 2)),
        ),
        ("validate_update", "client", lambda: validate_update(update, run.dim)),
        (
            "  torch.isfinite(delta).all()",
            "client",
            lambda: bool(torch.isfinite(update.delta).all()),
        ),
        ("no-op trainer call", "client", lambda: run.trainer(params, client, d, None)),
        ("client_step (no release)", "client", lambda: run.client_step(params, 0, 2)),
        (
            "apply_release([l2_clip])",
            "client",
            lambda: apply_release(
                update, [clip], data=client, directives=d, generator=torch_generator(1, "x")
            ),
        ),
        ("  l2_clip: vector_norm(delta)", "client", lambda: torch.linalg.vector_norm(update.delta)),
        ("  l2_clip: delta * scale (new tensor)", "client", lambda: update.delta * 0.5),
        (f"torch.stack K={k} deltas", "round", lambda: torch.stack([u.delta for u in updates])),
        (
            "tier(stacked) (weights + mean)",
            "round",
            lambda: run.tier(stacked, [u.meta for u in updates], 2),
        ),
        ("global + lr * delta", "round", lambda: params + 1.0 * stacked[0]),
    ]
    rows = []
    for name, per, fn in cases:
        number = 20 if per == "client" else 3
        t, _ = median_time(fn, repeats=repeats, warmup=2, number=number)
        per_client = t if per == "client" else t / k
        rows.append([name, per, t * 1e6, per_client * 1e3])
    return rows


def main() -> None:
    """Parse arguments, time rounds with and without release steps, print tables."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds per setting")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--clip-bound", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=7, help="repeats of each micro-timing")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.quick:
        args.rounds, args.warmup, args.repeats = 3, 1, 3
    header("bench_client_overhead", args)

    settings = {"no release": [], "l2_clip": [{"name": "l2_clip", "bound": args.clip_bound}]}
    rows = []
    first: FederatedRun | None = None
    with tempfile.TemporaryDirectory(prefix="geofl-bench-client-") as tmp:
        for label, release in settings.items():
            run = make_run(args, release, Path(tmp) / label.replace(" ", "_"))
            first = first or run
            k = len(run.clients)
            med = time_rounds(run, args.warmup, args.rounds)
            per = {key: 1e3 * v / k for key, v in med.items()}
            rows.append(
                [
                    label,
                    k,
                    run.dim,
                    1e3 * med["total"],
                    per["total"] - per["aggregate"],
                    per["total"],
                    per["client_step"],
                    per["client_step"] - per["noop trainer"],
                    per["loop after step"],
                    per["aggregate"],
                    per["outer"],
                ]
            )
    print_table(
        [
            "release",
            "K",
            "D",
            "round ms",
            "(round−agg)/K",
            "round/K",
            "client_step/K",
            "  minus trainer",
            "net+validate/K",
            "agg/K",
            "outer/K",
        ],
        rows,
        title=f"Per-client-update engine time in ms (median of {args.rounds} rounds after "
        f"{args.warmup} warm-up); target ≤ {TARGET_MS:g} ms",
    )
    for row in rows:
        verdict = [
            f"{name} {val:.3f} ms {'met' if val <= TARGET_MS else 'MISSED'}"
            for name, val in (("(round−agg)/K", row[4]), ("round/K", row[5]))
        ]
        print(f"{row[0]}: " + "; ".join(verdict))

    assert first is not None
    print_table(
        ["operation", "per", "median µs/call", "ms per client update"],
        micro(first, args.repeats),
        title="Engine operations in isolation (K-wide ones divided by K in the last column)",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
