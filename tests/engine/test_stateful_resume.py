"""Resume of stateful algorithms: a run killed and resumed (possibly several times) must be
bit-identical to one that never stopped — records, model hashes, final model, server state
(SCAFFOLD's c, FedDyn's h, FedYogi's m and v) and every client's state (c_k, ∇L_k).

Kills are simulated at three points: after a round is complete (a subscriber raises
KeyboardInterrupt, as in tests/engine/test_engine.py), while the checkpoint is written (the
round's record already appended), and between the checkpoint and the client-state commit
(the window the staged rows in the checkpoint exist for).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from tests.conftest import tiny_raw

import geofl.engine.run as run_module
from geofl.client.state import ClientStateStore
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.experiment import run_experiment
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

METHODS = ["scaffold", "feddyn", "fedyogi"]
SEED = 3


def _raw(client_state: str) -> dict[str, Any]:
    raw = tiny_raw()
    part = {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}
    raw["methods"] = [
        {"name": "scaffold", "partition": part, "algorithm": {"name": "scaffold"}},
        {"name": "feddyn", "partition": part, "algorithm": {"name": "feddyn", "alpha": 0.1}},
        {"name": "fedyogi", "partition": part, "algorithm": {"name": "fedyogi", "server_lr": 0.03}},
    ]
    raw["federation"].update(rounds=4, participation=0.5, client_state=client_state)
    return raw


def _cfg(tmp_path: Path, client_state: str) -> ExperimentConfig:
    path = tmp_path / f"{client_state}.yaml"
    path.write_text(yaml.safe_dump(_raw(client_state)))
    return load_config(path)


class _CrashAfter:
    """Kill the run once ``method`` has finished round ``after`` (record, checkpoint, commit)."""

    def __init__(self, method: str, after: int) -> None:
        self.method, self.after = method, after

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if info.method == self.method and record.round == self.after:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def _kill_before_commit(monkeypatch: pytest.MonkeyPatch, state_name: str, nth: int) -> None:
    """Kill at the ``nth`` commit of the store holding ``state_name``: its checkpoint is on
    disk, its staged rows are not yet applied."""
    real = ClientStateStore.commit
    calls: dict[int, int] = {}

    def commit(self: ClientStateStore) -> None:
        if state_name in self.specs:
            calls[id(self)] = calls.get(id(self), 0) + 1
            if calls[id(self)] == nth:
                raise KeyboardInterrupt
        real(self)

    monkeypatch.setattr(ClientStateStore, "commit", commit)


def _kill_at_checkpoint(monkeypatch: pytest.MonkeyPatch, method: str, round_idx: int) -> None:
    """Kill while ``method`` writes the checkpoint of ``round_idx``: the round's record is
    already in rounds.jsonl, the previous checkpoint and the committed state are on disk."""
    real = run_module.save_checkpoint

    def save(path: Path, obj: dict[str, Any]) -> None:
        if path.parent.parent.name == method and obj.get("round") == round_idx:
            raise KeyboardInterrupt
        real(path, obj)

    monkeypatch.setattr(run_module, "save_checkpoint", save)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("whole")
    return run_experiment(_cfg(tmp, "memory"), tmp / "run")


def _records(run: Path, method: str) -> list[dict[str, Any]]:
    out = []
    for rec in read_jsonl(seed_dir(run, method, SEED) / "rounds.jsonl"):
        rec.pop("time_s")
        out.append(rec)
    return out


def _client_rows(sdir: Path, ckpt: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every client's final state: the memory-mapped files, or the checkpoint's arrays with
    its staged rows applied."""
    if (sdir / "client_state").exists():
        return {p.stem: np.load(p) for p in sorted((sdir / "client_state").glob("*.npy"))}
    # (a memory-mapped store of an algorithm without client tensors has no files at all)
    arrays = {k: v.clone() for k, v in ckpt["clients"].get("arrays", {}).items()}
    for k, tensors in ckpt["clients"]["staged"].items():
        for name, t in tensors.items():
            arrays[name][int(k)] = t
    return {k: v.numpy() for k, v in arrays.items()}


def _assert_same_state(a: Any, b: Any, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _assert_same_state(a[k], b[k], f"{where}.{k}")
    else:
        assert a == b, where


def _assert_identical(cut: Path, whole: Path) -> None:
    for method in METHODS:
        got, want = _records(cut, method), _records(whole, method)
        assert [r["round"] for r in got] == [1, 2, 3, 4], method
        assert got == want, method  # metrics, weights, hashes, strategy scalars: bit for bit
        s_cut, s_whole = seed_dir(cut, method, SEED), seed_dir(whole, method, SEED)
        f_cut = json.loads((s_cut / "final.json").read_text())
        f_whole = json.loads((s_whole / "final.json").read_text())
        assert f_cut["final"] == f_whole["final"] and f_cut["best_val"] == f_whole["best_val"]
        c_cut = torch.load(s_cut / "checkpoint.pt", weights_only=False)
        c_whole = torch.load(s_whole / "checkpoint.pt", weights_only=False)
        assert torch.equal(c_cut["params"], c_whole["params"]), method
        _assert_same_state(c_cut["strategy"], c_whole["strategy"], f"{method}.strategy")
        rows_cut, rows_whole = _client_rows(s_cut, c_cut), _client_rows(s_whole, c_whole)
        assert set(rows_cut) == set(rows_whole), method
        for name in rows_whole:
            assert np.array_equal(rows_cut[name], rows_whole[name]), (method, name)
    # the state the test compares is really there
    c = torch.load(seed_dir(whole, "scaffold", SEED) / "checkpoint.pt", weights_only=False)
    assert float(torch.linalg.vector_norm(c["strategy"]["control"])) > 0
    y = torch.load(seed_dir(whole, "fedyogi", SEED) / "checkpoint.pt", weights_only=False)
    assert y["strategy"]["optimizer"]["v"] is not None


@pytest.mark.parametrize("client_state", ["memory", "mmap"])
def test_killed_and_resumed_runs_are_bit_identical(
    client_state: str, uninterrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, client_state)
    cut = tmp_path / "cut"
    # 1. killed after SCAFFOLD's round 2
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, cut, subscribers=[_CrashAfter("scaffold", 2)])
    assert len(read_jsonl(seed_dir(cut, "scaffold", SEED) / "rounds.jsonl")) == 2
    if client_state == "mmap":
        assert (seed_dir(cut, "scaffold", SEED) / "client_state" / "control.npy").exists()
    # 2. resumed; killed while SCAFFOLD writes round 3's checkpoint (its record is written)
    with monkeypatch.context() as m:
        _kill_at_checkpoint(m, "scaffold", 3)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg, cut, resume=True)
    assert len(read_jsonl(seed_dir(cut, "scaffold", SEED) / "rounds.jsonl")) == 3
    # 3. resumed; killed in FedDyn's round 2 after its checkpoint, before the state commit
    with monkeypatch.context() as m:
        _kill_before_commit(m, "dyn_gradient", 2)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg, cut, resume=True)
    assert (seed_dir(cut, "scaffold", SEED) / "final.json").exists()
    assert len(read_jsonl(seed_dir(cut, "feddyn", SEED) / "rounds.jsonl")) == 2
    # 4. resumed; killed after FedYogi's round 3 (server optimiser state only)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, cut, resume=True, subscribers=[_CrashAfter("fedyogi", 3)])
    # 5. resumed to the end
    run_experiment(cfg, cut, resume=True)
    _assert_identical(cut, uninterrupted)
