"""Per-client-update engine overhead of ``FederatedRun.round`` with training taken out.

Usage::

    .venv/bin/python benchmarks/bench_client_overhead.py [--quick] [--clients 100]
        [--rounds 10] [--model small_cnn]

What is measured and why: with many clients per round (cross-device FL, K=100 and more)
the engine's fixed cost per update — generator derivation, the client step around the
trainer (client state get/stage, the algorithm's correction and state update), release
steps, network model, validation, copying into the ``[K, D]`` round buffers, aggregation,
hashing and the client-state commit — must stay far below the cost of local training, or
it dominates simulations with cheap local steps. A LocalTrainer registered here as
``bench_noop`` returns a precomputed random Δw of the model's size D without training (and
reports one local step, so SCAFFOLD's option-II state update runs its full formula), so a
round measures the engine alone. ``FederatedRun`` objects are built for a ~100k-parameter
model (``small_cnn`` defaults: 98k parameters at 13 bands) with K=100 clients holding 4
tiny patches each. Settings:

* ``fedavg`` — no release steps;
* ``fedavg+l2_clip`` — an ``l2_clip`` release step;
* ``scaffold`` — ``algorithm: {name: scaffold}``: the client control variate c_k lives in
  the in-RAM ``[K, D]`` client-state store, every client uploads Δw and Δc_k (twice the
  bytes), the server updates its control variate c;
* ``scaffold-mmap`` — the same with ``federation.client_state: mmap`` (c_k in a
  memory-mapped ``.npy`` under a temp dir; the commit flushes it).

Rounds are driven the way ``FederatedRun.round`` does it — ``scheduler.round`` then
``store.commit()`` — with the two timed apart, and the settings are interleaved round by
round so that their ratios see the same machine load. Reported, in ms per client update
(median over rounds, after warm-up rounds):

* ``update/K`` — ``FederatedRun.round`` (scheduler round + commit) / K (target ≤ 1 ms),
* ``(−agg)/K`` — the same without aggregation,
* the parts: the client step around the no-op trainer, the loop after it (network model,
  validation, row copies into the round buffers), aggregation (tier + server step +
  SCAFFOLD's control update), hashing of the new model and the update set, and the commit.

Not in ``FederatedRun.round`` and so reported apart: the checkpoint's
``store.state_dict()`` (the run clones the staged rows — and, for the in-RAM store, every
row — into each round's checkpoint), and ``GradCorrection.apply``, which SCAFFOLD adds to
every local step inside the trainer (training time, per step, not per update).
A second table times the individual per-client operations in isolation.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import footer, header, median_time, print_table, set_threads
from geofl import plugins
from geofl.algorithms.scaffold import CONTROL_DELTA
from geofl.client.batched import BatchedClients, BatchJob
from geofl.client.data import ClientData
from geofl.client.release import RELEASE_STEPS, apply_release
from geofl.client.state import ClientState
from geofl.client.step import ClientProgram, ClientStreams, client_step
from geofl.client.trainer import (
    LOCAL_TRAINERS,
    GradCorrection,
    LocalSGD,
    LocalTrainParams,
    StatelessTrainer,
)
from geofl.config.schema import ExperimentConfig
from geofl.data.base import SENTINEL2_BANDS, ArrayDataset
from geofl.engine.components import PreparedData
from geofl.engine.experiment import build_partition
from geofl.engine.run import FederatedRun
from geofl.models.base import MODELS, FlatModel
from geofl.registry import NoParams
from geofl.rng import numpy_generator, torch_generator
from geofl.server.strategy import UpdateBatch
from geofl.server.validate import validate_update
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives, ClientUpdate, UpdateMeta

TARGET_MS = 1.0
TRAINER_KEY = "bench_noop"
#: Seconds spent inside the no-op trainer during the current round.
NOOP_TIME = [0.0]


class NoopTrainer(StatelessTrainer):
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
        correction: GradCorrection | None = None,
    ) -> ClientUpdate:
        """No training: wrap the precomputed delta with this client's metadata."""
        t0 = time.perf_counter()
        meta = UpdateMeta(
            client_id=data.client_id,
            num_samples=len(data),
            round=directives.round,
            label_histogram=data.label_histogram,
            train_loss=0.0,
            train_metrics={"accuracy": 0.0},
            steps=1,  # one "local step", so SCAFFOLD's option II divides by η_l ‖a‖₁ > 0
            bytes_sent=self.delta.numel() * self.delta.element_size(),
        )
        update = ClientUpdate(self.delta, meta)
        NOOP_TIME[0] += time.perf_counter() - t0
        return update


