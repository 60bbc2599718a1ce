"""DUAL-SHIELD's per-round overhead profile next to FedAvg's (004 Table 9).

Usage::

    .venv/bin/python benchmarks/bench_dual_shield_overhead.py [--clients 10]
        [--models small_cnn resnet18] [--runs 5] [--warmup 2] [--threads 2] [--quick]

What is measured (per round, mean ± SD over ``--runs`` rounds after ``--warmup`` warm-up
rounds, ``time.perf_counter``; K clients, D = the model's parameter count at 3 bands and
10 classes, updates a shared direction plus noise with one sign-flipped row):

* client: clipping + Gaussian noise of one client's ``[D]`` update
  (:func:`geofl.privacy.mechanisms.clip_and_noise`, the release step), per client;
* server: CGF cosine scoring + MAD threshold over ``[K, D]`` against the previous
  survivors' mean (:class:`geofl.server.cgf.CosineFilter`, 004 Eq. 6–7);
* server: HRA reputation update (Eq. 8) + weights (Eq. 9) + the weighted mean, against
  FedAvg's sample-size weighted mean (:func:`geofl.server.aggregators.weighted_mean`);
* server: the RDP accountant recording the round's K Gaussian releases and reading each
  client's cumulative ε (δ = 1e-5, 004 §2.8);
* peak resident memory (VmHWM, reset through ``/proc/self/clear_refs`` before each phase;
  torch's allocator is invisible to tracemalloc) of the client and the server phases.

Local training is not timed (identical under both, 004 Table 9: 1.00×); nor is the upload,
whose size DUAL-SHIELD does not change (4·D bytes). CPU only; the paper used an RTX 4060
with YOLOv5s (D ≈ 7.2M), so only orders of magnitude and ratios compare.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from _common import footer, header, print_table, set_threads
from geofl.models.cnn import SmallCNNParams, build_small_cnn
from geofl.models.resnet import ResNetParams, build_resnet18
from geofl.privacy.accounting import RdpParams, build_rdp, dp_event_from_spec
from geofl.privacy.mechanisms import clip_and_noise
from geofl.rng import torch_generator
from geofl.server.aggregators import weighted_mean
from geofl.server.cgf import CgfSettings, CosineFilter
from geofl.server.reputation import HraSettings, ReputationBook, reputation_weights

#: 004 Table 9, DUAL-SHIELD column (seconds; FedAvg aggregation 0.12 s).
PAPER = {
    "client clip+noise": "0.46 ± 0.05 s",
    "server cosine+MAD": "0.34 ± 0.04 s",
    "server reputation+aggregation": "0.29 ± 0.03 s (FedAvg 0.12)",
    "server accounting": "0.03 ± 0.01 s",
    "client peak memory": "5.91 GB GPU (FedAvg 5.72)",
    "server peak memory": "2.36 GB host (FedAvg 2.18)",
}
DELTA = 1e-5
CLIP = 1.0
SIGMA = 0.5


def model_dim(name: str) -> int:
    """Parameter count D of ``small_cnn`` or ``resnet18`` at 3 bands and 10 classes."""
    gen = torch_generator(0, "bench", name)
    if name == "small_cnn":
        model = build_small_cnn(SmallCNNParams(), in_channels=3, num_classes=10, generator=gen)
    else:
        model = build_resnet18(ResNetParams(), in_channels=3, num_classes=10, generator=gen)
    return sum(p.numel() for p in model.parameters())


def _reset_peak() -> bool:
    """Reset the process's peak RSS (Linux ≥ 4.0); False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    return float("nan")


def _timed(fn: Callable[[int], Any], runs: int, warmup: int) -> tuple[float, float, float]:
    """Mean and SD of seconds per round over ``runs`` after ``warmup``, and the peak RSS."""
    for r in range(warmup):
        fn(r)
    _reset_peak()
    times = []
    for r in range(warmup, warmup + runs):
        t0 = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t0)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    return statistics.mean(times), sd, _peak_rss_gb()


def _updates(k: int, d: int) -> torch.Tensor:
    """``[K, D]``: a shared direction + uniform noise; row 0 sign-flipped and ×5."""
    gen = torch_generator(0, "bench", "updates")
    u = torch.empty((k, d)).uniform_(-1, 1, generator=gen)
    u += torch.empty(d).uniform_(-1, 1, generator=gen)
    u[0] *= -5.0
    return u.mul_(0.01)


