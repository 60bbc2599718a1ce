"""The EMA-proximal regulariser (paper 001, Eq. 12–13) in whole runs.

* λ = 0 is FedAvg bit for bit, and β = 0 is FedProx with μ = 2λ bit for bit (Eq. 13 has no
  ½), on a short synthetic run with half the clients per round.
* A run killed and resumed (after a round; between the checkpoint and the client-state
  commit) equals one that never stopped: records, final model and every client's w̄_k and
  count, in memory and memory-mapped.
* Invalid parameters are refused at load time with one line naming the field (exit 2 from
  the CLI, nothing written).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from tests.conftest import tiny_raw
from tests.engine.test_stateful_resume import (
    _client_rows,
    _CrashAfter,
    _kill_before_commit,
    _records,
)
from typer.testing import CliRunner

from geofl.algorithms.emaprox import EMA, SEEN
from geofl.cli import app
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.io import read_jsonl
from geofl.rundir import seed_dir

SEED = 3
PART = {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}


def _cfg(tmp_path: Path, methods: dict[str, dict[str, Any]], **federation: Any) -> ExperimentConfig:
    raw = tiny_raw()
    raw["methods"] = [
        {"name": name, "partition": PART, "algorithm": alg} for name, alg in methods.items()
    ]
    raw["federation"].update(rounds=4, participation=0.5, **federation)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def _final_params(run: Path, method: str) -> torch.Tensor:
    ckpt = torch.load(seed_dir(run, method, SEED) / "checkpoint.pt", weights_only=False)
    params = ckpt["params"]
    assert isinstance(params, torch.Tensor)
    return params


def test_lambda_zero_is_fedavg_and_beta_zero_is_fedprox_bit_for_bit(tmp_path: Path) -> None:
    methods: dict[str, dict[str, Any]] = {
        "fedavg": {"name": "fedavg"},
        "ema0": {"name": "ema_prox", "lam": 0.0, "beta": 0.9},
        "fedprox": {"name": "fedprox", "mu": 0.5},
        "ema_b0": {"name": "ema_prox", "lam": 0.25, "beta": 0.0},
    }
    run = run_experiment(_cfg(tmp_path, methods), tmp_path / "run")
    for ours, theirs in (("ema0", "fedavg"), ("ema_b0", "fedprox")):
        assert _records(run, ours) == _records(run, theirs), ours
        assert torch.equal(_final_params(run, ours), _final_params(run, theirs)), ours
    # the regulariser does act: λ > 0 differs from FedAvg
    assert not torch.equal(_final_params(run, "ema_b0"), _final_params(run, "fedavg"))
    # half the clients per round: some client skipped a round, so the counts differ
    rows = _client_rows(
        seed_dir(run, "ema0", SEED),
        torch.load(seed_dir(run, "ema0", SEED) / "checkpoint.pt", weights_only=False),
    )
    assert len(set(rows[SEEN].tolist())) > 1 and float(np.abs(rows[EMA]).sum()) > 0


RESUME = {"ema": {"name": "ema_prox", "lam": 0.1, "beta": 0.5}}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("whole")
    return run_experiment(_cfg(tmp, RESUME), tmp / "run")


@pytest.mark.parametrize("client_state", ["memory", "mmap"])
def test_killed_and_resumed_run_is_bit_identical(
    client_state: str, uninterrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, RESUME, client_state=client_state)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):  # killed after round 2
        run_experiment(cfg, cut, subscribers=[_CrashAfter("ema", 2)])
    assert len(read_jsonl(seed_dir(cut, "ema", SEED) / "rounds.jsonl")) == 2
    with monkeypatch.context() as m:  # killed in round 3 after its checkpoint, before commit
        _kill_before_commit(m, EMA, 1)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(cfg, cut, resume=True)
    assert len(read_jsonl(seed_dir(cut, "ema", SEED) / "rounds.jsonl")) == 3
    run_experiment(cfg, cut, resume=True)
    assert _records(cut, "ema") == _records(uninterrupted, "ema")
    assert torch.equal(_final_params(cut, "ema"), _final_params(uninterrupted, "ema"))
    s_cut, s_whole = seed_dir(cut, "ema", SEED), seed_dir(uninterrupted, "ema", SEED)
    rows_cut = _client_rows(s_cut, torch.load(s_cut / "checkpoint.pt", weights_only=False))
    rows_whole = _client_rows(s_whole, torch.load(s_whole / "checkpoint.pt", weights_only=False))
    assert set(rows_cut) == set(rows_whole) == {EMA, SEEN}
    for name in rows_whole:
        assert np.array_equal(rows_cut[name], rows_whole[name]), name
    assert float(rows_whole[SEEN].sum()) > 0 and float(np.abs(rows_whole[EMA]).sum()) > 0


@pytest.mark.parametrize(
    ("params", "field", "needle"),
    [
        ({"lam": -0.1}, "lam", "greater than or equal to 0"),
        ({"lam": float("inf")}, "lam", "finite"),
        ({"beta": 1.0}, "beta", "less than 1"),
        ({"beta": -0.5}, "beta", "greater than or equal to 0"),
        ({"init": "ones"}, "init", "'first' or 'zero'"),
        ({"anchor": "middle"}, "anchor", "'after_update' or 'before_update'"),
        ({"mu": 0.1}, "mu", "unknown field"),
    ],
)
def test_invalid_params_are_refused_at_load_time(
    tmp_path: Path, params: dict[str, Any], field: str, needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(tmp_path, {"ema": {"name": "ema_prox", **params}})
    line = str(err.value)
    assert line.startswith(f"methods.0.algorithm.{field}: "), line
    assert needle in line and "\n" not in line, line


def test_cli_refuses_beta_one_with_exit_2(tiny_config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", str(tiny_config_file), "--out", str(out)]
    args += ["--set", "methods.1.algorithm={name: ema_prox, beta: 1}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "methods.1.algorithm.beta" in result.output
    assert not out.exists()
