"""Per-round wall time of one config: simulator (1 and 2 workers) vs Flower (2 SuperNodes).

Usage::

    .venv/bin/python benchmarks/bench_deploy.py [--rounds 3] [--samples 400] \
        [--sites warm,cold]

What is measured and why: the same (method, seed) — FedAvg on synthetic 13-band 16×16
patches, 2 clients, small CNN — runs three ways: in-process (``federation.workers: 1``),
in 2 worker processes, and on a real Flower deployment on loopback (a SuperLink and two
SuperNodes, each a site hosting one client, ``flwr run``; :mod:`geofl.deploy.loopback`).
Each run's round records give the round's wall time (``time_s.total``: client steps,
validation, aggregation); the medians over rounds 2.. are printed, with the deployment's
overhead per round in ms above the in-process simulator and the final model hashes (the
deployments' equal the in-process simulator's: the deployment is bit-identical to it).

The deployment runs with its sites ``warm`` (:mod:`geofl.deploy.warmsite`: a SuperNode
in ``--isolation process`` with short idle waits, beside one long-lived process that runs
every message) and ``cold`` (Flower's stock SuperNode), back to back in one invocation, so
that the ratio of their overheads holds on a loaded machine too. What dominated the cold
overhead (~10 s a round on an idle machine, issue 33): Flower 1.42's SuperNode starts a
fresh ``flwr-clientapp`` process for every message, which imports torch and geofl and
rebuilds the site's data and client program before the client step runs, and sleeps 3 s
whenever the SuperLink has nothing for it — so every round also waited for the node's next
look. Message transport of a few kB of parameters is negligible next to that. Numbers on a
machine shared with other jobs are indicative only: the load is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from _common import footer, header, print_table
from geofl.config.load import load_config
from geofl.deploy.loopback import Loopback
from geofl.engine.experiment import run_experiment

SEED = 3


def config(rounds: int, samples: int, workers: int) -> dict[str, Any]:
    """The benchmarked experiment."""
    return {
        "name": "bench-deploy",
        "seeds": [SEED],
        "data": {"dataset": "synthetic", "params": {"num_samples": samples, "size": 16}},
        "model": {"name": "small_cnn", "params": {"width": 8, "blocks": 2}},
        "train": {"batch_size": 32, "local_epochs": 1},
        "federation": {"num_clients": 2, "rounds": rounds, "workers": workers},
        "privacy": {"randomness": "seeded"},  # the simulator's generators: equal hashes
        "methods": [{"name": "fedavg", "partition": {"name": "iid"}}],
    }


def rounds_of(seed_dir: Path) -> tuple[float, str]:
    """Median round wall time after round 1, and the final model hash."""
    recs = [json.loads(x) for x in (seed_dir / "rounds.jsonl").read_text().splitlines()]
    times = [r["time_s"]["total"] for r in recs[1:]] or [recs[0]["time_s"]["total"]]
    return statistics.median(times), recs[-1]["model_sha256"]


def rows_key(workers: int) -> str:
    return f"simulator, {workers} worker(s)"


def deploy(root: Path, mode: str, rounds: int) -> tuple[float, str, float]:
    """Run the benchmark's config on two SuperNodes with ``mode`` sites; the median round
    time, the final model hash and the whole ``flwr run`` time (starts included)."""
    path = root / "w1.yaml"
    out = root / f"dep-{mode}"
    rc = {"config": str(path), "out": str(out), "method": "", "seed": -1}
    rc.update({"sites": 2, "round-timeout": 300.0, "connect-timeout": 120.0})
    t0 = time.perf_counter()
    sites = [{"clients": "0"}, {"clients": "1"}]
    with Loopback(root / f"flwr-{mode}", sites, warm=mode == "warm") as lb:
        output = lb.run(rc, timeout=600 + 60 * rounds)
    if not (out / "methods").exists():
        raise SystemExit(f"the {mode} deployment did not run:\n{output[-3000:]}")
    t, sha = rounds_of(out / "methods" / "fedavg" / f"seed-{SEED}")
    return t, sha, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument(
        "--sites", default="warm,cold", help="deployment modes to run, comma-separated"
    )
    args = parser.parse_args()
    modes = [m for m in args.sites.split(",") if m]
    if not modes or set(modes) - {"warm", "cold"}:
        raise SystemExit(f"--sites {args.sites!r}: give warm, cold or warm,cold")
    header("bench_deploy", args)
    t_start = time.perf_counter()
    rows, hashes, runs = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="geofl-bench-deploy-") as tmp:
        root = Path(tmp)
        for workers in (1, 2):
            path = root / f"w{workers}.yaml"
            path.write_text(yaml.safe_dump(config(args.rounds, args.samples, workers)))
            out = run_experiment(load_config(path), root / f"sim{workers}")
            t, hashes[rows_key(workers)] = rounds_of(out / "methods" / "fedavg" / f"seed-{SEED}")
            rows.append([f"simulator, {workers} worker(s)", t, hashes[rows_key(workers)][:12]])
        for mode in modes:
            where = f"flower, 2 SuperNodes, {mode} sites"
            t, hashes[where], runs[mode] = deploy(root, mode, args.rounds)
            rows.append([where, t, hashes[where][:12]])
    print_table(["where", "round s (median, rounds 2..)", "final model"], rows)
    base = rows[0][1]
    over = {mode: row[1] - base for mode, row in zip(modes, rows[2:], strict=True)}
    for mode in modes:
        ms = 1000 * over[mode]
        print(f"deployment overhead per round, {mode} sites: {ms:.0f} ms above in-process")
        print(
            f"  flwr run of {mode} sites incl. starts of SuperLink/SuperNodes: {runs[mode]:.1f} s"
        )
    if len(over) == 2:
        print(f"cold/warm overhead ratio: {over['cold'] / max(over['warm'], 1e-3):.1f}x")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    same = all(hashes[f"flower, 2 SuperNodes, {m} sites"] == hashes[rows_key(1)] for m in modes)
    print(f"deployments' final models equal the in-process simulator's: {same}")
    footer(t_start)


if __name__ == "__main__":
    main()
