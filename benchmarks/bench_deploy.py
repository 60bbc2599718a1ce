"""Per-round wall time of one config: simulator (1 and 2 workers) vs Flower (2 SuperNodes).

Usage::

    .venv/bin/python benchmarks/bench_deploy.py [--rounds 3] [--samples 400] \
        [--sites warm,cold] [--repeats 1] [--baseline-src DIR]

What is measured and why: the same (method, seed) — FedAvg on synthetic 13-band 16×16
patches, 2 clients, small CNN — runs three ways: in-process (``federation.workers: 1``),
in 2 worker processes, and on a real Flower deployment on loopback (a SuperLink and two
SuperNodes, each a site hosting one client, ``flwr run``; :mod:`geofl.deploy.loopback`).
Each run's round records give the round's wall time (``time_s.total``: client steps,
validation, aggregation); the medians over rounds 2.. are printed, with the deployment's
overhead per round in ms above the in-process simulator and the final model hashes (the
deployments' equal the in-process simulator's: the deployment is bit-identical to it).
``--repeats R`` runs every setting R times, round-robin (simulator, then each deployment,
then again), so that a load change hits them alike; the medians then pool the rounds 2..
of all repeats, and each repeat's own overhead is printed too.

The deployment runs with its sites ``warm`` (:mod:`geofl.deploy.warmsite`: a SuperNode
in ``--isolation process`` with short idle waits, beside one long-lived process that runs
every message) and ``cold`` (Flower's stock SuperNode), back to back in one invocation, so
that the ratio of their overheads holds on a loaded machine too. What dominated the cold
overhead (~10 s a round on an idle machine, issue 33): Flower 1.42's SuperNode starts a
fresh ``flwr-clientapp`` process for every message, which imports torch and geofl and
rebuilds the site's data and client program before the client step runs, and sleeps 3 s
whenever the SuperLink has nothing for it — so every round also waited for the node's next
look. What remained of the warm overhead: Flower's 1 s backoff (2 s, 4 s…) when a
message's objects were not stored yet (:mod:`geofl.deploy.objectpulls`). Message
transport of a few kB of parameters is negligible next to that. ``--baseline-src DIR``
adds ``warm@baseline``: warm sites whose Flower processes import geofl from ``DIR`` (e.g.
``git archive <commit> src | tar -x -C /tmp/base`` and ``--baseline-src /tmp/base/src``),
so that a change's before and after are timed in one run, alternately. Numbers on a
machine shared with other jobs are indicative only: the load is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from _common import footer, header, print_table
from geofl.config.load import load_config
from geofl.deploy.loopback import Loopback
from geofl.engine.experiment import run_experiment

SEED = 3
#: The deployment settings ``--sites`` names, and the one ``--baseline-src`` adds.
MODES, BASELINE = ("warm", "cold"), "warm@baseline"


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


def rounds_of(seed_dir: Path) -> tuple[list[float], str]:
    """Round wall times after round 1 (round 1 alone when there is no other), and the
    final model hash."""
    recs = [json.loads(x) for x in (seed_dir / "rounds.jsonl").read_text().splitlines()]
    times = [r["time_s"]["total"] for r in recs[1:]] or [recs[0]["time_s"]["total"]]
    return times, recs[-1]["model_sha256"]


def simulator(workers: int) -> str:
    return f"simulator, {workers} worker(s)"


def where(mode: str) -> str:
    return f"flower, 2 SuperNodes, {mode} sites"


@contextlib.contextmanager
def geofl_from(src: str | None) -> Iterator[None]:
    """Processes started meanwhile (Flower's, with this process's environment) import
    geofl from ``src`` first (None: as this process does)."""
    old = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, *([old] if old else [])])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def simulate(root: Path, workers: int, rounds: int, samples: int, rep: int) -> tuple[list, str]:
    """The in-process simulator's round times and final model hash (repeat ``rep``)."""
    path = root / f"w{workers}.yaml"
    path.write_text(yaml.safe_dump(config(rounds, samples, workers)))
    out = run_experiment(load_config(path), root / f"sim{workers}-{rep}")
    return rounds_of(out / "methods" / "fedavg" / f"seed-{SEED}")