@LOCAL_TRAINERS.register(TRAINER_KEY)
def build_noop(_: NoParams, *, workspace: FlatModel, train: LocalTrainParams, task: Any) -> Any:
    """No-op trainer returning a fixed random update (benchmark only)."""
    return NoopTrainer(workspace.spec.numel)


def settings(clip_bound: float) -> dict[str, tuple[dict[str, Any], str]]:
    """Label → (method fields, client_state) of each timed setting."""
    clip = [{"name": "l2_clip", "bound": clip_bound}]
    scaffold = {"algorithm": {"name": "scaffold"}}
    return {
        "fedavg": ({}, "memory"),
        "fedavg+l2_clip": ({"release": clip}, "memory"),
        "scaffold": (scaffold, "memory"),
        "scaffold-mmap": (scaffold, "mmap"),
    }


def make_run(
    args: argparse.Namespace, method: dict[str, Any], client_state: str, out: Path
) -> FederatedRun:
    """A FederatedRun of K clients with tiny random data and the no-op trainer."""
    plugins.load_all()
    k, per_client, size = args.clients, 4, 16
    cfg = ExperimentConfig.model_validate(
        {
            "name": "bench-client-overhead",
            "model": {"name": args.model, "params": {}},
            "federation": {
                "num_clients": k,
                "participation": 1.0,
                "rounds": args.rounds,
                "client_state": client_state,
            },
            "methods": [{"name": "noop", "trainer": {"name": TRAINER_KEY}, **method}],
        }
    )
    gen = torch.Generator().manual_seed(0)
    n = k * per_client + 20

    def dataset(m: int) -> ArrayDataset:
        return ArrayDataset(
            torch.randn(m, len(SENTINEL2_BANDS), size, size, generator=gen),
            torch.arange(m) % 10,
            tuple(f"c{i}" for i in range(10)),
            SENTINEL2_BANDS,
        )

    train = dataset(n)
    part = build_partition(cfg, cfg.methods[0], train, np.arange(n), seed=1)
    data = PreparedData(train, dataset(10), dataset(10))
    return FederatedRun(cfg, cfg.methods[0], 1, data, part, out)


