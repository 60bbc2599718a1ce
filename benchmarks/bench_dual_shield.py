"""Cost of DUAL-SHIELD's server step (CGF + HRA, 004 Eq. 6–9) and of FLAME over ``[K, D]``.

Usage::

    .venv/bin/python benchmarks/bench_dual_shield.py [--clients 100] [--dim 1.1e7]
        [--repeats 3] [--threads 2] [--quick]

What is measured and why: 004 Table 9 reports the server's cosine scoring + MAD threshold
and the reputation update + weighted aggregation per round. On one tensor (default K=100 ×
D=1.1e7, ResNet-18 sized, 4.4 GB: a shared direction plus uniform(−1, 1) noise, 10 rows
sign-flipped and scaled ×5) the script times, round-robin within each repeat (ratios stay
meaningful when the load of a shared machine changes mid-run):

* ``weighted_mean``, FedAvg's combiner, the reference: at this size one streamed read of
  ``[K, D]`` by the compiled kernel of :mod:`geofl.server.kernels` on the worker threads
  (``geofl.server.columns.fused``). For context: ``mean(0)``, ``torch gemv`` (``α @ X``, the
  combiner below ``FUSED_MIN_BYTES`` and before the kernels; MKL runs it on one core
  whatever ``--threads`` says) and ``gemv 2 workers`` (the same product over the column
  ranges of :func:`geofl.server.columns.map_ranges`);
* ``cgf scores``: Eq. 6–7 and the soft mask against the previous survivors' mean (pass 1:
  ⟨Δw_j, r̄⟩ and ‖Δw_j‖² from one read, by the compiled kernel);
* ``pass 2``: Eq. 9's weighted mean and the survivors' mean from one blocked read into
  preallocated rows (:func:`geofl.server.columns.linear_combinations`), alone;
* ``cgf+hra``: the whole :class:`~geofl.algorithms.dual_shield.DualShieldStrategy` round —
  CGF, Eq. 8, and pass 2 with the server step, ‖Δw‖ and the history blend fused into its
  column chunks (target ≤ 2× weighted_mean: two passes over the updates);
* ``flame``: :class:`~geofl.algorithms.flame.FlameStrategy` — the ``[K, K]`` cosine Gram
  matrix (float64-accumulated), HDBSCAN, clipping, the weighted mean and N(0, σ²) noise.

Reported: median seconds per call, ratios to ``weighted_mean``, ``torch gemv`` and
``mean(0)`` of the same run, and a check: the attackers are flagged, and CGF+HRA's
aggregate matches a float64 recomputation from its own weights on the first columns.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from _common import footer, header, interleaved_medians, print_table, set_threads
from geofl.algorithms.dual_shield import DualShieldParams, DualShieldStrategy
from geofl.algorithms.flame import FlameStrategy
from geofl.server.aggregators import build_mean, weighted_mean
from geofl.server.columns import linear_combinations, map_ranges
from geofl.server.strategy import UpdateBatch
from geofl.server.tier import FlatTier
from geofl.server.weighting import uniform_weights
from geofl.update import UpdateMeta

TARGETS = {"cgf+hra": 2.0}
CHECK_COLUMNS = 20_000


def _updates(k: int, d: int, bad: int) -> torch.Tensor:
    """Shared direction + noise; the first ``bad`` rows sign-flipped and ×5."""
    gen = torch.Generator().manual_seed(0)
    u = torch.empty((k, d), dtype=torch.float32).uniform_(-1, 1, generator=gen)
    u += torch.empty(d).uniform_(-1, 1, generator=gen)
    u[:bad] *= -5.0
    return u


def main() -> None:
    """Parse arguments, build the tensor, time every method, print the table."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100, help="K")
    parser.add_argument("--dim", type=float, default=1.1e7, help="D")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke test: K=20, D=2e5")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.dim, args.repeats = 20, 2e5, 1
    set_threads(args.threads)
    header("bench_dual_shield", args)
    k, d = args.clients, int(args.dim)
    bad = k // 10
    updates = _updates(k, d, bad)
    print(f"   K={k} D={d:,} float32 ({k * d * 4 / 1e9:.2f} GB), {bad} sign-flipped ×5 rows")
    metas = [UpdateMeta(client_id=i, num_samples=100 + i, round=1) for i in range(k)]
    batch = UpdateBatch(updates, metas, num_clients=k)
    tier = FlatTier(uniform_weights, build_mean(None), ())  # type: ignore[arg-type]
    shield = DualShieldStrategy(tier, 1.0, DualShieldParams(), k)
    flame = FlameStrategy(tier, 1.0, 0.001, seed=0)
    params = torch.zeros(d)
    first = shield.aggregate(1, params, batch)  # round 1: the median reference; then previous
    sizes = torch.tensor([m.num_samples for m in metas], dtype=torch.float32)
    out: dict[str, Any] = {}

    def run_shield() -> None:
        out["shield"] = shield.aggregate(2, params, batch)

    alpha = sizes / sizes.sum()
    coeffs = torch.stack([alpha.double(), torch.full((k,), 1.0 / k, dtype=torch.float64)])
    rows = [torch.empty(d), torch.empty(d)]

    def gemv_workers() -> torch.Tensor:
        res = torch.empty(d)
        map_ranges(d, lambda lo, hi: torch.mv(updates[:, lo:hi].T, alpha, out=res[lo:hi]))
        return res

    fns: dict[str, Callable[[], Any]] = {
        "mean(0)": lambda: updates.mean(0),
        "weighted_mean": lambda: weighted_mean(updates, sizes),
        "torch gemv": lambda: alpha @ updates,
        "gemv 2 workers": gemv_workers,
        "cgf scores": lambda: shield.filter.scores(updates),
        "pass 2": lambda: linear_combinations(coeffs, updates, rows),
        "cgf+hra": run_shield,
        "flame": lambda: out.__setitem__("flame", flame.aggregate(2, params, batch)),
    }
    med = interleaved_medians(fns, repeats=args.repeats, warmup=1)
    checks = _checks(first, out, updates, bad)
    rows = []
    for name, t in med.items():
        target = TARGETS.get(name)
        ratio = t / med["weighted_mean"]
        verdict = "-" if target is None else ("met" if ratio <= target else "MISSED")
        rows.append(
            [
                name,
                t * 1e3,
                ratio,
                t / med["torch gemv"],
                t / med["mean(0)"],
                "-" if target is None else f"≤ {target:g}×",
                verdict,
                checks.get(name, "-"),
            ]
        )
    print_table(
        ["method", "ms", "× wmean", "× torch gemv", "× mean(0)", "target", "", "check"],
        rows,
        title=f"DUAL-SHIELD server step, K={k} × D={d:.3g} (median of {args.repeats}, "
        f"{args.threads} threads)",
    )
    footer(t_start)


def _checks(first: Any, out: dict[str, Any], updates: torch.Tensor, bad: int) -> dict[str, str]:
    """Attackers flagged, and CGF+HRA's aggregate against float64 on the first columns."""
    shield, flame = out["shield"], out["flame"]
    c = min(updates.shape[1], CHECK_COLUMNS)
    ref = shield.weights @ updates[:, :c].double()
    agg_ok = torch.allclose(shield.aggregate[:c].double(), ref, atol=1e-5)
    flagged = not bool(first.kept[:bad].any() or shield.kept[:bad].any())
    return {
        "cgf+hra": "ok" if agg_ok and flagged else "MISMATCH",
        "flame": "ok" if not bool(flame.kept[:bad].any()) else "MISSED ATTACKERS",
    }


if __name__ == "__main__":
    main()
