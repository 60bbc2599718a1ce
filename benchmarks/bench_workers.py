"""Parallel client workers: per-round wall time at ``federation.workers`` 1 vs N.

Usage::

    .venv/bin/python benchmarks/bench_workers.py [--quick] [--workers 1 2] [--repeats 3]
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
(bit-identical). ``--repeats R`` runs the worker counts R times interleaved (1, 2, 2, 1,
1, 2, …) and reports each count's median, so that a slow drift of the machine's load
falls on both counts alike.

How the speed-up scales. With K alike clients whose step takes t on one core, and the
serial server share S (validation, aggregation, evaluation, checkpoint — it does not
shrink), a round takes ``T(N) = ⌈K/N⌉·t / c + S``, where c ≤ 1 is the share of a core
each worker process really gets. On N idle cores (c = 1) the demo's K = 10 gives 5 steps on
the critical path at N = 2 (bound 1.99× with s = 0.2 %), 4 at N = 3 (2.5×), 3 at N = 4
(3.3×), 2 at N = 5 (5×), and nothing more beyond N = K: the cohort's granularity limits the
gain long before Amdahl's 1/s does. Clients of unequal size (Dirichlet partitions) are
handed to whichever worker is free, in cohort order (greedy list scheduling: within
(2 − 1/N)× of the best split), so the critical path is about max(total/N, the largest
client's step). Per round, workers add the pickling of each job's directives and state rows
and of its upload (O(D) bytes per client) and one copy of the global model into the shared
buffer — milliseconds against client steps of seconds.

Why a busy machine shows no speed-up (README: 0.74× with both cores saturated, 0.91× with
one busy): Linux's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled`` = 1
here) shares the CPUs fairly between *sessions*, not threads, and every other job on this
machine runs in a session of its own. With M busy sessions on C cores this benchmark's
session gets about C/M cores whatever number of processes it runs: once C/M ≤ 1 (another
busy session on 2 cores already) a second worker process only splits the same share, and
its costs (IPC, a second working set in the shared caches) make the ratio drop below 1.
The measured ratios are therefore a property of the machine's load, not of the workers;
the formula above is what N idle cores give.
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


def _median_run(runs: list[dict[str, float | str]]) -> dict[str, float | str]:
    """Each timing's median over repeated runs of one worker count (the model hash of the
    first)."""
    out: dict[str, float | str] = {"model": runs[0]["model"]}
    for key in ("round", "train", "server", "eval", "first", "wall"):
        out[key] = statistics.median(float(r[key]) for r in runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs per count")
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
    runs: dict[int, list[dict[str, float | str]]] = {n: [] for n in args.workers}
    for rep in range(args.repeats):  # interleaved: 1 2 | 2 1 | 1 2 …
        for n in args.workers if rep % 2 == 0 else list(reversed(args.workers)):
            runs[n].append(one_run(build_config(args.preset, args.method, overrides, n)))
    results = {n: _median_run(rs) for n, rs in runs.items()}
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
    same = len({r["model"] for rs in runs.values() for r in rs}) == 1
    print(f"final model hash identical across worker counts: {same}")
    print(f"torch threads per process: {torch.get_num_threads()}")
    footer(t_start)


if __name__ == "__main__":
    main()