def deploy(
    root: Path, mode: str, rounds: int, rep: int, src: str | None
) -> tuple[list[float], str, float]:
    """Run the benchmark's config on two SuperNodes with ``mode`` sites (geofl from
    ``src``); the round times, the final model hash and the whole ``flwr run`` time
    (starts included)."""
    path = root / "w1.yaml"
    out = root / f"dep-{mode}-{rep}"
    rc = {"config": str(path), "out": str(out), "method": "", "seed": -1}
    rc.update({"sites": 2, "round-timeout": 300.0, "connect-timeout": 120.0})
    t0 = time.perf_counter()
    sites = [{"clients": "0"}, {"clients": "1"}]
    with geofl_from(src), Loopback(root / f"flwr-{mode}-{rep}", sites, warm=mode != "cold") as lb:
        output = lb.run(rc, timeout=600 + 60 * rounds)
    if not (out / "methods").exists():
        raise SystemExit(f"the {mode} deployment did not run:\n{output[-3000:]}")
    times, sha = rounds_of(out / "methods" / "fedavg" / f"seed-{SEED}")
    return times, sha, time.perf_counter() - t0


def parse() -> tuple[argparse.Namespace, list[str]]:
    """The arguments and the deployment modes to run (one line, exit 2 when bad)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument(
        "--sites", default="warm,cold", help="deployment modes to run, comma-separated"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs of every setting")
    parser.add_argument(
        "--baseline-src", default=None, help="also run warm sites with geofl from DIR"
    )
    args = parser.parse_args()
    modes = [m for m in args.sites.split(",") if m]
    why = None
    if not modes or set(modes) - set(MODES):
        why = f"--sites {args.sites!r}: give warm, cold or warm,cold"
    elif args.repeats < 1 or args.rounds < 1:
        why = f"--repeats {args.repeats} --rounds {args.rounds}: give 1 or more"
    elif args.baseline_src and not (Path(args.baseline_src) / "geofl" / "__init__.py").is_file():
        why = f"--baseline-src {args.baseline_src}: no geofl package there (give its src dir)"
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        raise SystemExit(2)
    return args, modes + ([BASELINE] if args.baseline_src else [])


def run_all(
    root: Path, args: argparse.Namespace, modes: list[str]
) -> tuple[dict[str, list[list[float]]], dict[str, str], dict[str, float]]:
    """Every setting ``args.repeats`` times, round-robin: round times per setting and
    repeat, final model hashes, and the longest ``flwr run`` of each deployment mode."""
    times: dict[str, list[list[float]]] = {}
    hashes: dict[str, str] = {}
    runs: dict[str, float] = {}
    for rep in range(args.repeats):
        for workers in (1, 2):
            t, hashes[simulator(workers)] = simulate(root, workers, args.rounds, args.samples, rep)
            times.setdefault(simulator(workers), []).append(t)
        for mode in modes:
            src = args.baseline_src if mode == BASELINE else None
            t, hashes[where(mode)], wall = deploy(root, mode, args.rounds, rep, src)
            times.setdefault(where(mode), []).append(t)
            runs[mode] = max(runs.get(mode, 0.0), wall)
    return times, hashes, runs


def report(
    times: dict[str, list[list[float]]],
    hashes: dict[str, str],
    runs: dict[str, float],
    modes: list[str],
) -> None:
    """The table, each deployment's overhead above in-process (pooled and per repeat)."""
    med = statistics.median
    pooled = {name: med([t for rep in reps for t in rep]) for name, reps in times.items()}
    rows = [[name, pooled[name], hashes[name][:12]] for name in times]
    print_table(["where", "round s (median, rounds 2..)", "final model"], rows)
    base = simulator(1)
    over = {mode: pooled[where(mode)] - pooled[base] for mode in modes}
    for mode in modes:
        reps = [med(d) - med(s) for d, s in zip(times[where(mode)], times[base], strict=True)]
        each = ", ".join(f"{1000 * x:.0f}" for x in reps)
        ms = 1000 * over[mode]
        print(f"deployment overhead per round, {mode} sites: {ms:.0f} ms above in-process")
        print(f"  each repeat's own: {each} ms")
        print(f"  longest flwr run incl. starts of SuperLink/SuperNodes: {runs[mode]:.1f} s")
    if {"warm", "cold"} <= set(over):
        print(f"cold/warm overhead ratio: {over['cold'] / max(over['warm'], 1e-3):.1f}x")
    if {"warm", BASELINE} <= set(over):
        saved = 1000 * (over[BASELINE] - over["warm"])
        print(f"warm sites, this source vs --baseline-src: {saved:.0f} ms less per round")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    same = all(hashes[where(m)] == hashes[base] for m in modes)
    print(f"deployments' final models equal the in-process simulator's: {same}")


def main() -> None:
    args, modes = parse()
    header("bench_deploy", args)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="geofl-bench-deploy-") as tmp:
        times, hashes, runs = run_all(Path(tmp), args, modes)
    report(times, hashes, runs, modes)
    footer(t_start)


if __name__ == "__main__":
    main()
