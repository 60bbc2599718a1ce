"""Parallel client workers (``federation.workers``): a run with 2 worker processes is
bit-identical to the in-process run — every round record (less wall times), every model
hash and the final model — for a stateful algorithm (SCAFFOLD, client control variates
carried across rounds), a DP release step (Gaussian noise from the client's release
stream) and a privacy-accounted DP-SGD trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.rundir import seed_dir

SEED = 3


def _raw(workers: int) -> dict[str, Any]:
    raw = tiny_raw()
    part = {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}
    raw["methods"] = [
        {"name": "scaffold", "partition": part, "algorithm": {"name": "scaffold"}},
        {
            "name": "gauss",
            "partition": part,
            "release": [{"name": "gaussian", "clip": 1.0, "sigma": 0.05}],
        },
        {
            "name": "dpsgd",
            "partition": part,
            "trainer": {"name": "dp_sgd", "noise_multiplier": 1.0, "clip": 1.0},
        },
    ]
    raw["federation"].update(rounds=3, participation=0.75, workers=workers)
    return raw


def _run(tmp_path: Path, workers: int) -> Path:
    path = tmp_path / f"w{workers}.yaml"
    path.write_text(yaml.safe_dump(_raw(workers)))
    return run_experiment(load_config(path), tmp_path / f"run{workers}")


def _records(run: Path, method: str) -> list[dict[str, Any]]:
    lines = (seed_dir(run, method, SEED) / "rounds.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        rec = json.loads(line)
        rec.pop("time_s")
        out.append(rec)
    return out


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths (``[2].client_log.1.dp_sgd.clip``) where two JSON values differ, with both values:
    a failure names the field rather than a truncated record."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.slow  # three methods twice, one of them in worker processes
def test_two_workers_bit_identical_to_in_process(tmp_path: Path) -> None:
    one, two = _run(tmp_path, 1), _run(tmp_path, 2)
    for method in ("scaffold", "gauss", "dpsgd"):
        a, b = _records(one, method), _records(two, method)
        assert len(a) == 3
        assert a == b, f"{method}: {_differences(a, b)}"
        assert all(r["model_sha256"] for r in a)
        fa = torch.load(seed_dir(one, method, SEED) / "checkpoint.pt", weights_only=False)
        fb = torch.load(seed_dir(two, method, SEED) / "checkpoint.pt", weights_only=False)
        assert torch.equal(fa["params"], fb["params"])
        assert fa["clients"]["events"] == fb["clients"]["events"]
    final = json.loads((seed_dir(two, "dpsgd", SEED) / "final.json").read_text())
    assert final["privacy"]["epsilon_max"] > 0


def test_workers_read_an_mmap_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``data.cache: mmap``: the split's stored rows reach the workers as the store's path
    (reopened read-only, not pickled); the run equals the in-process one."""
    monkeypatch.setenv("GEOFL_CACHE", str(tmp_path / "cache"))
    outs = []
    for workers in (1, 2):
        raw = tiny_raw()
        raw["data"]["cache"] = "mmap"
        raw["methods"] = raw["methods"][1:]
        raw["federation"].update(rounds=2, workers=workers)
        path = tmp_path / f"m{workers}.yaml"
        path.write_text(yaml.safe_dump(raw))
        outs.append(run_experiment(load_config(path), tmp_path / f"mm{workers}"))
    assert _records(outs[0], "fedavg") == _records(outs[1], "fedavg")
