"""Cost of the robust aggregators and the consistency weighting over ``[K, D]`` float32 updates.

Usage::

    .venv/bin/python benchmarks/bench_robust_aggregation.py [--clients 100] [--dim 1.1e7]
        [--repeats 3] [--threads 2] [--krum-f 10] [--trim 0.1]

What is measured and why: 000 §4.5 compares FedAvg with Trimmed Mean, Krum and the
consistency weighting; all of them run once per round on the server over the round's
``[K, D]`` update tensor. On one tensor (default K=100 × D=1.1e7, ResNet-18 sized, 4.4 GB,
seeded uniform(−1, 1)) the script times, round-robin within each repeat (so ratios hold when
the load of a shared machine changes mid-run):

* ``updates.mean(0)``, the reference reduction (one read of every byte), and FedAvg's
  ``weighted_mean`` (data-size weights; a GEMV, often faster than ``mean(0)``), for context;
* ``consistency``: the full server step of the consistency method, 000 Alg. 2 — weights
  from C=10-class label histograms (``consistency`` weighting, β=5), then ``weighted_mean``
  (target ≤ 1.5× mean(0): the histograms are ``[K, C]``, the rest is one weighted reduction);
* ``trimmed_mean+w`` (β = ``--trim``) and coordinate ``median+w`` (target ≤ 10×: they
  sort every column), each with its effective weights (every row's share of the kept order
  statistics, from the same pass) — what the registered aggregators compute;
* ``krum`` (f = ``--krum-f``, m = 1) and ``multi_krum`` (m = K − f) (target ≤ 20×: exact
  pairwise distances, a ``[K, D] × [D, K]`` float64 Gram matmul of the updates centred on
  one of them, plus one reduction for Multi-Krum).

Reported: median seconds per call, ratio to ``mean(0)`` measured in the same run, the
target, the peak RSS of the process while that method ran (Linux ``VmHWM``, reset through
``/proc/self/clear_refs`` before each method's first call) and how far that is above the RSS
just before the call (what the method itself allocates), and a correctness check
of the fast path on the first and last columns: against ``torch.sort`` (trimmed mean,
median; their weights on those columns alone against positions from ``torch.searchsorted``)
or a difference-based float64 ``cdist`` reference (Krum scores, to 1e-10).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import footer, header, interleaved_medians, print_table, set_threads
from geofl.server.aggregators import weighted_mean
from geofl.server.consistency import ConsistencyParams, build_consistency
from geofl.server.robust import (
    coordinate_median_aggregate,
    distances,
    krum_scores,
    multi_krum,
    order_stats,
    trim_count,
    trimmed_mean_aggregate,
)
from geofl.update import UpdateMeta

TARGETS = {
    "consistency": 1.5,
    "trimmed_mean+w": 10.0,
    "median+w": 10.0,
    "krum": 20.0,
    "multi_krum": 20.0,
}
CHECK_COLUMNS = 20_000


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset the peak-RSS counter (``VmHWM``); False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_gb(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Peak RSS (GB) while ``fn`` runs once, that minus the RSS just before, and its output.

    The RSS numbers are NaN where the kernel does not let the peak be reset.
    """
    before = _status_kb("VmRSS")
    if before is None or not _reset_peak():
        return float("nan"), float("nan"), fn()
    out = fn()
    hwm = _status_kb("VmHWM")
    if hwm is None:
        return float("nan"), float("nan"), out
    return hwm / 1e6, (hwm - before) / 1e6, out


