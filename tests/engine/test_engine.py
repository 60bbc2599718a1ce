"""End-to-end engine behaviour on a tiny synthetic experiment."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.conftest import tiny_raw

from geofl.attacks.client import ATTACKS, ScalingParams
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import PartitionError, RunDirError
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rng import numpy_generator
from geofl.rundir import seed_dir
from geofl.server.sampling import fixed_cohort
from geofl.update import ClientUpdate


def _cfg(tmp_path: Path, overrides: list[str] | None = None) -> Any:
    import yaml

    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(tiny_raw()))
    return load_config(p, overrides or [])


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((run_dir / "methods").glob("*/seed-*/rounds.jsonl")):
        for rec in read_jsonl(path):
            out.append({k: rec[k] for k in ("round", "val", "test", "train_loss", "weights")})
    return out


def test_run_writes_layout_and_is_deterministic(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    a = run_experiment(cfg, tmp_path / "a")
    b = run_experiment(cfg, tmp_path / "b")
    assert _metrics(a) == _metrics(b)  # same config + seed → identical metrics, bit for bit
    sdir = seed_dir(a, "fedavg", 3)
    for name in ("rounds.jsonl", "partition.json", "checkpoint.pt", "best.pt", "final.json"):
        assert (sdir / name).exists(), name
    assert (a / "config.yaml").exists() and (a / "run.json").exists()
    summary = json.loads((a / "summary.json").read_text())
    assert set(summary["methods"]) == {"central", "fedavg"}
    final = json.loads((sdir / "final.json").read_text())
    rounds = read_jsonl(sdir / "rounds.jsonl")
    assert len(rounds) == 3 and final["final"]["test"] == rounds[-1]["test"]
    best = max(rounds, key=lambda r: r["val"]["accuracy"])
    assert final["best_val"]["val"]["accuracy"] == best["val"]["accuracy"]
    assert sum(rounds[0]["weights"]) == pytest.approx(1.0)
    part = json.loads((sdir / "partition.json").read_text())
    assert len(part["histograms"]) == 4 and sum(part["sizes"]) == rounds[0]["val"]["n"] * 0 + sum(
        map(sum, part["histograms"])
    )
    central = json.loads((seed_dir(a, "central", 3) / "partition.json").read_text())
    assert len(central["sizes"]) == 1 and central["sizes"][0] == sum(part["sizes"])


def test_different_seed_gives_different_metrics(tmp_path: Path) -> None:
    a = run_experiment(_cfg(tmp_path), tmp_path / "a")
    b = run_experiment(_cfg(tmp_path, ["seeds=[4]"]), tmp_path / "b")
    assert _metrics(a) != _metrics(b)


class _Crash:
    """Subscriber that kills the run after a given round (simulates a killed process)."""

    def __init__(self, after: int) -> None:
        self.after = after

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if info.method == "fedavg" and record.round == self.after:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def test_resume_gives_the_same_final_metrics(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    whole = run_experiment(cfg, tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "cut", subscribers=[_Crash(after=2)])
    cut = tmp_path / "cut"
    assert not (seed_dir(cut, "fedavg", 3) / "final.json").exists()
    assert len(read_jsonl(seed_dir(cut, "fedavg", 3) / "rounds.jsonl")) == 2
    with pytest.raises(RunDirError, match="--resume"):
        run_experiment(cfg, cut)
    run_experiment(cfg, cut, resume=True)
    assert _metrics(cut) == _metrics(whole)
    f_whole = json.loads((seed_dir(whole, "fedavg", 3) / "final.json").read_text())
    f_cut = json.loads((seed_dir(cut, "fedavg", 3) / "final.json").read_text())
    assert f_whole["final"] == f_cut["final"] and f_whole["best_val"] == f_cut["best_val"]
    a = torch.load(seed_dir(whole, "fedavg", 3) / "checkpoint.pt")["params"]
    b = torch.load(seed_dir(cut, "fedavg", 3) / "checkpoint.pt")["params"]
    assert torch.equal(a, b)


def test_resume_refuses_a_different_config(tmp_path: Path) -> None:
    run_experiment(_cfg(tmp_path), tmp_path / "r")
    with pytest.raises(RunDirError, match="differs from the requested config"):
        run_experiment(_cfg(tmp_path, ["federation.rounds=4"]), tmp_path / "r", resume=True)


NAN_ATTACK = "test_nan_update"


class _NanUpdate:
    def __init__(self, params: ScalingParams) -> None:
        self.clients = frozenset(params.clients)

    def __call__(self, update: ClientUpdate, directives: Any, generator: Any) -> ClientUpdate:
        return replace(update, delta=torch.full_like(update.delta, float("nan")))


if NAN_ATTACK not in ATTACKS:
    ATTACKS.register(NAN_ATTACK, params=ScalingParams)(_NanUpdate)


def test_malformed_updates_are_rejected_and_the_round_proceeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # client 1 sends NaN (a test attack plug-in); the others carry on.
    cfg = _cfg(tmp_path, [f"methods.1.attack={{name: {NAN_ATTACK}, clients: [1]}}"])
    with caplog.at_level("WARNING", logger="geofl"):
        run = run_experiment(cfg, tmp_path / "m")
    rounds = read_jsonl(seed_dir(run, "fedavg", 3) / "rounds.jsonl")
    for rec in rounds:
        assert [r["client"] for r in rec["rejected"]] == [1]
        assert rec["rejected"][0]["reason"] == "malformed"
        assert "non-finite" in rec["rejected"][0]["detail"]
        assert rec["participants"] == [0, 2, 3]
        assert rec["test"]["accuracy"] > 0
    assert "rejected update of client 1" in caplog.text


def test_bad_partition_leaves_no_run_directory(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, ["methods.1.partition.min_samples=200"])
    with pytest.raises(PartitionError, match="min_samples"):
        run_experiment(cfg, tmp_path / "never")
    assert not (tmp_path / "never").exists()


def sample_participants(k: int, q: float, seed: int, round_idx: int) -> list[int]:
    return fixed_cohort(k, q, numpy_generator(seed, "round", round_idx, "participation"))


def test_participation_sampling_is_seeded() -> None:
    a = sample_participants(10, 0.3, seed=1, round_idx=5)
    assert a == sample_participants(10, 0.3, seed=1, round_idx=5)
    assert len(a) == 3 and a == sorted(set(a))
    assert sample_participants(10, 1.0, seed=1, round_idx=5) == list(range(10))
    assert sample_participants(10, 0.01, seed=1, round_idx=5).__len__() == 1
    draws = {tuple(sample_participants(10, 0.3, seed=1, round_idx=r)) for r in range(1, 20)}
    assert len(draws) > 5
