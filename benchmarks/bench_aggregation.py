"""Throughput of the FedAvg aggregator ``weighted_mean`` over ``[K, D]`` float32 updates.

Usage::

    .venv/bin/python benchmarks/bench_aggregation.py [--quick] [--repeats 7] [--threads 2]

What is measured and why: aggregation reads every byte of the round's ``[K, D]`` update
tensor once, so it is memory-bound and should run at the speed of the simplest reduction
over the same tensor. For K ∈ {10, 100} and D ∈ {1e5 (small CNN), 1.1e7 (ResNet-18)} the
script times

* ``weighted_mean(updates, weights)`` (``geofl.server.aggregators``),
* ``updates.mean(0)``, the reference reduction over the same tensor (target ratio ≈ 1×),
* the flat server tier (``FlatTier``: data-size weighting, then ``weighted_mean``), which is
  what the engine actually calls once per round, to expose any copy it makes on the way,
  and ``updates[idx]`` for ``idx = arange(K)`` (the row gather ``FlatTier`` performs).

``weighted_mean`` and ``mean(0)`` are timed round-robin within each repeat, so their ratio
holds even when the load of a shared machine changes mid-run (the tier path is timed apart,
with fewer repeats). Reported: median seconds per call, GB/s of update
bytes read (K·D·4 / time) and ratios to ``mean(0)``. The largest tensor (K=100 × D=1.1e7,
4.4 GB) is allocated once and every smaller case is a contiguous view of its first K·D
elements; ``--quick`` skips D=1.1e7.
"""

from __future__ import annotations

import argparse
import time

import torch

from _common import footer, header, interleaved_medians, print_table, set_threads
from geofl.registry import NoParams
from geofl.server.aggregators import build_mean, weighted_mean
from geofl.server.tier import FlatTier
from geofl.server.weighting import data_size_weights
from geofl.update import UpdateMeta

TARGET_RATIO = 1.0


def main() -> None:
    """Parse arguments, time every (K, D) case, print the table."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="D=1e5 only, fewer repeats")
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--ds", type=float, nargs="+", default=[1e5, 1.1e7])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tier-repeats", type=int, default=3, help="repeats of the tier path")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-tier", action="store_true", help="skip the FlatTier column")
    args = parser.parse_args()
    set_threads(args.threads)
    if args.quick:
        args.ds = [d for d in args.ds if d <= 1e6] or [1e5]
        args.repeats, args.tier_repeats = min(args.repeats, 3), 1
    header("bench_aggregation", args)

    ks, ds = sorted(args.ks), sorted(int(d) for d in args.ds)
    gen = torch.Generator().manual_seed(0)
    storage = torch.empty(max(ks) * max(ds), dtype=torch.float32).uniform_(-1, 1, generator=gen)
    tier = FlatTier(data_size_weights, build_mean(NoParams()))

    rows = []
    for d in ds:
        for k in ks:
            updates = storage[: k * d].view(k, d)
            sizes = torch.randint(20, 500, (k,), generator=gen)
            weights = sizes.to(torch.float32)
            metas = [
                UpdateMeta(client_id=i, num_samples=int(n), round=1) for i, n in enumerate(sizes)
            ]
            # Many small calls per repeat for D=1e5 so that one repeat lasts > ~10 ms.
            number = max(1, int(2e8 // (k * d)))
            warm = 1 if k * d > 1e8 else 3
            med = interleaved_medians(
                {
                    "wmean": lambda u=updates, w=weights: weighted_mean(u, w),
                    "mean": lambda u=updates: u.mean(0),
                },
                repeats=args.repeats,
                warmup=warm,
                number=number,
            )
            t_wm, t_mean = med["wmean"], med["mean"]
            t_tier = t_copy = float("nan")
            if not args.no_tier:
                # Timed apart (fewer repeats): each call allocates and page-faults a K×D copy.
                idx = torch.arange(k)
                med = interleaved_medians(
                    {
                        "tier": lambda u=updates, m=metas: tier(u, m, 1),
                        # What FlatTier does before aggregating: updates[kept rows], a copy.
                        "copy": lambda u=updates, i=idx: u[i],
                    },
                    repeats=args.tier_repeats,
                    warmup=1,
                    number=number,
                )
                t_tier, t_copy = med["tier"], med["copy"]
            check = torch.allclose(
                weighted_mean(updates, torch.ones(k)), updates.mean(0), rtol=1e-4, atol=1e-6
            )
            gbytes = k * d * 4 / 1e9
            rows.append(
                [
                    k,
                    f"{d:.3g}",
                    round(gbytes, 4),
                    t_wm * 1e3,
                    gbytes / t_wm,
                    t_mean * 1e3,
                    gbytes / t_mean,
                    t_wm / t_mean,
                    t_tier * 1e3,
                    t_tier / t_mean,
                    t_copy * 1e3,
                    "ok" if check else "MISMATCH",
                ]
            )
            del updates
    print_table(
        [
            "K",
            "D",
            "GB in",
            "wmean ms",
            "wmean GB/s",
            "mean(0) ms",
            "mean GB/s",
            "wmean/mean",
            "tier ms",
            "tier/mean",
            "u[idx] ms",
            "uniform==mean",
        ],
        rows,
        title=f"weighted_mean vs updates.mean(0) (median of {args.repeats}); "
        f"target wmean/mean ≈ {TARGET_RATIO:g}×",
    )
    worst = max(r[7] for r in rows)
    print(
        f"\nworst weighted_mean/mean(0) ratio: {worst:.2f}× "
        f"(target ≈ {TARGET_RATIO:g}×: {'met' if worst <= 1.25 else 'MISSED'}, tolerance 1.25×)"
    )
    if not args.no_tier:
        worst_tier = max(r[9] for r in rows)
        print(f"worst FlatTier/mean(0) ratio: {worst_tier:.2f}× (engine's per-round aggregation)")
    footer(t_start)


if __name__ == "__main__":
    main()
