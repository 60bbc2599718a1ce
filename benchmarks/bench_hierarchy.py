"""Simulated rounds per second of the 003 hierarchy: 120 tractors vs 10,000, 8 LEO, 1 GEO.

Usage::

    .venv/bin/python benchmarks/bench_hierarchy.py [--rounds 100] [--rounds-large 2]
        [--large 10000] [--uplink] [--quick]

What is measured and why: the event-driven hierarchy (:mod:`geofl.engine.hierarchy.scheduler`) must
scale with the fleet — the clock, the drivers' FedAvg, the LEO passes, relays, GEO
aggregation and downlink bookkeeping should cost little next to the client steps. Each size
is a real run of the scheduler over synthetic_agri (crop stress, 35 farms in three regions,
clients = tractors, ~2 field blocks each) with a trivially small model (MLP with one hidden
unit, one local step of batch 8), so what remains is the engine: 8 Walker LEOs at 550 km
and the GEO propagated with sgp4 over the run's simulated time (once, before the timing,
with the initial drivers' contact plans; no driver fails here, so no plan is computed
inside the rounds), 1 h rounds, drivers at 10 min. Per size: rounds per second, and
per round the time in client steps (``time_s.train``: the shared client step for every
tractor), in the clock (``time_s.clock``: arrivals, drivers, passes, relays) and in the GEO
tier (``time_s.aggregate``); rounds per second is 1 / the median round. The 10,000-tractor
run has fewer rounds (``--rounds-large``) because its client steps alone take seconds per
round; rates are per round, so the ratio 10,000 / 120 compares like with like. Both sizes
run in this one process, back to back.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from _common import footer, header, print_table, set_threads
from geofl.config.load import load_config
from geofl.engine.experiment import _plan, load_dataset, prepare_split
from geofl.engine.run import FederatedRun

SEED = 1


def _raw(tractors: int, rounds: int, uplink: bool) -> dict[str, Any]:
    method: dict[str, Any] = {
        "name": "hier",
        "partition": {"name": "group", "key": "tractor"},
        # the scheduler is measured, not the Table 10 test passes (reporting only)
        "hierarchy": {"round_s": 3600.0, "driver_deadline_s": 600.0, "staleness_metric": False},
    }
    if uplink:
        method["uplink"] = {}
    return {
        "name": f"bench-hierarchy-{tractors}",
        "seeds": [SEED],
        "task": {"name": "binary"},
        "data": {
            "dataset": "synthetic_agri",
            "params": {
                "task": "stress",
                "seed": 0,
                "num_tractors": tractors,
                "num_blocks": 2 * tractors,
            },
            "bands": "all",
            "split": {"val": 0.05, "test": 0.05},
        },
        "model": {"name": "mlp", "params": {"hidden": [1]}},
        "train": {"optimizer": "sgd", "lr": 0.01, "batch_size": 8, "local_steps": 1},
        "federation": {"num_clients": tractors, "rounds": rounds},
        "methods": [method],
    }


def _measure(tractors: int, rounds: int, uplink: bool, tmp: Path) -> dict[str, float]:
    path = tmp / f"{tractors}.yaml"
    path.write_text(yaml.safe_dump(_raw(tractors, rounds, uplink)))
    cfg = load_config(path)
    ds = load_dataset(cfg)
    splits, parts = _plan(cfg, ds)
    data = prepare_split(ds, cfg, SEED, splits[SEED])
    t_build = time.perf_counter()
    run = FederatedRun(cfg, cfg.methods[0], SEED, data, parts[SEED]["hier"], tmp / str(tractors))
    build_s = time.perf_counter() - t_build
    params, phases = run.init_params, {"train": [], "clock": [], "aggregate": [], "total": []}
    for r in range(1, rounds + 1):
        out = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = out.params
        for k, v in phases.items():
            v.append(out.record.time_s[k])
    return {
        "tractors": tractors,
        "clusters": run.scheduler.topo.clusters.num_clusters,  # type: ignore[union-attr]
        "rounds": rounds,
        "build_s": build_s,
        "rounds_per_s": 1.0 / statistics.median(phases["total"]),
        **{f"{k}_ms": 1e3 * statistics.median(v) for k, v in phases.items()},
    }


def _measure_batch(
    tractors: int, rounds: int, uplink: bool, tmp: Path, batch: str
) -> dict[str, float]:
    """``_measure`` with ``federation.batch_clients: batch`` (issue 36's batched client
    step, ``auto``, or the sequential one, ``off``); adds the client steps' µs per tractor."""
    raw = _raw(tractors, rounds, uplink)
    raw["federation"]["batch_clients"] = batch
    path = tmp / f"{tractors}-{batch}.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    ds = load_dataset(cfg)
    splits, parts = _plan(cfg, ds)
    data = prepare_split(ds, cfg, SEED, splits[SEED])
    run = FederatedRun(
        cfg, cfg.methods[0], SEED, data, parts[SEED]["hier"], tmp / f"{tractors}{batch}"
    )
    params, train, total, steps = run.init_params, [], [], []
    for r in range(1, rounds + 1):
        out = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = out.params
        train.append(out.record.time_s["train"])
        total.append(out.record.time_s["total"])
        steps.append(len(out.record.participants) + len(out.record.rejected))
    per_client = [t / max(n, 1) for t, n in zip(train, steps, strict=True)]
    return {
        "tractors": tractors,
        "batch": batch,
        "rounds": rounds,
        "rounds_per_s": 1.0 / statistics.median(total),
        "train_ms": 1e3 * statistics.median(train),
        "total_ms": 1e3 * statistics.median(total),
        "client_us": 1e6 * statistics.median(per_client),
    }