def one_round(
    run: FederatedRun, params: torch.Tensor, r: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``FederatedRun.round`` split in its two calls, each timed; returns params and times."""
    NOOP_TIME[0] = 0.0
    t0 = time.perf_counter()
    out = run.scheduler.round(params, r)
    t1 = time.perf_counter()
    run.comps.store.commit()
    t2 = time.perf_counter()
    rec = out.record
    if len(rec.participants) != len(run.clients):
        raise SystemExit(f"round {r}: only {len(rec.participants)} updates accepted")
    ts = rec.time_s
    row = {
        "update": t2 - t0,
        "aggregate": ts["aggregate"],
        "client_step": ts["train"],
        "noop trainer": NOOP_TIME[0],
        "loop after step": ts["total"] - ts["train"] - ts["aggregate"],
        "hash + record": (t1 - t0) - ts["total"],
        "commit": t2 - t1,
        "mb_up": rec.bytes_up / 1e6,
    }
    return out.params, row


def time_rounds(runs: dict[str, FederatedRun], warmup: int, rounds: int) -> dict[str, Any]:
    """Median per-round timings (s) of each run, rounds interleaved across the runs."""
    params = {label: run.init_params for label, run in runs.items()}
    samples: dict[str, dict[str, list[float]]] = {label: {} for label in runs}
    for r in range(1, warmup + rounds + 1):
        for label, run in runs.items():
            params[label], row = one_round(run, params[label], r)
            if r > warmup:
                for key, val in row.items():
                    samples[label].setdefault(key, []).append(val)
    return {label: {k: statistics.median(v) for k, v in s.items()} for label, s in samples.items()}


def state_dict_time(run: FederatedRun, r: int, repeats: int) -> float:
    """Median s of the checkpoint's ``store.state_dict()`` with a full round staged."""
    params = run.init_params
    run.scheduler.round(params, r)  # stages K rows
    t, _ = median_time(run.comps.store.state_dict, repeats=repeats, warmup=1)
    run.comps.store.commit()
    return t


def micro(runs: dict[str, FederatedRun], repeats: int) -> list[list[Any]]:
    """Median µs of each per-client (and per-round) engine operation in isolation."""
    fed, scaf = runs["fedavg"], runs["scaffold"]
    params = fed.init_params
    k = len(fed.clients)
    client = fed.clients[0]
    trainer = fed.comps.program.trainer
    d = ClientDirectives(2, 0)
    update = trainer(params, client, d, torch_generator(1, "x"))
    clip = RELEASE_STEPS.build("l2_clip", {"bound": 1.0})

    plan = scaf.comps.strategy.configure(2, list(range(k)))
    sd = ClientDirectives(2, 0, {}, plan.payload)
    alg, store = scaf.comps.program.algorithm, scaf.comps.store
    state = store.get(0)
    s_update, new_tensors = alg.finish(
        update, state, sd, scaf.comps.program.train, global_params=params
    )
    correction = alg.correction(params, state, sd)
    assert correction is not None
    grad = torch.zeros(scaf.dim)
    staged = ClientState(new_tensors)
    buf = torch.empty(k, fed.dim)
    metas = [update.meta] * k

    def fed_batch() -> UpdateBatch:
        return UpdateBatch(torch.stack([update.delta] * k), metas, {}, k)

    def scaf_batch() -> UpdateBatch:
        stacked = torch.stack([update.delta] * k)
        return UpdateBatch(stacked, metas, {CONTROL_DELTA: stacked.clone()}, k)

    fb, sb = fed_batch(), scaf_batch()
    kept = torch.ones(k, dtype=torch.bool)

    def stage_commit() -> None:
        for c in range(k):
            store.stage(c, staged)
        store.commit()

    cases: list[tuple[str, str, Callable[[], Any]]] = [
        ("torch_generator(keys) (×2 per client)", "client", lambda: torch_generator(1, "r", 2)),
        ("numpy_generator(keys) (network)", "client", lambda: numpy_generator(1, "r", 2)),
        (
            "network model call",
            "client",
            lambda: fed.comps.network(update.meta, numpy_generator(1, "r", 2)),
        ),
        ("validate_update (Δw)", "client", lambda: validate_update(update, fed.dim)),
        (
            "validate_update (Δw + Δc, SCAFFOLD)",
            "client",
            lambda: validate_update(s_update, scaf.dim, (CONTROL_DELTA,)),
        ),
        (
            "row copy_ into [K, D] buffer (×2 SCAFFOLD)",
            "client",
            lambda: buf[1].copy_(update.delta),
        ),
        ("no-op trainer call", "client", lambda: trainer(params, client, d, None)),  # type: ignore[arg-type]
        (
            "run_client, FedAvg (no release)",
            "client",
            lambda: fed.scheduler.run_client(params, 0, d),
        ),
        ("run_client, SCAFFOLD", "client", lambda: scaf.scheduler.run_client(params, 0, sd)),
        ("  store.get(k)", "client", lambda: store.get(0)),
        (
            "  ScaffoldClient.correction (c − c_k)",
            "client",
            lambda: alg.correction(params, state, sd),
        ),
        (
            "  ScaffoldClient.finish (c_k⁺, Δc_k)",
            "client",
            lambda: alg.finish(update, state, sd, scaf.comps.program.train, global_params=params),
        ),
        (
            "apply_release([l2_clip])",
            "client",
            lambda: apply_release(
                update, [clip], data=client, directives=d, generator=torch_generator(1, "x")
            ),
        ),
        ("  l2_clip: vector_norm(delta)", "client", lambda: torch.linalg.vector_norm(update.delta)),
        ("  l2_clip: delta * scale (new tensor)", "client", lambda: update.delta * 0.5),
        (
            "GradCorrection.apply (per local STEP, in training)",
            "client",
            lambda: correction.apply(grad, params, None),
        ),
        (
            f"FedAvg strategy.aggregate (K={k})",
            "round",
            lambda: fed.comps.strategy.aggregate(2, params, fb),
        ),
        (
            f"SCAFFOLD strategy.aggregate (K={k}, + control)",
            "round",
            lambda: scaf.comps.strategy.aggregate(2, params, sb),
        ),
        (
            "  Δc[kept] (boolean-index copy of all K rows)",
            "round",
            lambda: sb.tensors[CONTROL_DELTA][kept],
        ),
        ("  Δc.mean(dim=0)", "round", lambda: sb.tensors[CONTROL_DELTA].mean(dim=0)),
        (f"SCAFFOLD store: stage {k} rows + commit (RAM)", "round", stage_commit),
        (
            f"sha256 of the [{k}, D] update set (hashing)",
            "round",
            lambda: hashlib.sha256(fb.deltas.numpy().data).hexdigest(),
        ),
    ]
    rows = []
    for name, per, fn in cases:
        number = 20 if per == "client" else 3
        t, _ = median_time(fn, repeats=repeats, warmup=2, number=number)
        per_client = t if per == "client" else t / k
        rows.append([name, per, t * 1e6, per_client * 1e3])
    store.commit()
    return rows


#: ``--batched``: the models compared (name, params, input shape of one sample).
BATCHED_MODELS: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "small MLP": ("mlp", {"hidden": [32]}, (13,)),
    "small CNN": ("small_cnn", {"width": 8, "blocks": 2}, (13, 8, 8)),
}


