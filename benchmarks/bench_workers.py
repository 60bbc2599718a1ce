"""Parallel client workers: per-round wall time at ``federation.workers`` 1 vs N.

Usage::

    .venv/bin/python benchmarks/bench_workers.py [--quick] [--workers 1 2]
        [--preset demo] [--method fedavg-iid] [--set federation.rounds=4 ...]

What is measured and why: ``federation.workers: N`` runs a round's client steps in N
processes (:mod:`geofl.engine.workers`). The script runs one method of a preset (``demo``:
10 clients, small CNN on 13-band 32×32 synthetic patches) once per worker count, with one
intra-op thread per process (``OMP_NUM_THREADS=1``-like, so N workers use N cores), and
reads each round's ``time_s`` from the round records:

* ``round``  — the round's wall time (client steps, validation, aggregation);
* ``train``  — the client-step part: with workers, the wait for the slowest worker's share
  (the critical path: ⌈cohort / N⌉ client steps when clients are alike);
* ``server`` — ``round − train``: the serial server share workers do not shorten;
* ``eval``   — evaluation of the new global model (serial, after the round).

Round 1 is left out of the medians (worker start and first-step warm-up). It prints the
speed-up ``round(1) / round(N)`` and Amdahl's bound ``1 / (s + (1 − s)/N)`` from the serial
share ``s`` measured at N = 1, and checks that every run ended on the same model hash
(bit-identical). On a machine shared with other jobs the ratio is indicative only: two
workers need two idle cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from _common import footer, header, print_table, set_threads
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.experiment import run_experiment


def build_config(preset: str, method: str, overrides: list[str], workers: int) -> ExperimentConfig:
    """The preset with overrides, reduced to ``method``, with ``workers`` processes."""
    cfg = load_config(preset, [*overrides, f"federation.workers={workers}"])
    chosen = [m for m in cfg.methods if m.name == method]
    if not chosen:
        raise SystemExit(f"no method {method!r} in {preset}: {[m.name for m in cfg.methods]}")
    raw = cfg.model_dump(mode="json")
    raw["methods"] = [chosen[0].model_dump(mode="json")]
    raw["paper"] = {k: v for k, v in raw["paper"].items() if k == method}
    raw["figures"] = [f for f in raw["figures"] if set(f["methods"]) <= {method}]
    raw["analyses"] = []
    return ExperimentConfig.model_validate(raw)


def one_run(cfg: ExperimentConfig) -> dict[str, float | str]:
    """Run once into a fresh directory; medians of the per-round times after round 1."""
    with tempfile.TemporaryDirectory(prefix="geofl-bench-workers-") as tmp:
        t0 = time.perf_counter()
        out = run_experiment(cfg, Path(tmp) / "run")
        wall = time.perf_counter() - t0
        (rounds_file,) = out.glob("methods/*/*/rounds.jsonl")
        recs = [json.loads(line) for line in rounds_file.read_text().splitlines()]
    times = [r["time_s"] for r in recs[1:]] or [recs[0]["time_s"]]
    med = {k: statistics.median(t[k] for t in times) for k in ("total", "train", "eval")}
    return {
        "round": med["total"],
        "train": med["train"],
        "server": med["total"] - med["train"],
        "eval": med["eval"],
        "first": recs[0]["time_s"]["total"],
        "wall": wall,
        "model": recs[-1]["model_sha256"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--method", default="fedavg-iid")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    set_threads(1)
    overrides = list(args.overrides)
    if args.quick:
        overrides = [
            "federation.rounds=2",
            "federation.num_clients=4",
            "data.params.num_samples=400",
            "data.params.size=16",
            *overrides,
        ]
    elif not any(o.startswith("federation.rounds=") for o in overrides):
        overrides.append("federation.rounds=4")
    header("bench_workers", args)
    t_start = time.perf_counter()
    results = {
        n: one_run(build_config(args.preset, args.method, overrides, n)) for n in args.workers
    }
    rows = [
        [n, r["round"], r["train"], r["server"], r["eval"], r["first"], r["wall"]]
        for n, r in results.items()
    ]
    print_table(["workers", "round s", "train s", "server s", "eval s", "round 1 s", "run s"], rows)
    base = results[args.workers[0]]
    serial = float(base["server"]) / float(base["round"])
    for n, r in results.items():
        if n == args.workers[0]:
            continue
        speedup = float(base["round"]) / float(r["round"])
        amdahl = 1.0 / (serial + (1.0 - serial) / n)
        print(
            f"speed-up per round {args.workers[0]} -> {n} workers: {speedup:.2f}x "
            f"(Amdahl bound from serial share {serial:.1%}: {amdahl:.2f}x)"
        )
    same = len({r["model"] for r in results.values()}) == 1
    print(f"final model hash identical across worker counts: {same}")
    print(f"torch threads per process: {torch.get_num_threads()}")
    footer(t_start)


if __name__ == "__main__":
    main()
