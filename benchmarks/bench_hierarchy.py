"""Simulated rounds per second of the 003 hierarchy: 120 tractors vs 10,000, 8 LEO, 1 GEO.

Usage::

    .venv/bin/python benchmarks/bench_hierarchy.py [--rounds 100] [--rounds-large 2]
        [--large 10000] [--uplink] [--quick] [--batched | --uplink-compare]

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

Four more measurements, each on its own flag (issues 32 and 36):

* ``--batched``: the batched client step (``federation.batch_clients: auto``) vs the
  sequential one at 120 and ``--large`` tractors, interleaved size by size in this process:
  rounds per second, the client steps' µs per tractor of both paths, the median process
  CPU seconds of a round (``cpu_ms``: what a loaded machine inflates least) and the
  process's peak resident memory so far (``peak_mb``, ``ru_maxrss``: monotone over the
  rows, so a row's figure includes the rows before it).

* ``--uplink-compare``: the 003 ground uplink (``--uplink``: the method's default
  ``uplink`` — cosine checkpointer, NQI gate, top-k + 4-bit / dense 8-bit pipelines with
  error feedback, XSalsa20-Poly1305 envelopes per hop, rural links) carried one tractor at
  a time (:meth:`~geofl.engine.uplink.ground.Uplink.transmit`, the reference) and as one
  cohort (:meth:`~geofl.engine.uplink.ground.Uplink.transmit_cohort`), batched client step
  on, at 120 and ``--large`` tractors, size by size in this process: rounds per second,
  the scheduler's uplink call per round and per tractor that entered it (µs), and the
  final model hash of each (the two paths give the same bits).

* ``--workers-compare``: ``federation.workers`` 2 vs 1 on the asynchronous hierarchy at 120
  tractors with client steps worth parallelising (``--worker-hidden``, ``--worker-steps``):
  both runs built in this process, their rounds interleaved (round r of one, then of the
  other, so load drifts hit both alike); median round and client-step time after round 1,
  the ratio 1 ÷ 2 workers, and whether the final model hashes agree (bit-identity).
* ``--refactor-cost OLD_SRC``: the refactor's cost on a hierarchy round at 120 tractors —
  the same benchmark round (the tiny model above, so the engine dominates) with the old
  tree (``git archive c899965 src | tar -x -C /tmp/h32w_base``; pass ``/tmp/h32w_base/src``)
  and this tree, each in a child process with that tree on ``PYTHONPATH``, children
  alternating old/new ``--pairs`` times; the ratio new ÷ old of the median round.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
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


def _raw(
    tractors: int,
    rounds: int,
    uplink: bool,
    *,
    hidden: int = 1,
    steps: int = 1,
    workers: int = 1,
) -> dict[str, Any]:
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
        "model": {"name": "mlp", "params": {"hidden": [hidden]}},
        "train": {"optimizer": "sgd", "lr": 0.01, "batch_size": 8, "local_steps": steps},
        "federation": {"num_clients": tractors, "rounds": rounds, "workers": workers},
        "methods": [method],
    }


def _run(raw: dict[str, Any], tmp: Path, name: str) -> tuple[FederatedRun, float]:
    """The run of ``raw``'s one method (its data loaded, split and partitioned, files under
    ``tmp/name``) and the seconds its construction took (contact plans, fleet, sites)."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    ds = load_dataset(cfg)
    splits, parts = _plan(cfg, ds)
    data = prepare_split(ds, cfg, SEED, splits[SEED])
    t_build = time.perf_counter()
    run = FederatedRun(cfg, cfg.methods[0], SEED, data, parts[SEED]["hier"], tmp / name)
    return run, time.perf_counter() - t_build


