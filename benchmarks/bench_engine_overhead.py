"""Engine overhead of a real FedAvg run: wall time of the rounds not spent training or evaluating.

Usage::

    .venv/bin/python benchmarks/bench_engine_overhead.py [--quick] [--repeats 3]
        [--preset demo] [--method fedavg-iid] [--set federation.rounds=3 ...]

What is measured and why: the engine (client loop, release, validation, aggregation,
checkpointing, JSONL records, subscribers) should cost next to nothing compared with the
work it orchestrates, so that wall-clock comparisons between methods measure the methods.
The script runs one federated method of a preset (``demo``: synthetic 13-band 32×32 data,
10 clients, small CNN) through :func:`geofl.engine.experiment.run_experiment` and computes

    overhead = (wall time of the rounds − Σ time inside local training − Σ evaluation)
               / wall time of the rounds

* *wall time of the rounds* runs from the subscriber's ``on_run_start`` to ``on_run_end``
  (every round, its evaluation, the per-round JSONL append and checkpoint, ``final.json``);
* *time inside local training* is measured inside the trainer call only: the method's
  trainer is replaced by ``bench_timed_local_sgd``, a thin wrapper around the stock
  ``LocalSGD`` that times each ``__call__`` (generator derivation, release steps and the
  client loop around it are *not* counted as training);
* *evaluation* is the round record's ``time_s.eval`` (the ``FederatedRun.evaluate`` call).

The remaining overhead is broken down by wrapping (in this process only) the run's
``append_jsonl``, ``_torch_save_atomic`` (checkpoint with strategy and client state, best
model), ``write_json_atomic`` and ``read_rounds``, the scheduler's ``_with_hashes`` (model
and update-set SHA-256, outside the record's ``time_s.total``) and
``ClientStateStore.commit``, and by the typed round records' ``time_s`` (aggregation,
per-client engine work). Target: overhead ≤ 3 %.
Each repeat is a fresh run directory; a one-round warm-up run comes first. Medians over
repeats are reported.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import geofl.engine.run as run_mod
import geofl.engine.scheduler as scheduler_mod
from _common import footer, header, print_table, set_threads
from geofl.client.state import ClientStateStore
from geofl.client.trainer import (
    LOCAL_TRAINERS,
    LocalSGD,
    LocalTrainer,
    LocalTrainParams,
    StatelessTrainer,
)
from geofl.config.load import load_config
from geofl.config.schema import Component, ExperimentConfig
from geofl.engine.experiment import run_experiment
from geofl.events import RunInfo
from geofl.models.base import FlatModel
from geofl.records import RoundRecord
from geofl.registry import NoParams

TARGET = 0.03
TRAINER_KEY = "bench_timed_local_sgd"

#: Seconds accumulated per instrumented section during the current run.
SECTIONS: dict[str, float] = defaultdict(float)


class TimedTrainer(StatelessTrainer):
    """Wraps a trainer and adds the duration of each call to ``SECTIONS['trainer']``."""

    def __init__(self, inner: LocalTrainer) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped trainer and time it."""
        t0 = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            SECTIONS["trainer"] += time.perf_counter() - t0


@LOCAL_TRAINERS.register(TRAINER_KEY)
def build_timed_local_sgd(
    _: NoParams, *, workspace: FlatModel, train: LocalTrainParams, task: Any
) -> Any:
    """The stock local SGD trainer, timed per call (benchmark only)."""
    return TimedTrainer(LocalSGD(workspace, train, task))


