"""A fake run directory in the engine's format: 3 methods × 2 seeds × 15 rounds.

Final test accuracies are exact so that summaries are hand-checkable: ``fedavg`` ends at
0.90 (seed 0) and 0.94 (seed 1), so its mean is 0.92 and its sample std 0.0282843.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CLASSES = [
    "AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial",
    "Pasture", "PermanentCrop", "Residential", "River", "SeaLake",
]  # fmt: skip

#: name -> (partitioner, params, clients, {seed: final test accuracy})
METHODS: dict[str, tuple[str, dict[str, Any], int, dict[int, float]]] = {
    "centralized": ("pooled", {}, 1, {0: 0.97, 1: 0.96}),
    "fedavg": ("dirichlet", {"alpha": 0.1}, 10, {0: 0.90, 1: 0.94}),
    "consistency": ("dirichlet", {"alpha": 0.1}, 10, {0: 0.92, 1: 0.93}),
}
PAPER = {"fedavg": {"final_test_accuracy": "72.91 ± 2.82", "source": "000 Table 1 row 3"}}
CONFIG = "name: fake-run\n# thresholds: a < b & c > d\nrounds: 15\nseeds: [0, 1]\n"

MakeRunDir = Callable[..., Path]


def _metrics(acc: float, rng: np.random.Generator, null_class: int | None = None) -> dict[str, Any]:
    per_class: list[float | None] = [
        float(np.clip(acc + rng.normal(0, 0.05), 0.0, 1.0)) for _ in CLASSES
    ]
    if null_class is not None:
        per_class[null_class] = None  # a class absent from the split (NaN -> null)
    return {
        "accuracy": acc,
        "macro_f1": max(0.0, acc - 0.02),
        "loss": -math.log(max(acc, 1e-3)) + 0.05,
        "per_class_accuracy": per_class,
        "n": 2700,
    }


def _partition(partitioner: str, params: dict[str, Any], k: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed + 100)
    if k == 1:
        hist = [[2000 + 100 * j for j in range(len(CLASSES))]]
    else:
        probs = rng.dirichlet([params.get("alpha", 1.0)] * len(CLASSES), size=k)
        hist = np.rint(probs * rng.integers(800, 2400, size=(k, 1))).astype(int).tolist()
    return {
        "classes": CLASSES,
        "histograms": hist,
        "sizes": [sum(row) for row in hist],
        "partitioner": partitioner,
        "params": params,
    }


def _write_seed(
    d: Path, spec: tuple[str, dict[str, Any], int, float], seed: int, rounds: int, done: bool
) -> None:
    partitioner, params, k, final_acc = spec
    rng = np.random.default_rng(seed * 7 + k)
    d.mkdir(parents=True)
    records = []
    for t in range(1, rounds + 1):
        noise = rng.normal(0, 0.03 * math.exp(-t / 8))
        test_acc = float(np.clip(final_acc - (final_acc - 0.25) * math.exp(-t / 3) + noise, 0, 1))
        if t == rounds:
            test_acc = final_acc  # exact, so that summaries are hand-checkable
        val_acc = float(np.clip(test_acc + rng.normal(0, 0.01), 0, 1))
        clients = list(range(k))
        records.append(
            {
                "round": t,
                "val": _metrics(val_acc, rng),
                "test": _metrics(test_acc, rng),
                "train_loss": 2.0 * math.exp(-t / 4) + 0.1 + abs(rng.normal(0, 0.02)),
                "participants": clients,
                "rejected": [{"client": 3, "reason": "norm outlier"}] if k > 1 and t == 5 else [],
                "weights": [1.0 / k] * k,
                "time_s": {"train": 1.0, "aggregate": 0.1, "eval": 0.2, "total": 1.3},
            }
        )
    (d / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "partition.json").write_text(json.dumps(_partition(partitioner, params, k, seed)))
    if not done:
        return
    best = max(records, key=lambda r: r["val"]["accuracy"])
    last = records[-1]
    final_test = _metrics(last["test"]["accuracy"], rng, null_class=3 if seed == 1 else None)
    final = {
        "final": {"val": last["val"], "test": final_test},
        "best_val": {"round": best["round"], "val": best["val"], "test": best["test"]},
        "rounds": rounds,
        "wall_s": 1.3 * rounds,
    }
    (d / "final.json").write_text(json.dumps(final))


def write_fake_run(
    root: Path,
    *,
    methods: dict[str, tuple[str, dict[str, Any], int, dict[int, float]]] | None = None,
    seeds: tuple[int, ...] = (0, 1),
    rounds: int = 15,
    incomplete: Iterable[tuple[str, int]] = (),
    missing: Iterable[tuple[str, int]] = (),
    paper: dict[str, Any] | None = None,
) -> Path:
    """Write a run directory under ``root`` and return it.

    Args:
        root: Parent folder; the run goes to ``root / "run"``.
        methods: Method specs (default :data:`METHODS`).
        seeds: Seeds listed in run.json.
        rounds: Evaluated rounds per seed.
        incomplete: (method, seed) pairs written without final.json.
        missing: (method, seed) pairs whose seed directory is not written at all.
        paper: The run.json ``paper`` entry (default :data:`PAPER`).
    """
    methods = METHODS if methods is None else methods
    run_dir = root / "run"
    run_dir.mkdir(parents=True)
    unfinished, absent = set(incomplete), set(missing)
    (run_dir / "config.yaml").write_text(CONFIG)
    info = {
        "name": "fake-run",
        "methods": list(methods),
        "seeds": list(seeds),
        "geofl_version": "0.1.0",
        "created": "2025-01-02T03:04:05+00:00",
        "paper": PAPER if paper is None else paper,
    }
    (run_dir / "run.json").write_text(json.dumps(info, ensure_ascii=False))
    for name, (partitioner, params, k, finals) in methods.items():
        for seed in seeds:
            if (name, seed) in absent:
                continue
            spec = (partitioner, params, k, finals.get(seed, 0.8))
            d = run_dir / "methods" / name / f"seed-{seed}"
            _write_seed(d, spec, seed, rounds, done=(name, seed) not in unfinished)
    return run_dir


@pytest.fixture
def make_run_dir(tmp_path: Path) -> MakeRunDir:
    """Factory: ``make_run_dir(**kwargs)`` → a fresh fake run dir (see :func:`write_fake_run`)."""
    counter = iter(range(1000))

    def make(**kwargs: Any) -> Path:
        return write_fake_run(tmp_path / f"r{next(counter)}", **kwargs)

    return make


@pytest.fixture
def run_dir(make_run_dir: MakeRunDir) -> Path:
    """The default complete fake run: 3 methods × 2 seeds × 15 rounds."""
    return make_run_dir()
