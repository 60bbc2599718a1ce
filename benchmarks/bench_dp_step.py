"""DP-SGD step cost against a plain step, with Opacus's own engine side by side, and the
per-round cost of record-level privacy accounting for 100 clients.

Usage::

    .venv/bin/python benchmarks/bench_dp_step.py [--quick] [--threads 1]
        [--only steps|models|accountant]

What is measured and why (issue: paper 001, DP-SGD):

* one local step on the small CNN (``small_cnn`` defaults, 13 bands, 32×32, ≈98k
  parameters), batch B = 64: geofl's plain ``local_sgd`` step; geofl's ``dp_sgd`` step
  (Poisson batch with q = 64/640, per-sample clipping, noise) with the ``bk`` engine
  (book-keeping: one forward, one backward, ghost norms; the default), the ``func`` engine
  (torch.func) and the ``opacus`` engine (Opacus's grad-sample hooks) at micro-batches
  16/32/64; and, as the reference ratio, **Opacus's own engine** —
  ``GradSampleModule`` + ``DPOptimizer`` (clip, noise, step) on the same model and batch.
  Target: geofl's DP step ÷ plain step ≤ 1.5×. Each trainer runs 5 steps per call; the
  settings are interleaved call by call so that ratios see the same machine load. Each
  row gives the median wall time, the median process CPU time (on a shared machine the
  wall time also counts the time other processes held the core; CPU time does not) and
  the median minor page faults per step (fresh pages: ~4.5 µs each on the benchmark VM,
  and the main source of the spread between runs).
* the same ratios on every model family dp_sgd takes: ``small_cnn``, ``mlp`` (32 tabular
  features, hidden 256/128) and ``resnet18_spdp_small`` (13 bands, 16×16 px as the
  paper-001 presets; dropout 0.3, spectral attention): plain step, ``func`` and ``bk`` at
  micro-batch 16 (the presets') and 64 (= B).
* the accountant: each of 100 clients records one round of DP-SGD (a
  ``SelfComposed(PoissonSampled(q, Gaussian(σ)), 50)`` event) on top of 20 earlier rounds
  and reports ε(δ = 1e-5) — RDP with the per-(q, σ) curve cache warm (clients share few
  distinct q) and cold (100 distinct q never seen: 100 new curves from
  ``geofl.privacy.rdp_sampled_gaussian``), and, for reference, cold with the curves from
  dp_accounting's per-order Python loops (the path before). Target: ≤ 50 ms per round.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch import nn

from _common import footer, header, interleaved_costs, print_table, set_threads
from geofl.client.data import ClientData
from geofl.client.dpsgd import DpSgd, DpSgdParams
from geofl.client.trainer import LocalSGD, LocalTrainParams
from geofl.models import MODELS, FlatModel
from geofl.plugins import ACCOUNTANTS, load_all
from geofl.privacy.accounting import dp_event_from_spec
from geofl.rng import torch_generator
from geofl.tasks.classification import ClassificationTask
from geofl.update import ClientDirectives

STEPS = 5
N, B, BANDS, SIZE, CLASSES = 640, 64, 13, 32, 10


def _model() -> nn.Module:
    return MODELS.build(
        "small_cnn", {}, in_channels=BANDS, num_classes=CLASSES, generator=torch_generator(0)
    )


def _data() -> ClientData:
    g = torch_generator(1, "bench")
    y = torch.randint(0, CLASSES, (N,), generator=g)
    return ClientData(
        0,
        torch.randn(N, BANDS, SIZE, SIZE, generator=g),
        y,
        torch.bincount(y, minlength=CLASSES).numpy(),
    )


def _opacus_step_fn(data: ClientData) -> Any:
    """Opacus's engine: GradSampleModule + DPOptimizer on the same model, Poisson batches."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    model = _model()
    model.channels_last = False  # type: ignore[assignment]  # Opacus's conv rule needs it
    for mod in model.modules():
        if isinstance(mod, nn.ReLU):
            mod.inplace = False
    gsm = GradSampleModule(model)
    opt = DPOptimizer(
        torch.optim.SGD(gsm.parameters(), lr=0.01),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        expected_batch_size=B,
    )
    gen = torch_generator(2, "opacus")

    def run() -> None:
        for _ in range(STEPS):
            idx = (torch.rand(N, generator=gen) < B / N).nonzero().flatten()
            opt.zero_grad()
            nn.functional.cross_entropy(gsm(data.inputs[idx]), data.targets[idx]).backward()
            opt.step()

    return run


def _trainer_fn(trainer: Any, data: ClientData, w0: torch.Tensor) -> Any:
    d = ClientDirectives(1, 0)
    return lambda: trainer(w0, data, d, torch_generator(3, "bench"))


def bench_steps(repeats: int) -> list[list[Any]]:
    data = _data()
    task = ClassificationTask(CLASSES)
    train = LocalTrainParams(
        lr=0.01, momentum=0.0, weight_decay=0.0, batch_size=B, local_steps=STEPS
    )
    plain = LocalSGD(FlatModel(_model()), train, task)
    w0 = plain.workspace.snapshot()
    fns = {"plain local_sgd": _trainer_fn(plain, data, w0)}
    for engine in ("bk", "func", "opacus"):
        for micro in (16, 32, 64):
            params = DpSgdParams(noise_multiplier=1.0, clip=1.0, micro_batch=micro, engine=engine)
            tr = DpSgd(FlatModel(_model()), train, task, params)
            fns[f"dp_sgd {engine} micro {micro}"] = _trainer_fn(tr, data, w0)
    fns["Opacus engine (GradSampleModule+DPOptimizer)"] = _opacus_step_fn(data)
    return _cost_rows([], fns, "plain local_sgd", repeats)


