"""DP-FTRL end to end: the CLI run, ε in each round record and in final.json, resume that
reproduces an uninterrupted run bit for bit, and one-line refusals at load time."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import dp_accounting as dpa
import pytest
import torch
import yaml
from dp_accounting.rdp import rdp_privacy_accountant
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import ConfigError
from geofl.events import RunInfo
from geofl.io import read_jsonl
from geofl.privacy.tree import RDP_ORDERS
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

SEED = 3
FTRL = {"name": "dp_ftrl", "noise_multiplier": 1.0, "clip": 1.0, "server_lr": 1.0}


def _raw(algorithm: dict[str, Any] | None = None, **method: Any) -> dict[str, Any]:
    raw = tiny_raw()
    raw["methods"] = [{"name": "dpftrl", "algorithm": algorithm or FTRL, **method}]
    raw["federation"].update(rounds=4)
    return raw


def _write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "ftrl.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    return path


def test_cli_run_reports_epsilon_per_round_and_in_final(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["run", str(_write(tmp_path, _raw())), "--out", str(out), "--no-progress", "--no-report"],
    )
    assert result.exit_code == 0, result.output
    sdir = seed_dir(out, "dpftrl", SEED)
    records = read_jsonl(sdir / "rounds.jsonl")
    eps = [r["strategy"]["dp_ftrl.epsilon"] for r in records]
    # 4 clients, q = 1: m = 4, one-round trees, every client in every round: S = t, so
    # ε_t is t self-composed Gaussians of multiplier σ = 1 (no amplification)
    for t, e in enumerate(eps, start=1):
        acc = rdp_privacy_accountant.RdpAccountant(list(RDP_ORDERS))
        acc.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1.0), t))
        assert e == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    final = json.loads((sdir / "final.json").read_text())
    server = final["server_privacy"]
    assert server["epsilon"] == eps[-1] and server["tree_rounds"] == 1
    assert server["expected_clients"] == 4.0 and server["sq_sensitivity_max"] == 4
    assert "privacy" not in final  # no noisy client release steps: that ledger stays empty
    assert all(
        r["client_log"][k]["dp_ftrl_clip"]["bound"] == 1.0 for r in records for k in r["client_log"]
    )


class _CrashAfter:
    def __init__(self, after: int) -> None:
        self.after = after

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if record.round == self.after:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def test_resumed_run_is_bit_identical(tmp_path: Path) -> None:
    algorithm = {**FTRL, "momentum": 0.9, "tree_rounds": 3}
    raw = _raw(algorithm)
    raw["federation"].update(rounds=5, participation=0.5)
    cfg = load_config(_write(tmp_path, raw))
    whole = run_experiment(cfg, tmp_path / "whole")
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, cut, subscribers=[_CrashAfter(2)])
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, cut, resume=True, subscribers=[_CrashAfter(4)])
    run_experiment(cfg, cut, resume=True)

    def records(run: Path) -> list[dict[str, Any]]:
        recs = read_jsonl(seed_dir(run, "dpftrl", SEED) / "rounds.jsonl")
        return [{k: v for k, v in r.items() if k != "time_s"} for r in recs]

    assert [r["round"] for r in records(cut)] == [1, 2, 3, 4, 5]
    assert records(cut) == records(whole)
    ck_cut, ck_whole = (
        torch.load(seed_dir(r, "dpftrl", SEED) / "checkpoint.pt", weights_only=False)
        for r in (cut, whole)
    )
    assert torch.equal(ck_cut["params"], ck_whole["params"])
    for key, value in ck_whole["strategy"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(ck_cut["strategy"][key], value), key
    final = [
        json.loads((seed_dir(r, "dpftrl", SEED) / "final.json").read_text()) for r in (cut, whole)
    ]
    assert final[0]["server_privacy"] == final[1]["server_privacy"]
    assert final[0]["final"] == final[1]["final"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("noise_multiplier", 0.0), ("noise_multiplier", -1.0), ("clip", 0.0), ("clip", -2.0)],
)
def test_bad_sigma_or_clip_exits_2_with_one_line_and_nothing_written(
    tmp_path: Path, field: str, value: float
) -> None:
    out = tmp_path / "run"
    path = _write(tmp_path, _raw({**FTRL, field: value}))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"methods.0.algorithm.{field}" in lines[0], result.output
    assert not out.exists()


def _refused(tmp_path: Path, raw: dict[str, Any], prefix: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, raw))
    line = str(err.value)
    assert line.startswith(prefix + ": ") and needle in line and "\n" not in line, line


def test_load_time_refusals_name_the_field(tmp_path: Path) -> None:
    _refused(tmp_path, _raw(defenses=[{"name": "norm_bound"}]), "methods.0.defenses", "defense")
    _refused(tmp_path, _raw(aggregator={"name": "median"}), "methods.0.aggregator.name", "'median'")
    _refused(
        tmp_path,
        _raw(weighting={"name": "consistency"}),
        "methods.0.weighting.name",
        "weighs every clipped update 1/m",
    )
    raw = _raw()
    raw["federation"]["sampling"] = {"name": "poisson", "rate": 0.5}
    _refused(tmp_path, raw, "methods.0.algorithm.expected_clients", "fixed, data-independent")
    raw["methods"][0]["algorithm"] = {**FTRL, "expected_clients": 2.0}
    assert load_config(_write(tmp_path, raw)).methods[0].algorithm.params["expected_clients"] == 2
    raw = _raw()
    raw["governance"] = {}
    _refused(tmp_path, raw, "governance", "participation pattern independent of the data")


def test_multiple_participations_per_tree_warn_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="geofl"):
        load_config(_write(tmp_path, _raw({**FTRL, "tree_rounds": 4})))
    assert "more than once per tree" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="geofl"):
        load_config(_write(tmp_path, _raw()))
    assert "more than once per tree" not in caplog.text