def _histograms(k: int, classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Label-skewed histograms: each client's class mix drawn from Dirichlet(0.3)."""
    mix = rng.dirichlet(np.full(classes, 0.3), size=k)
    sizes = rng.integers(200, 2000, size=k)
    return [np.floor(p * n) + 1 for p, n in zip(mix, sizes, strict=True)]


def _reference_weights(cols: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Effective weights from sorted positions: a value's tie group fills positions
    [#(< v), #(≤ v)); its members share the kept ones (lo … hi − 1, 1/(hi − lo) each)."""
    srt = torch.sort(cols.T.contiguous(), dim=1).values  # [C, K]
    vals = cols.T.contiguous()
    first = torch.searchsorted(srt, vals, right=False)
    last = torch.searchsorted(srt, vals, right=True)
    kept = (last.clamp_max(hi) - first.clamp_min(lo)).clamp_min(0).double()
    shares = kept / (last - first).double() / (hi - lo)  # [C, K]
    return shares.mean(0)


def main() -> None:
    """Parse arguments, build the tensor, time every method, print the table."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100, help="K")
    parser.add_argument("--dim", type=float, default=1.1e7, help="D")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--krum-f", type=int, default=10, help="num_byzantine f of Krum")
    parser.add_argument("--trim", type=float, default=0.1, help="trim_fraction of trimmed mean")
    parser.add_argument("--classes", type=int, default=10, help="C of the label histograms")
    parser.add_argument(
        "--sort-block",
        type=int,
        default=order_stats.SORT_BLOCK_ELEMENTS,
        help="elements of one transposed block in trimmed mean / median",
    )
    parser.add_argument(
        "--gram-block",
        type=int,
        default=distances.GRAM_BLOCK_COLUMNS,
        help="columns of one Gram-matrix block in Krum",
    )
    args = parser.parse_args()
    set_threads(args.threads)
    order_stats.SORT_BLOCK_ELEMENTS = args.sort_block
    distances.GRAM_BLOCK_COLUMNS = args.gram_block
    header("bench_robust_aggregation", args)

    k, d, f = args.clients, int(args.dim), args.krum_f
    m = k - f
    gen = torch.Generator().manual_seed(0)
    updates = torch.empty((k, d), dtype=torch.float32).uniform_(-1, 1, generator=gen)
    input_gb = k * d * 4 / 1e9
    sizes = torch.randint(20, 500, (k,), generator=gen)
    metas = [
        UpdateMeta(client_id=i, num_samples=int(n), round=1, label_histogram=h)
        for i, (n, h) in enumerate(
            zip(sizes, _histograms(k, args.classes, np.random.default_rng(0)), strict=True)
        )
    ]
    consistency = build_consistency(ConsistencyParams(beta=5.0))
    rss_base = (_status_kb("VmRSS") or 0) / 1e6  # the process with the input allocated
    print(
        f"   K={k} D={d:,} float32 ({input_gb:.2f} GB), Krum f={f}, Multi-Krum m=K−f={m}, "
        f"trim_fraction={args.trim}, sort block {order_stats.SORT_BLOCK_ELEMENTS:,} elements, "
        f"Gram block {distances.GRAM_BLOCK_COLUMNS:,} columns"
    )

    fns: dict[str, Callable[[], Any]] = {
        "mean(0)": lambda: updates.mean(0),
        "weighted_mean": lambda: weighted_mean(updates, sizes.to(torch.float32)),
        "consistency": lambda: weighted_mean(updates, consistency(metas, 1).to(torch.float32)),
        "trimmed_mean+w": lambda: trimmed_mean_aggregate(updates, trim_fraction=args.trim),
        "median+w": lambda: coordinate_median_aggregate(updates),
        "krum": lambda: multi_krum(updates, num_byzantine=f, num_selected=1),
        "multi_krum": lambda: multi_krum(updates, num_byzantine=f, num_selected=m),
    }
    peaks, deltas, outs = {}, {}, {}
    for name, fn in fns.items():  # doubles as the warm-up
        peaks[name], deltas[name], outs[name] = _peak_rss_gb(fn)
    med = interleaved_medians(fns, repeats=args.repeats, warmup=0)

    # Check the full-size outputs on the first and the last columns (first and last block).
    c = min(d, CHECK_COLUMNS)
    idx = torch.cat([torch.arange(c), torch.arange(d - c, d)]).unique()
    cols = updates[:, idx]
    srt = torch.sort(cols, dim=0).values.to(torch.float64)
    b = trim_count(k, args.trim)
    half = k // 2
    ref_med = srt[half] if k % 2 else 0.5 * (srt[half - 1] + srt[half])
    mid = (half, half + 1) if k % 2 else (half - 1, half + 1)
    u64 = cols.to(torch.float64)
    exact = "donot_use_mm_for_euclid_dist"
    ref_d = torch.cdist(u64, u64, compute_mode=exact) ** 2 + torch.diag(
        torch.full((k,), float("inf"))
    )
    ref_scores = torch.sort(ref_d, dim=1).values[:, : k - f - 2].sum(1)
    kr, mk = outs["krum"], outs["multi_krum"]
    checks = {
        "mean(0)": "-",
        "weighted_mean": "-",
        "consistency": abs(float(consistency(metas, 1).sum()) - 1.0) < 1e-12,
        "trimmed_mean+w": torch.allclose(
            outs["trimmed_mean+w"].delta[idx].double(), srt[b : k - b].mean(0), atol=1e-6
        )
        and torch.allclose(
            trimmed_mean_aggregate(cols, trim_fraction=args.trim).weights,
            _reference_weights(cols, b, k - b),
            rtol=0.0,
            atol=1e-12,
        ),
        "median+w": torch.allclose(outs["median+w"].delta[idx].double(), ref_med, atol=1e-7)
        and torch.allclose(
            coordinate_median_aggregate(cols).weights,
            _reference_weights(cols, *mid),
            rtol=0.0,
            atol=1e-12,
        ),
        # scores of the check columns alone vs float64, and the aggregates vs their rows
        "krum": torch.allclose(krum_scores(cols, num_byzantine=f), ref_scores, rtol=1e-10)
        and torch.equal(kr.aggregate[idx], updates[int(kr.selected[0]), idx]),
        "multi_krum": torch.equal(mk.selected[:1], kr.selected)
        and torch.allclose(mk.aggregate[idx], cols[mk.selected].mean(0), atol=1e-6),
    }

    base, wbase = med["mean(0)"], med["weighted_mean"]
    rows = []
    for name, t in med.items():
        target = TARGETS.get(name)
        ratio = t / base
        verdict = "-" if target is None else ("met" if ratio <= target else "MISSED")
        check = checks[name]
        rows.append(
            [
                name,
                t * 1e3,
                ratio,
                t / wbase,
                "-" if target is None else f"≤ {target:g}×",
                verdict,
                peaks[name],
                deltas[name],
                check if isinstance(check, str) else ("ok" if check else "MISMATCH"),
            ]
        )
    print_table(
        [
            "method",
            "ms",
            "× mean(0)",
            "× wmean",
            "target",
            "",
            "peak RSS GB",
            "Δ RSS GB",
            "check",
        ],
        rows,
        title=f"robust aggregation, K={k} × D={d:.3g} (median of {args.repeats}, "
        f"{args.threads} threads)",
    )
    print(
        f"mean(0) read {input_gb / base:.1f} GB/s; targets are × mean(0) of the same run. "
        f"Δ RSS: peak while the method ran minus the RSS just before it (RSS before the "
        f"first method: {rss_base:.2f} GB, of which {input_gb:.2f} GB is the input)"
    )
    footer(t_start)


if __name__ == "__main__":
    main()