def _measure(tractors: int, rounds: int, uplink: bool, tmp: Path) -> dict[str, float]:
    run, build_s = _run(_raw(tractors, rounds, uplink), tmp, str(tractors))
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
    run, _ = _run(raw, tmp, f"{tractors}-{batch}")
    params, train, total, steps, cpu = run.init_params, [], [], [], []
    for r in range(1, rounds + 1):
        c0 = time.process_time()
        out = run.scheduler.round(params, r)
        run.comps.store.commit()
        cpu.append(time.process_time() - c0)
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
        "cpu_ms": 1e3 * statistics.median(cpu),
        "client_us": 1e6 * statistics.median(per_client),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def compare_batched(args: argparse.Namespace) -> None:
    """``--batched``: 120 and ``--large`` tractors with the batched client step and the
    sequential one, interleaved size by size in this one process (ratios see one load)."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for tractors, rounds in ((120, args.rounds), (args.large, args.rounds_large)):
            for batch in ("off", "auto"):
                rows.append(_measure_batch(tractors, rounds, args.uplink, Path(d), batch))
    keys = ["tractors", "batch", "rounds", "rounds_per_s", "train_ms", "total_ms", "cpu_ms"]
    keys += ["client_us", "peak_mb"]
    print_table(keys, [[row[k] for k in keys] for row in rows], title="median per round (ms)")
    for off, auto in zip(rows[::2], rows[1::2], strict=True):
        speed = auto["rounds_per_s"] / off["rounds_per_s"]
        print(
            f"{off['tractors']} tractors: batched rounds/s ×{speed:.2f}, client step µs "
            f"per tractor {off['client_us']:.0f} → {auto['client_us']:.0f}"
        )


def _measure_uplink(
    tractors: int, rounds: int, tmp: Path, cohort: bool
) -> dict[str, float | int | str]:
    """One run with the 003 uplink and the batched client step, its uplink carried as one
    cohort (:meth:`Uplink.transmit_cohort`) or per client (the reference), with the
    scheduler's uplink call timed: rounds per second and the uplink's µs per tractor that
    entered it (median over rounds)."""
    raw = _raw(tractors, rounds, True)
    raw["federation"]["batch_clients"] = "auto"
    side = "cohort" if cohort else "per-client"
    run, _ = _run(raw, tmp, f"{tractors}-{side}")
    sync = run.scheduler.sync  # type: ignore[attr-defined]
    sync.cohort_uplink = cohort
    plain, spent = sync._uplink, []

    def timed(outcomes: Any) -> Any:
        t0 = time.perf_counter()
        txs = plain(outcomes)
        spent.append((time.perf_counter() - t0, sum(tx is not None for tx in txs)))
        return txs

    sync._uplink = timed
    params, total, hashes = run.init_params, [], []
    for r in range(1, rounds + 1):
        out = run.scheduler.round(params, r)
        run.comps.store.commit()
        params = out.params
        total.append(out.record.time_s["total"])
        hashes.append(out.record.model_sha256 or "")
    return {
        "tractors": tractors,
        "uplink": side,
        "rounds": rounds,
        "rounds_per_s": 1.0 / statistics.median(total),
        "total_ms": 1e3 * statistics.median(total),
        "uplink_ms": 1e3 * statistics.median(t for t, _ in spent),
        "uplink_us": 1e6 * statistics.median(t / max(n, 1) for t, n in spent),
        "model_sha256": hashes[-1][:12],
    }


def compare_uplink(args: argparse.Namespace) -> None:
    """``--uplink-compare``: 120 and ``--large`` tractors with the 003 uplink, carried per
    client (the reference) and as one cohort, size by size in this one process."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for tractors, rounds in ((120, args.rounds), (args.large, args.rounds_large)):
            for cohort in (False, True):
                rows.append(_measure_uplink(tractors, rounds, Path(d), cohort))
    keys = ["tractors", "uplink", "rounds", "rounds_per_s", "total_ms", "uplink_ms"]
    keys += ["uplink_us", "model_sha256"]
    print_table(keys, [[row[k] for k in keys] for row in rows], title="median per round (ms)")
    for ref, coh in zip(rows[::2], rows[1::2], strict=True):
        speed = float(coh["rounds_per_s"]) / float(ref["rounds_per_s"])
        print(
            f"{ref['tractors']} tractors: cohort uplink rounds/s ×{speed:.2f}, uplink µs per "
            f"tractor {float(ref['uplink_us']):.0f} → {float(coh['uplink_us']):.0f} "
            f"(×{float(ref['uplink_us']) / float(coh['uplink_us']):.2f}); same final model: "
            f"{ref['model_sha256'] == coh['model_sha256']}"
        )