def _timed(section: Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped so that its duration is added to ``SECTIONS[section(*args)]``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SECTIONS[section(*args)] += time.perf_counter() - t0

    return wrapper


def instrument_engine() -> None:
    """Time the run's per-round file I/O (module attributes of ``geofl.engine.run``), the
    scheduler's content hashes and the client-state commit (in this process only)."""
    run_mod.append_jsonl = _timed(lambda *a: "jsonl append", run_mod.append_jsonl)
    run_mod._torch_save_atomic = _timed(
        lambda path, *a: f"torch.save {Path(path).name}", run_mod._torch_save_atomic
    )
    run_mod.write_json_atomic = _timed(lambda *a: "final.json", run_mod.write_json_atomic)
    run_mod.read_rounds = _timed(lambda *a, **k: "read rounds.jsonl", run_mod.read_rounds)
    scheduler_mod._with_hashes = _timed(
        lambda *a: "model + update-set sha256", scheduler_mod._with_hashes
    )
    ClientStateStore.commit = _timed(  # type: ignore[method-assign]
        lambda *a: "client-state commit", ClientStateStore.commit
    )


class Recorder:
    """Subscriber keeping timestamps and round records."""

    def __init__(self) -> None:
        self.t_start = self.t_end = 0.0
        self.records: list[RoundRecord] = []

    def on_run_start(self, info: RunInfo) -> None:
        """Start of the round loop."""
        SECTIONS.clear()
        self.t_start = time.perf_counter()

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        """Keep the record."""
        self.records.append(record)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        """End of the round loop."""
        self.t_end = time.perf_counter()


def build_config(preset: str, method: str, overrides: list[str]) -> ExperimentConfig:
    """The preset with overrides, reduced to ``method`` with the timed trainer."""
    cfg = load_config(preset, overrides)
    chosen = [m for m in cfg.methods if m.name == method]
    if not chosen:
        raise SystemExit(f"no method {method!r} in {preset}: {[m.name for m in cfg.methods]}")
    if chosen[0].trainer.name != "local_sgd":
        raise SystemExit(f"{method} uses trainer {chosen[0].trainer.name!r}, not local_sgd")
    m = chosen[0].model_copy(update={"trainer": Component(name=TRAINER_KEY)})
    raw = cfg.model_dump(mode="json")
    raw["methods"] = [m.model_dump(mode="json")]
    raw["paper"] = {k: v for k, v in raw["paper"].items() if k == method}
    raw["figures"] = [f for f in raw["figures"] if set(f["methods"]) <= {method}]
    return ExperimentConfig.model_validate(raw)


def one_run(cfg: ExperimentConfig) -> dict[str, float]:
    """Run the experiment once into a fresh directory; return the timing breakdown (s)."""
    rec = Recorder()
    with tempfile.TemporaryDirectory(prefix="geofl-bench-engine-") as tmp:
        t0 = time.perf_counter()
        run_experiment(cfg, Path(tmp) / "run", subscribers=[rec])
        t_total = time.perf_counter() - t0
    wall = rec.t_end - rec.t_start
    rs = [r.time_s for r in rec.records]
    train_rec = sum(r["train"] for r in rs)
    agg = sum(r["aggregate"] for r in rs)
    round_total = sum(r["total"] for r in rs)
    ev = sum(r["eval"] for r in rs)
    trainer = SECTIONS["trainer"]
    out = {
        "wall of rounds": wall,
        "trainer call (training)": trainer,
        "evaluation": ev,
        "client_step minus trainer": train_rec - trainer,
        "round rest (sampling, network, validate)": round_total - train_rec - agg,
        "aggregation (stack + tier + update)": agg,
    }
    out.update({k: v for k, v in SECTIONS.items() if k != "trainer"})
    out["unaccounted (subscribers, loop glue)"] = wall - sum(
        v for k, v in out.items() if k != "wall of rounds"
    )
    out["overhead"] = (wall - trainer - ev) / wall
    out["overhead s"] = wall - trainer - ev
    out["run_experiment total"] = t_total
    out["setup + summary (outside rounds)"] = t_total - wall
    out["rounds"] = float(len(rs))
    return out


def main() -> None:
    """Parse arguments, run warm-up and repeats, print the breakdown."""
    t_start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, 2 rounds, 1000 samples")
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--method", default="fedavg-iid")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=None,
        help="config override path=value (repeatable), applied after federation.rounds=3",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)
    base = ["federation.rounds=3"]
    if args.quick:
        base = ["federation.rounds=2", "data.params.num_samples=1000"]
        args.repeats = 1
    overrides = [*base, *(args.overrides or [])]
    args.overrides = overrides
    header("bench_engine_overhead", args)

    instrument_engine()
    cfg = build_config(args.preset, args.method, overrides)
    warm = cfg.model_copy(update={"federation": cfg.federation.model_copy(update={"rounds": 1})})
    t0 = time.perf_counter()
    one_run(warm)  # dataset generation/cache load, allocator and thread-pool warm-up
    print(f"   warm-up run (1 round, includes dataset cache fill): {time.perf_counter() - t0:.1f}s")
    print(
        f"   {cfg.data.dataset} {cfg.data.params} bands={cfg.data.bands} | model "
        f"{cfg.model.name} {cfg.model.params} | {cfg.federation.num_clients} clients, "
        f"{cfg.federation.rounds} rounds, batch {cfg.train.batch_size}"
    )

    runs = [one_run(cfg) for _ in range(args.repeats)]
    keys = list(dict.fromkeys(k for r in runs for k in r))
    med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
    wall = med["wall of rounds"]
    skip = {
        "overhead",
        "overhead s",
        "run_experiment total",
        "setup + summary (outside rounds)",
        "rounds",
    }
    rows = [[k, med[k], 100 * med[k] / wall] for k in keys if k not in skip]
    print_table(
        ["section (sum over rounds)", "seconds", "% of wall"],
        rows,
        title=f"Breakdown, median of {args.repeats} run(s) of {int(med['rounds'])} rounds",
    )
    overheads = [r["overhead"] for r in runs]
    print(
        f"\nrun_experiment total {med['run_experiment total']:.2f}s, of which outside the "
        f"round loop (data load, partition, summary/report) "
        f"{med['setup + summary (outside rounds)']:.2f}s"
    )
    print(
        "overhead = (wall − trainer − eval) / wall: "
        f"median {100 * med['overhead']:.2f}% (runs: "
        f"{', '.join(f'{100 * o:.2f}%' for o in overheads)}); target ≤ {100 * TARGET:.0f}%: "
        f"{'met' if med['overhead'] <= TARGET else 'MISSED'}"
    )
    print(f"overhead per round: {1e3 * med['overhead s'] / med['rounds']:.1f} ms")
    if torch.get_num_threads() != args.threads:
        print("note: torch thread count changed during the run")
    footer(t_start)


if __name__ == "__main__":
    main()