def _cohort(shape: tuple[int, ...], k: int, n: int) -> list[ClientData]:
    """K clients of ``n`` random samples of ``shape`` and 10 classes."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(k * n, *shape, generator=gen)
    y = torch.randint(0, 10, (k * n,), generator=gen)
    out = []
    for i in range(k):
        rows = slice(i * n, (i + 1) * n)
        hist = np.bincount(y[rows].numpy(), minlength=10)
        out.append(ClientData(i, x[rows], y[rows], hist))
    return out


def _per_client_us(label: str, k: int, seq_max: int, n: int = 4) -> tuple[float, float, int]:
    """(sequential, batched) µs per client step of one local SGD step of batch ``n``, and
    how many clients the sequential loop was timed on (at most ``seq_max``)."""
    name, params, shape = BATCHED_MODELS[label]
    plugins.load_all()
    module = MODELS.build(
        name, params, in_channels=shape[0], num_classes=10, generator=torch_generator(0, "m")
    )
    ws, task = FlatModel(module), ClassificationTask(10)
    train = LocalTrainParams(batch_size=n, local_steps=1)
    program = ClientProgram(trainer=LocalSGD(ws, train, task), train=train)
    start = ws.snapshot()
    jobs = [
        BatchJob(
            start,
            c,
            ClientState({}, ()),
            ClientDirectives(1, c.client_id, {}, {}),
            ClientStreams((1, "round", 1, "client", c.client_id)),
        )
        for c in _cohort(shape, k, n)
    ]
    seq_jobs = jobs[: min(k, seq_max)]
    for j in jobs[:3]:  # warm-up (first optimiser, first kernels)
        client_step(program, j.params, j.data, j.state, j.directives, j.streams)
    t0 = time.perf_counter()
    for j in seq_jobs:
        client_step(program, j.params, j.data, j.state, j.directives, j.streams)
    seq = (time.perf_counter() - t0) / len(seq_jobs)
    batched = BatchedClients(program, ws, task)
    batched.run(jobs[: min(k, 8)])  # warm-up (vmap tracing)
    t0 = time.perf_counter()
    batched.run(jobs)
    bat = (time.perf_counter() - t0) / k
    return 1e6 * seq, 1e6 * bat, len(seq_jobs)


def batched_vs_sequential(args: argparse.Namespace) -> None:
    """``--batched``: issue 36's batched client step against the sequential one, per client
    (one local SGD step of batch 4, the client step only), at K = 100 and K = 10,000, for
    the small MLP and the small CNN, in this one process."""
    rows = []
    for label in BATCHED_MODELS:
        for k in (100, args.large):
            seq, bat, timed = _per_client_us(label, k, args.seq_max)
            rows.append([label, k, timed, seq, bat, seq / bat])
    print_table(
        ["model", "K", "seq timed on", "sequential µs/client", "batched µs/client", "ratio"],
        rows,
        title="client step per client (µs); sequential timed on its first 'seq timed on' "
        "clients (its cost per client does not depend on K)",
    )


def main() -> None:
    """Parse arguments, time interleaved rounds of every setting, print tables."""
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
    parser.add_argument(
        "--batched", action="store_true", help="batched vs sequential client steps (issue 36)"
    )
    parser.add_argument("--large", type=int, default=10_000, help="--batched: the large K")
    parser.add_argument(
        "--seq-max", type=int, default=1000, help="--batched: sequential clients timed"
    )
    args = parser.parse_args()
    set_threads(args.threads)
    if args.quick:
        args.rounds, args.warmup, args.repeats = 3, 1, 3
    header("bench_client_overhead", args)
    if args.batched:
        batched_vs_sequential(args)
        footer(t_start)
        return

    with tempfile.TemporaryDirectory(prefix="geofl-bench-client-") as tmp:
        runs = {
            label: make_run(args, method, state, Path(tmp) / label)
            for label, (method, state) in settings(args.clip_bound).items()
        }
        med = time_rounds(runs, args.warmup, args.rounds)
        n_sd = args.warmup + args.rounds + 1
        ckpt = {label: state_dict_time(run, n_sd, args.repeats) for label, run in runs.items()}
        rows = []
        for label, run in runs.items():
            k, m = len(run.clients), med[label]
            per = {key: 1e3 * v / k for key, v in m.items()}
            rows.append(
                [
                    label,
                    k,
                    run.dim,
                    m["mb_up"],
                    1e3 * m["update"],
                    per["update"],
                    per["update"] - per["aggregate"],
                    per["client_step"],
                    per["client_step"] - per["noop trainer"],
                    per["loop after step"],
                    per["aggregate"],
                    per["hash + record"],
                    per["commit"],
                    1e3 * ckpt[label] / k,
                ]
            )
        print_table(
            [
                "setting",
                "K",
                "D",
                "MB up",
                "round ms",
                "update/K",
                "(−agg)/K",
                "client_step/K",
                "  −trainer",
                "net+val+copy/K",
                "agg/K",
                "hash/K",
                "commit/K",
                "ckpt state/K",
            ],
            rows,
            title=f"Per-client-update engine time in ms (median of {args.rounds} interleaved "
            f"rounds after {args.warmup} warm-up); round = FederatedRun.round (scheduler + "
            f"commit); 'ckpt state/K' = the checkpoint's store.state_dict(), outside it; "
            f"target update/K ≤ {TARGET_MS:g} ms",
        )
        for row in rows:
            verdict = [
                f"{name} {val:.3f} ms {'met' if val <= TARGET_MS else 'MISSED'}"
                for name, val in (("update/K", row[5]), ("(−agg)/K", row[6]))
            ]
            print(f"{row[0]}: " + "; ".join(verdict))
        by = {row[0]: row for row in rows}
        fa, sc = by["fedavg"][5], by["scaffold"][5]
        print(
            f"per-client update, K = {by['fedavg'][1]}, D = {by['fedavg'][2]:,}: FedAvg "
            f"{fa:.3f} ms | SCAFFOLD {sc:.3f} ms ({sc / fa:.2f}× FedAvg, "
            f"{by['scaffold'][3] / by['fedavg'][3]:.1f}× the bytes up) | SCAFFOLD mmap store "
            f"{by['scaffold-mmap'][5]:.3f} ms; target ≤ {TARGET_MS:g} ms: "
            f"{'met' if sc <= TARGET_MS else 'MISSED'}"
        )
        print_table(
            ["operation", "per", "median µs/call", "ms per client update"],
            micro(runs, args.repeats),
            title="Engine operations in isolation (K-wide ones divided by K in the last column)",
        )
    footer(t_start)


if __name__ == "__main__":
    main()