def compare_batched(args: argparse.Namespace) -> None:
    """``--batched``: 120 and ``--large`` tractors with the batched client step and the
    sequential one, interleaved size by size in this one process (ratios see one load)."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for tractors, rounds in ((120, args.rounds), (args.large, args.rounds_large)):
            for batch in ("off", "auto"):
                rows.append(_measure_batch(tractors, rounds, args.uplink, Path(d), batch))
    keys = ["tractors", "batch", "rounds", "rounds_per_s", "train_ms", "total_ms", "client_us"]
    print_table(keys, [[row[k] for k in keys] for row in rows], title="median per round (ms)")
    for off, auto in zip(rows[::2], rows[1::2], strict=True):
        speed = auto["rounds_per_s"] / off["rounds_per_s"]
        print(
            f"{off['tractors']} tractors: batched rounds/s ×{speed:.2f}, client step µs "
            f"per tractor {off['client_us']:.0f} → {auto['client_us']:.0f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--rounds-large", type=int, default=2)
    ap.add_argument("--large", type=int, default=10_000)
    ap.add_argument("--uplink", action="store_true", help="tractors upload over the 003 uplink")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 3 rounds, 240 tractors")
    ap.add_argument(
        "--batched", action="store_true", help="batched vs sequential client steps (issue 36)"
    )
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.rounds_large, args.large = 3, 1, 240
    set_threads(1)
    header("bench_hierarchy", args)
    t_start = time.perf_counter()
    if args.batched:
        compare_batched(args)
        footer(t_start)
        return
    with tempfile.TemporaryDirectory() as d:
        small = _measure(120, args.rounds, args.uplink, Path(d))
        large = _measure(args.large, args.rounds_large, args.uplink, Path(d))
    keys = ["tractors", "clusters", "rounds", "build_s", "rounds_per_s", "train_ms",
            "clock_ms", "aggregate_ms", "total_ms"]  # fmt: skip
    print_table(keys, [[row[k] for k in keys] for row in (small, large)],
                title="median per round (ms); build_s: clusters, sgp4, plans")  # fmt: skip
    n = large["tractors"] / small["tractors"]
    print(f"tractors ×{n:.0f}: rounds/s ÷{small['rounds_per_s'] / large['rounds_per_s']:.1f}; "
          f"per round: client steps ×{large['train_ms'] / small['train_ms']:.1f}, clock "
          f"×{large['clock_ms'] / small['clock_ms']:.1f}, GEO tier "
          f"×{large['aggregate_ms'] / small['aggregate_ms']:.1f}")  # fmt: skip
    footer(t_start)


if __name__ == "__main__":
    main()
