"""Per-round wall time of one config: simulator (1 and 2 workers) vs Flower (2 SuperNodes).

Usage::

    .venv/bin/python benchmarks/bench_deploy.py [--rounds 3] [--samples 400]

What is measured and why: the same (method, seed) — FedAvg on synthetic 13-band 16×16
patches, 2 clients, small CNN — runs three ways: in-process (``federation.workers: 1``),
in 2 worker processes, and on a real Flower deployment on loopback (a SuperLink and two
SuperNodes, each a site hosting one client, ``flwr run``; :mod:`geofl.deploy.loopback`).
Each run's round records give the round's wall time (``time_s.total``: client steps,
validation, aggregation); the medians over rounds 2.. are printed, with the deployment's
overhead per round in ms above the in-process simulator and the final model hashes (all
equal: the deployment is bit-identical to the simulation).

What dominates the deployment's overhead: Flower 1.42's SuperNode starts a fresh
``flwr-clientapp`` process for every message, which imports torch and geofl and rebuilds
the site's data and client program before the client step runs; message transport of a
few kB of parameters is negligible next to that. Numbers on a machine shared with other
jobs are indicative only.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()
    header("bench_deploy", args)
    t_start = time.perf_counter()
    rows, hashes = [], {}
    with tempfile.TemporaryDirectory(prefix="geofl-bench-deploy-") as tmp:
        root = Path(tmp)
        for workers in (1, 2):
            path = root / f"w{workers}.yaml"
            path.write_text(yaml.safe_dump(config(args.rounds, args.samples, workers)))
            out = run_experiment(load_config(path), root / f"sim{workers}")
            t, hashes[f"simulator, {workers} worker(s)"] = rounds_of(
                out / "methods" / "fedavg" / f"seed-{SEED}"
            )
            rows.append([f"simulator, {workers} worker(s)", t])
        path = root / "w1.yaml"
        rc = {"config": str(path), "out": str(root / "dep"), "method": "", "seed": -1}
        rc.update({"sites": 2, "round-timeout": 300.0, "connect-timeout": 120.0})
        t0 = time.perf_counter()
        with Loopback(root / "flwr", [{"clients": "0"}, {"clients": "1"}]) as lb:
            lb.run(rc, timeout=1800)
        t_dep_run = time.perf_counter() - t0
        t, hashes["flower, 2 SuperNodes"] = rounds_of(
            root / "dep" / "methods" / "fedavg" / "seed-3"
        )
        rows.append(["flower, 2 SuperNodes", t])
    print_table(["where", "round s (median, rounds 2..)"], rows)
    base = rows[0][1]
    print(f"deployment overhead per round: {1000 * (rows[-1][1] - base):.0f} ms above in-process")
    print(f"flower run incl. start of SuperLink/SuperNodes: {t_dep_run:.1f} s")
    print(f"final model hashes identical: {len(set(hashes.values())) == 1}")
    footer(t_start)


if __name__ == "__main__":
    main()