def _worker_run(
    workers: int, rounds: int, hidden: int, steps: int, tmp: Path
) -> tuple[FederatedRun, Any]:
    """A 120-tractor asynchronous hierarchy run with ``workers`` worker processes started
    (as :meth:`FederatedRun.run` starts them); returns the run and its pool (or None)."""
    raw = _raw(120, rounds, False, hidden=hidden, steps=steps, workers=workers)
    run, _ = _run(raw, tmp, f"w{workers}")
    return run, run._start_workers()


def workers_compare(rounds: int, hidden: int, steps: int) -> None:
    """``federation.workers`` 2 vs 1 on the hierarchy, rounds interleaved (module docstring)."""
    with tempfile.TemporaryDirectory() as d:
        runs = {n: _worker_run(n, rounds, hidden, steps, Path(d)) for n in (1, 2)}
        params = {n: r.init_params for n, (r, _) in runs.items()}
        total: dict[int, list[float]] = {1: [], 2: []}
        train: dict[int, list[float]] = {1: [], 2: []}
        hashes: dict[int, str] = {}
        try:
            for r in range(1, rounds + 1):
                for n, (run, _) in runs.items():
                    out = run.scheduler.round(params[n], r)
                    run.comps.store.commit()
                    params[n] = out.params
                    hashes[n] = out.record.model_sha256 or ""
                    if r > 1:  # round 1 starts the worker processes
                        total[n].append(out.record.time_s["total"])
                        train[n].append(out.record.time_s["train"])
        finally:
            for _, pool in runs.values():
                if pool is not None:
                    pool.close()
    med = {n: (statistics.median(total[n]), statistics.median(train[n])) for n in (1, 2)}
    rows = [[n, 1e3 * med[n][0], 1e3 * med[n][1], hashes[n][:12]] for n in (1, 2)]
    print_table(
        ["workers", "round_ms", "client_steps_ms", "model_sha256"],
        rows,
        title=f"hierarchy, 120 tractors, MLP [{hidden}], {steps} local steps, "
        f"median of rounds 2..{rounds}",
    )
    print(
        f"speed-up 1 → 2 workers: round ×{med[1][0] / med[2][0]:.2f}, client steps "
        f"×{med[1][1] / med[2][1]:.2f}; final models bit-identical: "
        f"{hashes[1] == hashes[2]}"
    )


def _child_measure(rounds: int, tmp: Path) -> dict[str, float]:
    """:func:`_measure` at 120 tractors plus the median process CPU time of a scheduler
    round (``cpu_ms``: what this process computed, not the time other processes held the
    core — the figure a loaded machine inflates least)."""
    try:
        from geofl.engine.hierarchy.scheduler import HierarchicalScheduler as Sched
    except ImportError:  # the tree before issue 32's refactor: one module
        from geofl.engine.hierarchy import HierarchicalScheduler as Sched  # type: ignore[attr-defined,no-redef]
    cpu: list[float] = []
    plain = Sched.round

    def timed(self: Any, params: Any, r: int) -> Any:
        t0 = time.process_time()
        out = plain(self, params, r)
        cpu.append(time.process_time() - t0)
        return out

    Sched.round = timed  # type: ignore[method-assign]
    try:
        row = _measure(120, rounds, False, tmp)
    finally:
        Sched.round = plain  # type: ignore[method-assign]
    return {**row, "cpu_ms": 1e3 * statistics.median(cpu)}


def _child_round_ms(src: str, rounds: int) -> dict[str, float]:
    """One child process with ``src`` on ``PYTHONPATH``: :func:`_measure` at 120 tractors."""
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, __file__, "--child", "--rounds", str(rounds)]
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    row: dict[str, float] = json.loads(got.stdout.strip().splitlines()[-1])
    return row


