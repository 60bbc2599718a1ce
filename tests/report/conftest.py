"""A fake run directory in the engine's format: 3 methods × 2 seeds × 15 rounds.

Final test accuracies are exact so that summaries are hand-checkable: ``fedavg`` ends at
0.90 (seed 0) and 0.94 (seed 1), so its mean is 0.92 and its sample std 0.0282843.

Every round aggregates all clients with random normalised weights, except round 5, where
the update of client 3 is rejected (absent from ``participants`` and ``weights``).
Optional paper-000 artefacts (labels, Table 1 paper values, figures, ``final.json``
privacy, client risk levels, weighting in ``config.yaml``, the attribute-inference result)
are written on request; see :func:`write_fake_run`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from geofl.data.base import EUROSAT_CLASSES

CLASSES = list(EUROSAT_CLASSES)

#: name -> (partitioner, params, clients, {seed: final test accuracy})
METHODS: dict[str, tuple[str, dict[str, Any], int, dict[int, float]]] = {
    "centralized": ("pooled", {}, 1, {0: 0.97, 1: 0.96}),
    "fedavg": ("dirichlet", {"alpha": 0.1}, 10, {0: 0.90, 1: 0.94}),
    "consistency": ("dirichlet", {"alpha": 0.1}, 10, {0: 0.92, 1: 0.93}),
}
PAPER = {"fedavg": {"final_test_accuracy": "72.91 ± 2.82", "source": "000 Table 1 row 3"}}
CONFIG = "name: fake-run\n# thresholds: a < b & c > d\nrounds: 15\nseeds: [0, 1]\n"

#: Paper values with the Table 1 columns (000 Table 1 rows 4 and 7); "centralized" has none.
PAPER_TABLE1 = {
    "fedavg": {
        "final_test_accuracy": "72.91 ± 2.82",
        "source": "000 Table 1 row 4",
        "setting": "α=0.1",
        "perturbation": "None",
        "aggregation": "FedAvg",
    },
    "consistency": {
        "final_test_accuracy": "76.21 ± 1.21",
        "source": "000 Table 1 row 7",
        "setting": "α=0.1",
        "perturbation": "Spatial-aware noise",
        "aggregation": "Consistency-based weighting",
    },
}
LABELS = {"centralized": "Centralized", "fedavg": "FedAvg", "consistency": "Integrated Method"}
FIGURES = [
    {
        "title": "Fig. 12: noise vs integrated",
        "methods": ["fedavg", "consistency"],
        "kind": "accuracy",
    },
    {"title": "Fig. 11: rolling std", "methods": ["fedavg", "consistency"], "kind": "rolling_std"},
]
#: ``analysis/attribute_inference.json`` in the analysis's format (one null AUC).
ATTACK: dict[str, Any] = {
    "protocol": "samples = client × 5-round windows; leave-one-seed-out CV",
    "methods": {
        "fedavg": {
            "seeds": ["seed-0", "seed-1"],
            "n_clients": 20,
            "high_risk": {
                "auc": 0.8123,
                "fold_auc": [0.79, 0.83],
                "n_samples": 60,
                "positive_fraction": 0.25,
            },
            "low_entropy": {
                "auc": 0.6789,
                "fold_auc": [0.7, None],
                "n_samples": 60,
                "positive_fraction": 0.5,
            },
            "best_val_test_accuracy": 0.6123,
        },
        "consistency": {
            "seeds": ["seed-0", "seed-1"],
            "n_clients": 20,
            "high_risk": {
                "auc": 0.5432,
                "fold_auc": [0.5, 0.58],
                "n_samples": 60,
                "positive_fraction": 0.25,
            },
            "low_entropy": {
                "auc": None,
                "fold_auc": [None, None],
                "n_samples": 60,
                "positive_fraction": 0.0,
            },
            "best_val_test_accuracy": None,
        },
    },
    "paper": {"fedavg": {"high_risk": 0.8251, "low_entropy": 0.7521, "best_test_accuracy": 0.6059}},
}
RISK_LEVELS = ("high", "mid", "low")

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


def privacy_entry(epsilon: float | None, k: int = 10) -> dict[str, Any]:
    """``final.json["privacy"]`` as the engine writes it; client i has ε · (i + 1) / k.

    ``epsilon`` inf: every client's ε is infinite, which strict JSON stores as null;
    None: no client was accounted (empty ``epsilon_per_client``).
    """
    finite = epsilon is not None and math.isfinite(epsilon)
    per_client: dict[str, float | None] = {}
    if epsilon is not None:
        per_client = {str(i): epsilon * (i + 1) / k if finite else None for i in range(k)}
    return {
        "accountant": "rdp",
        "delta": 1e-5,
        "epsilon_per_client": per_client,
        "epsilon_max": epsilon if finite else None,
        "epsilon_min": epsilon / k if finite and epsilon is not None else None,
        "noise_multiplier_min": 2.5e-4,
        "noise_multiplier_max": 8.8e-4,
        "neighbouring": "add/remove one client's whole update per round (update-level DP)",
    }


def _client_log(k: int) -> dict[str, Any]:
    return {
        str(i): {
            "risk_aware": {"level": RISK_LEVELS[i % 3], "dp_event": {"noise_multiplier": 5e-4}}
        }
        for i in range(k)
    }


def _write_seed(
    d: Path,
    spec: tuple[str, dict[str, Any], int, float],
    seed: int,
    rounds: int,
    done: bool,
    privacy: float | None = None,
) -> None:
    partitioner, params, k, final_acc = spec
    rng = np.random.default_rng(seed * 7 + k)
    weight_rng = np.random.default_rng(seed * 11 + k)
    d.mkdir(parents=True)
    records = []
    for t in range(1, rounds + 1):
        noise = rng.normal(0, 0.03 * math.exp(-t / 8))
        test_acc = float(np.clip(final_acc - (final_acc - 0.25) * math.exp(-t / 3) + noise, 0, 1))
        if t == rounds:
            test_acc = final_acc  # exact, so that summaries are hand-checkable
        val_acc = float(np.clip(test_acc + rng.normal(0, 0.01), 0, 1))
        rejected = [{"client": 3, "reason": "norm outlier"}] if k > 1 and t == 5 else []
        clients = [c for c in range(k) if not any(r["client"] == c for r in rejected)]
        raw = weight_rng.uniform(0.5, 1.5, size=len(clients))
        records.append(
            {
                "round": t,
                "val": _metrics(val_acc, rng),
                "test": _metrics(test_acc, rng),
                "train_loss": 2.0 * math.exp(-t / 4) + 0.1 + abs(rng.normal(0, 0.02)),
                "participants": clients,
                "rejected": rejected,
                "weights": (raw / raw.sum()).tolist(),
                "client_log": _client_log(k) if privacy is not None else {},
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
        "num_clients": k,
        "wall_s": 1.3 * rounds,
    }
    if privacy is not None:
        final["privacy"] = privacy_entry(privacy, k)
    (d / "final.json").write_text(json.dumps(final, allow_nan=False))


def write_fake_run(
    root: Path,
    *,
    methods: dict[str, tuple[str, dict[str, Any], int, dict[int, float]]] | None = None,
    seeds: tuple[int, ...] = (0, 1),
    rounds: int = 15,
    incomplete: Iterable[tuple[str, int]] = (),
    missing: Iterable[tuple[str, int]] = (),
    paper: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    figures: list[dict[str, Any]] | None = None,
    privacy: dict[str, dict[int, float]] | None = None,
    weighting: dict[str, dict[str, Any]] | None = None,
    rolling_window: int | None = None,
    attack: dict[str, Any] | None = None,
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
        labels: The run.json ``labels`` entry (omitted by default).
        figures: The run.json ``figures`` entry (omitted by default).
        privacy: ``method -> seed -> ε_max`` written as ``final.json["privacy"]`` (inf: the
            engine's null for an infinite ε); these methods' rounds also get client logs
            with risk levels (client i: high, mid, low for i mod 3 = 0, 1, 2).
        weighting: ``method -> weighting component`` for the ``methods`` list of
            ``config.yaml`` (with ``rolling_window``, written as ``eval.rolling_window``).
        rolling_window: See ``weighting``.
        attack: Content of ``analysis/attribute_inference.json`` (not written by default).
    """
    methods = METHODS if methods is None else methods
    privacy = privacy or {}
    run_dir = root / "run"
    run_dir.mkdir(parents=True)
    unfinished, absent = set(incomplete), set(missing)
    config = CONFIG
    if rolling_window is not None:
        config += f"eval:\n  rolling_window: {rolling_window}\n"
    if weighting:
        config += "methods:\n" + "".join(
            f"  - name: {m}\n    weighting: {json.dumps(weighting.get(m, {'name': 'data_size'}))}\n"
            for m in methods
        )
    (run_dir / "config.yaml").write_text(config)
    info: dict[str, Any] = {
        "name": "fake-run",
        "methods": list(methods),
        "seeds": list(seeds),
        "geofl_version": "0.1.0",
        "created": "2025-01-02T03:04:05+00:00",
        "paper": PAPER if paper is None else paper,
    }
    if labels is not None:
        info["labels"] = labels
    if figures is not None:
        info["figures"] = figures
    (run_dir / "run.json").write_text(json.dumps(info, ensure_ascii=False))
    if attack is not None:
        (run_dir / "analysis").mkdir()
        (run_dir / "analysis" / "attribute_inference.json").write_text(json.dumps(attack))
    for name, (partitioner, params, k, finals) in methods.items():
        for seed in seeds:
            if (name, seed) in absent:
                continue
            spec = (partitioner, params, k, finals.get(seed, 0.8))
            d = run_dir / "methods" / name / f"seed-{seed}"
            eps = privacy.get(name, {}).get(seed)
            _write_seed(d, spec, seed, rounds, (name, seed) not in unfinished, privacy=eps)
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
