"""NQI transmission policy on simulated rural traces: pipeline shares vs 003 Table 8, and
the Eq. 5 weight grid search (231 candidates) with its run time.

Usage::

    .venv/bin/python benchmarks/bench_nqi_policy.py [--quick] [--tractors 120] [--rounds 100]

What is measured and why: 003 §3.1.3 fixes w = (0.35, 0.45, 0.20), τ_NQI = 0.35 and the
pipeline thresholds 0.55 / 0.75, and Table 8 reports the share of updates per pipeline
(52 / 31 / 17 %). The script draws held-out traces from the rural link model
(:mod:`geofl.network.rural`: 31 / 49 / 20 % 3G / 4G / 5G, Table 3 ranges, p_fail) for every
combination of the two readings the paper leaves open — normalisation by the tractor's
profile ranges or by all profiles, uniform or clipped-normal draws — and prints the skip
rate, the pipeline shares among transmitted updates and the delivery ratio under the
paper's weights. Payload sizes are the real encoded sizes of a D = 95 k update (Task A's
MLP). Then it runs the Eq. 5 grid search (λ = 0.05 /s; C_max = ∞, C_max = 20 kB per
scheduled update, and a delivery ratio ≥ 0.5 — our addition) on a trace from another seed
and prints w*, its p_fail, latency, bytes, delivery ratio and the search's wall time (the
paper: "minutes in our simulator").
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from _common import footer, header, print_table
from geofl.network.nqi import NqiParams, nqi, ranges_for
from geofl.network.pipelines import Pipeline, PipelineParams, choose_pipeline, encode_update
from geofl.network.rural import RuralParams, assign_profiles, sample_link_states
from geofl.network.tuning import Trace, tune_weights
from geofl.rng import numpy_generator

TABLE8 = {"compressed": 52.0, "chunked": 31.0, "fallback": 17.0}
PAPER = (Pipeline.COMPRESSED, Pipeline.CHUNKED, Pipeline.FALLBACK)


def trace(k: int, rounds: int, params: RuralParams, norm: str, seed: int) -> Trace:
    """``rounds`` rounds of ``k`` tractors' link states, flattened."""
    prof = assign_profiles(k, params.shares, seed)
    states = [sample_link_states(prof, params, seed, r) for r in range(1, rounds + 1)]
    return Trace(
        np.concatenate([s.values for s in states]),
        np.concatenate([ranges_for(prof, norm)] * rounds),
        np.concatenate([s.outage for s in states]),
    )


def main() -> None:
    """Parse arguments, print shares and the tuning result."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 rounds")
    parser.add_argument("--tractors", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--p-fail", type=float, default=0.1)
    args = parser.parse_args()
    if args.quick:
        args.rounds = 20
    header("bench_nqi_policy", args)
    x = torch.randn(95_000, generator=torch.Generator().manual_seed(0))
    sizes = {
        p: encode_update(x, p, PipelineParams(), rng=numpy_generator(1, "paq")).nbytes
        for p in Pipeline
    }
    print("encoded bytes per update (D = 95 k):", {p.value: n for p, n in sizes.items()})
    nq = NqiParams()
    rows = []
    for norm in ("per_profile", "global"):
        for dist in ("uniform", "clipped_normal"):
            params = RuralParams(p_fail=args.p_fail, distribution=dist)  # type: ignore[arg-type]
            tr = trace(args.tractors, args.rounds, params, norm, seed=1)
            score = nqi(tr.values, tr.ranges, np.array(nq.weights))
            choice = [choose_pipeline(float(s), nq.tau, nq.t_chunked, nq.t_fallback) for s in score]
            sent = [c for c in choice if c is not None]
            share = {p: 100.0 * sum(c is p for c in sent) / max(1, len(sent)) for p in PAPER}
            up = np.array([c is not None for c in choice]) & ~tr.outage
            rows.append(
                [
                    norm,
                    dist,
                    100.0 * (1 - len(sent) / len(choice)),
                    *(share[p] for p in PAPER),
                    100.0 * up.mean(),
                ]
            )
    print_table(
        [
            "normalisation",
            "draws",
            "skip %",
            "compressed %",
            "chunked %",
            "fallback %",
            "sent on an up link %",
        ],
        [*rows, ["003 Table 8", "", "–", *TABLE8.values(), "–"]],
        title=f"pipeline shares at w = {nq.weights}, τ = {nq.tau}, p_fail = {args.p_fail}",
    )
    val = trace(args.tractors, args.rounds, RuralParams(p_fail=args.p_fail), "per_profile", 7)
    out = []
    for c_max, min_del in ((float("inf"), 0.0), (20_000.0, 0.0), (float("inf"), 0.5)):
        t0 = time.perf_counter()
        res = tune_weights(
            val, sizes, nq, deadline_s=10.0, lam=0.05, c_max=c_max, min_delivery=min_del
        )
        dt = time.perf_counter() - t0
        b = res.best
        out.append(
            [
                f"{c_max:g}",
                min_del,
                str(tuple(round(w, 2) for w in res.weights)),
                float(res.p_fail[b]),
                float(res.latency_s[b]),
                float(res.bytes[b]),
                float(res.delivery[b]),
                int(res.feasible.sum()),
                dt * 1e3,
            ]
        )
    print_table(
        [
            "C_max B",
            "min delivery",
            "w*",
            "p_fail",
            "latency s",
            "bytes / update",
            "delivery",
            "feasible",
            "search ms",
        ],
        out,
        title=f"Eq. 5 grid search, 231 candidates, {len(val.outage)} held-out samples (seed 7)",
    )
    footer(t_start)


if __name__ == "__main__":
    main()