def refactor_cost(old_src: str, rounds: int, pairs: int) -> None:
    """The median hierarchy round with the old tree vs this one, children alternating."""
    new_src = str(Path(__file__).resolve().parents[1] / "src")
    got: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _ in range(pairs):
        for side, src in (("old", old_src), ("new", new_src)):
            got[side].append(_child_round_ms(src, rounds))
    keys = ["total_ms", "cpu_ms", "train_ms", "clock_ms", "aggregate_ms"]
    med = {s: {k: statistics.median(r[k] for r in rows) for k in keys} for s, rows in got.items()}
    print_table(
        ["tree", *keys],
        [[s, *(med[s][k] for k in keys)] for s in ("old", "new")],
        title=f"hierarchy round at 120 tractors: median over {pairs} children × "
        f"{rounds} rounds each (old: {old_src})",
    )
    ratio = med["new"]["total_ms"] / med["old"]["total_ms"]
    cpu_ratio = med["new"]["cpu_ms"] / med["old"]["cpu_ms"]
    per_pair = [n["total_ms"] / o["total_ms"] for o, n in zip(got["old"], got["new"], strict=True)]
    cpu_pair = [n["cpu_ms"] / o["cpu_ms"] for o, n in zip(got["old"], got["new"], strict=True)]
    print(
        f"refactor cost: new ÷ old round = {ratio:.3f} ({100 * (ratio - 1):+.1f} %) wall, "
        f"{cpu_ratio:.3f} ({100 * (cpu_ratio - 1):+.1f} %) process CPU; per pair wall "
        f"{', '.join(f'{x:.3f}' for x in per_pair)}, CPU "
        f"{', '.join(f'{x:.3f}' for x in cpu_pair)} (target ≤ 1.05)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--rounds-large", type=int, default=2)
    ap.add_argument("--large", type=int, default=10_000)
    ap.add_argument("--uplink", action="store_true", help="tractors upload over the 003 uplink")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 3 rounds, 240 tractors")
    ap.add_argument("--workers-compare", action="store_true", help="2 workers vs 1 only")
    ap.add_argument("--worker-hidden", type=int, default=256)
    ap.add_argument("--worker-steps", type=int, default=20)
    ap.add_argument("--refactor-cost", metavar="OLD_SRC", help="old tree vs this one only")
    ap.add_argument("--pairs", type=int, default=3, help="old/new children (--refactor-cost)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--batched", action="store_true", help="batched vs sequential client steps (issue 36)"
    )
    ap.add_argument(
        "--uplink-compare",
        action="store_true",
        help="the 003 uplink per client vs as one cohort (issue 36)",
    )
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.rounds_large, args.large = 3, 1, 240
    set_threads(1)
    if args.child:  # one measurement for --refactor-cost, as JSON on the last line
        with tempfile.TemporaryDirectory() as d:
            print(json.dumps(_child_measure(args.rounds, Path(d))))
        return
    header("bench_hierarchy", args)
    t_start = time.perf_counter()
    if args.uplink_compare:
        compare_uplink(args)
        footer(t_start)
        return
    if args.batched:
        compare_batched(args)
        footer(t_start)
        return
    if args.workers_compare or args.refactor_cost:
        if args.workers_compare:
            workers_compare(args.rounds, args.worker_hidden, args.worker_steps)
        if args.refactor_cost:
            refactor_cost(args.refactor_cost, args.rounds, args.pairs)
        footer(t_start)
        return
    with tempfile.TemporaryDirectory() as d:
        small = _measure(120, args.rounds, args.uplink, Path(d))
        large = _measure(args.large, args.rounds_large, args.uplink, Path(d))
    keys = [
        "tractors",
        "clusters",
        "rounds",
        "build_s",
        "rounds_per_s",
        "train_ms",
        "clock_ms",
        "aggregate_ms",
        "total_ms",
    ]
    print_table(
        keys,
        [[row[k] for k in keys] for row in (small, large)],
        title="median per round (ms); build_s: clusters, sgp4, plans",
    )
    n = large["tractors"] / small["tractors"]
    print(
        f"tractors ×{n:.0f}: rounds/s ÷{small['rounds_per_s'] / large['rounds_per_s']:.1f}; "
        f"per round: client steps ×{large['train_ms'] / small['train_ms']:.1f}, clock "
        f"×{large['clock_ms'] / small['clock_ms']:.1f}, GEO tier "
        f"×{large['aggregate_ms'] / small['aggregate_ms']:.1f}"
    )
    footer(t_start)


if __name__ == "__main__":
    main()