def _cost_rows(prefix: list[Any], fns: dict[str, Any], base: str, repeats: int) -> list[list[Any]]:
    """Rows ``[*prefix, name, wall ms, ÷ base, CPU ms, ÷ base (CPU), page faults]`` per step."""
    t = interleaved_costs(fns, repeats=repeats, warmup=1)
    wall, cpu, _ = t[base]
    return [
        [*prefix, name, 1e3 * w / STEPS, w / wall, 1e3 * c / STEPS, c / cpu, f / STEPS]
        for name, (w, c, f) in t.items()
    ]


#: Model family → (params, input shape of one example) for the per-model table.
MODEL_CASES: dict[str, tuple[dict[str, Any], tuple[int, ...]]] = {
    "small_cnn": ({}, (BANDS, SIZE, SIZE)),
    "mlp": ({}, (32,)),
    "resnet18_spdp_small": ({}, (BANDS, 16, 16)),
}


def _build(name: str, params: dict[str, Any], in_channels: int) -> nn.Module:
    return MODELS.build(
        name, params, in_channels=in_channels, num_classes=CLASSES, generator=torch_generator(0)
    )


def bench_models(repeats: int) -> list[list[Any]]:
    """Plain, func and bk steps on each model family, interleaved per model."""
    task = ClassificationTask(CLASSES)
    train = LocalTrainParams(
        lr=0.01, momentum=0.0, weight_decay=0.0, batch_size=B, local_steps=STEPS
    )
    rows: list[list[Any]] = []
    for name, (params, shape) in MODEL_CASES.items():
        g = torch_generator(1, "bench", name)
        y = torch.randint(0, CLASSES, (N,), generator=g)
        data = ClientData(
            0, torch.randn(N, *shape, generator=g), y, torch.bincount(y, minlength=CLASSES).numpy()
        )

        plain = LocalSGD(FlatModel(_build(name, params, shape[0])), train, task)
        w0 = plain.workspace.snapshot()
        fns = {"plain": _trainer_fn(plain, data, w0)}
        for engine in ("func", "bk"):
            for micro in (16, 64):
                dp = DpSgdParams(noise_multiplier=1.0, clip=1.0, micro_batch=micro, engine=engine)
                tr = DpSgd(FlatModel(_build(name, params, shape[0])), train, task, dp)
                fns[f"{engine} micro {micro}"] = _trainer_fn(tr, data, w0)
        rows += _cost_rows([name], fns, "plain", repeats)
    return rows


def _dp_accounting_curve(*, q: float, noise_multiplier: float, orders: Any) -> Any:
    """The per-release RDP curve from dp_accounting's per-order loops (the path
    ``_rdp_per_release`` took before the vectorised sums), for the reference row."""
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant(list(orders))
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(noise_multiplier)))
    return acc.rdp


def bench_accountant(rounds: int = 20, clients: int = 100) -> list[list[Any]]:
    from unittest import mock

    from geofl.privacy import accounting

    def spec(q: float) -> dict[str, Any]:
        return {
            "mechanism": "poisson_gaussian",
            "noise_multiplier": 1.0,
            "sampling_probability": q,
            "count": 50,
        }

    warm_qs = [0.02 + 0.001 * (k % 3) for k in range(clients)]
    cold_qs = [0.03 + 1e-5 * k for k in range(clients)]
    rows: list[list[Any]] = []
    for label, qs, curve in (
        ("warm cache (3 distinct q)", warm_qs, accounting.rdp_poisson_gaussian),
        ("cold cache (100 new q)", cold_qs, accounting.rdp_poisson_gaussian),
        ("cold, dp_accounting's per-order loops", cold_qs, _dp_accounting_curve),
    ):
        accounting._rdp_per_release.cache_clear()
        with mock.patch.object(accounting, "rdp_poisson_gaussian", curve):
            acc = ACCOUNTANTS.build("rdp", {})
            warm_q = qs if label.startswith("warm") else [0.02] * clients
            for k in range(clients):
                for _ in range(rounds):
                    acc.record(k, dp_event_from_spec(spec(warm_q[k])))
            t0 = time.perf_counter()
            eps = []
            for k in range(clients):
                acc.record(k, dp_event_from_spec(spec(qs[k])))
                eps.append(acc.epsilon(k, 1e-5))
            rows.append([label, 1e3 * (time.perf_counter() - t0), max(eps)])
    accounting._rdp_per_release.cache_clear()
    for row in rows:
        row.insert(2, row[1] / rows[0][1])
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats (smoke test)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--only",
        choices=["steps", "models", "accountant"],
        help="run one part (steps and models also run the accountant rows)",
    )
    args = p.parse_args()
    set_threads(args.threads)
    load_all()
    t_start = time.perf_counter()
    header("bench_dp_step", args)
    repeats = 2 if args.quick else 7
    if args.only not in ("models", "accountant"):
        print_table(
            ["setting", "ms / step", "÷ plain step", "CPU ms / step", "÷ plain (CPU)", "faults"],
            bench_steps(repeats),
            title=f"One local step, small_cnn, B = {B} (median of interleaved calls)",
        )
    if args.only not in ("steps", "accountant"):
        print_table(
            ["model", "setting", "ms / step", "÷ plain step", "CPU ms", "÷ plain (CPU)", "faults"],
            bench_models(repeats),
            title=f"One local step per model family, B = {B} (interleaved within each model)",
        )
    print_table(
        ["accountant, 100 clients", "ms / round", "÷ warm", "max ε"],
        bench_accountant(),
        title="RDP accounting of one round (record one DP-SGD round, report ε)",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
