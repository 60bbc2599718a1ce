"""Shared builders for the hierarchy engine tests: a tiny synthetic_agri experiment (12
tractors of 5 farms in three regions, a 16-8 MLP) and the run of one of its methods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.experiment import _plan, load_dataset, prepare_split
from geofl.engine.run import FederatedRun
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

SEED = 2


def agri_raw(hierarchy: dict[str, Any] | None, *, rounds: int = 3, **method: Any) -> dict[str, Any]:
    """One method over 12 tractors (clients = tractors) with ``hierarchy`` (None: flat)."""
    m: dict[str, Any] = {"name": "hier", "partition": {"name": "group", "key": "tractor"}}
    if hierarchy is not None:
        m["hierarchy"] = hierarchy
    m.update(method)
    return {
        "name": "hier-tiny",
        "seeds": [SEED],
        "task": {"name": "binary"},
        "data": {
            "dataset": "synthetic_agri",
            "params": {
                "task": "stress",
                "seed": 0,
                "num_tractors": 12,
                "num_blocks": 120,
                "farms_per_region": [2, 2, 1],
            },
            "bands": "all",
            "split": {"val": 0.1, "test": 0.2},
        },
        "model": {"name": "mlp", "params": {"hidden": [16, 8]}},
        "train": {"optimizer": "sgd", "lr": 0.05, "batch_size": 32, "local_steps": 2},
        "federation": {"num_clients": 12, "rounds": rounds},
        "eval": {"every": 1, "batch_size": 4096},
        "methods": [m],
    }


def config(tmp_path: Path, raw: dict[str, Any], name: str = "cfg") -> ExperimentConfig:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def make_run(cfg: ExperimentConfig, out: Path) -> FederatedRun:
    """The FederatedRun of the config's only method (no files written yet)."""
    ds = load_dataset(cfg)
    splits, parts = _plan(cfg, ds)
    data = prepare_split(ds, cfg, SEED, splits[SEED])
    method = cfg.methods[0]
    return FederatedRun(cfg, method, SEED, data, parts[SEED][method.name], out)


class CrashAfter:
    """A subscriber that interrupts the run after round ``after`` (a kill between rounds)."""

    def __init__(self, after: int) -> None:
        self.after = after

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if record.round == self.after:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def round_records(run: Path, method: str = "hier") -> list[dict[str, Any]]:
    """``rounds.jsonl`` of ``method`` at :data:`SEED`, without wall times (comparable)."""
    out = []
    for rec in read_jsonl(seed_dir(run, method, SEED) / "rounds.jsonl"):
        rec.pop("time_s")
        out.append(rec)
    return out