class Round:
    """One federation's server state and the round's updates, with one method per component."""

    def __init__(self, updates: torch.Tensor) -> None:
        self.u = updates
        k = updates.shape[0]
        self.released = torch.empty_like(updates)
        self.cgf = CosineFilter(CgfSettings())
        first = self.cgf.scores(updates)
        self.cgf.observe(updates[first.hard].mean(0), first)  # reference: previous survivors
        self.res = self.cgf.scores(updates)
        self.book = ReputationBook(HraSettings(), k)
        self.clients = torch.arange(k)
        self.sizes = torch.full((k,), 100.0)
        self.acc = build_rdp(RdpParams())
        self.event = {"mechanism": "gaussian", "noise_multiplier": SIGMA / (2 * CLIP)}

    def client_release(self, r: int) -> None:
        """Every client's clip + noise (the timing is divided by K)."""
        for j in range(self.u.shape[0]):
            gen = torch_generator(0, "bench", r, j)
            self.released[j], _ = clip_and_noise(self.u[j], clip=CLIP, sigma=SIGMA, generator=gen)

    def cosine_mad(self, _: int) -> None:
        self.cgf.scores(self.u)

    def reputation_aggregate(self, _: int) -> torch.Tensor:
        self.book.update(self.clients, self.res.hard, self.res.soft)
        w = reputation_weights(self.book.r[self.clients], self.res.hard)
        return w.to(self.u.dtype) @ self.u

    def fedavg(self, _: int) -> torch.Tensor:
        return weighted_mean(self.u, self.sizes)

    def accounting(self, _: int) -> list[float]:
        for j in range(self.u.shape[0]):
            self.acc.record(j, dp_event_from_spec(self.event))
        return [self.acc.epsilon(j, DELTA) for j in range(self.u.shape[0])]


def profile(name: str, k: int, runs: int, warmup: int) -> list[list[Any]]:
    """Table rows for one model: component, FedAvg, DUAL-SHIELD, overhead, paper."""
    d = model_dim(name)
    rnd = Round(_updates(k, d))

    def ms(t: tuple[float, float, float], per: int = 1) -> str:
        return f"{t[0] / per * 1e3:.2f} ± {t[1] / per * 1e3:.2f} ms"

    def plus(t: tuple[float, float, float], per: int = 1) -> str:
        return f"+{t[0] / per * 1e3:.2f} ms"

    rel = _timed(rnd.client_release, runs, warmup)
    cos = _timed(rnd.cosine_mad, runs, warmup)
    rep = _timed(rnd.reputation_aggregate, runs, warmup)
    avg = _timed(rnd.fedavg, runs, warmup)
    acc = _timed(rnd.accounting, runs, warmup)
    tag = f"{name} D={d:,}"
    return [
        [tag, "client clip+noise (per client)", "n/a", ms(rel, k), plus(rel, k)],
        [tag, "server cosine+MAD", "n/a", ms(cos), plus(cos)],
        [tag, "server reputation+aggregation", ms(avg), ms(rep), f"{rep[0] / avg[0]:.2f}×"],
        [tag, "server accounting", "n/a", ms(acc), plus(acc)],
        [tag, "client peak RSS", "-", f"{rel[2]:.2f} GB", "-"],
        [
            tag,
            "server peak RSS",
            f"{avg[2]:.2f} GB",
            f"{max(cos[2], rep[2]):.2f} GB",
            f"{max(cos[2], rep[2]) / avg[2]:.2f}×",
        ],
        [
            tag,
            "upload per client (FP32)",
            f"{4 * d / 1e6:.1f} MB",
            f"{4 * d / 1e6:.1f} MB",
            "1.00×",
        ],
    ]


def main() -> None:
    """Parse arguments, profile each model, print the table next to the paper's."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10, help="K")
    parser.add_argument("--models", nargs="+", default=["small_cnn", "resnet18"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke test: small_cnn, 2 runs")
    args = parser.parse_args()
    if args.quick:
        args.models, args.runs, args.warmup = ["small_cnn"], 2, 1
    set_threads(args.threads)
    header("bench_dual_shield_overhead", args)
    rows: list[list[Any]] = []
    for name in args.models:
        rows += profile(name, args.clients, args.runs, args.warmup)
    print_table(
        ["model", "component", "FedAvg", "DUAL-SHIELD", "overhead"],
        rows,
        title=f"Per-round overhead, K={args.clients}, mean ± SD over {args.runs} rounds after "
        f"{args.warmup} warm-up ({args.threads} threads, CPU)",
    )
    print_table(
        ["component", "004 Table 9 (YOLOv5s, RTX 4060)"],
        [[c, v] for c, v in PAPER.items()],
        title="Paper",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
