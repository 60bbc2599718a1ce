"""Provenance: run.json says who ran what where; ``--version``; ``config show|validate``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

import geofl
from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.engine.records.provenance import Provenance, git_state
from geofl.events import RunInfo
from geofl.records import RoundRecord
from geofl.rundir import seed_dir

runner = CliRunner()

ENV_KEYS = {"geofl_version", "git", "python", "torch", "numpy", "platform", "cpu_count"}


def test_version_prints_the_version_and_exits_0() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"geofl {geofl.__version__}"


def test_config_show_reloads_to_an_equal_config(tiny_config_file: Path, tmp_path: Path) -> None:
    args = ["config", "show", str(tiny_config_file), "--set", "federation.rounds=5"]
    result = runner.invoke(app, [*args, "--seeds", "7,8"])
    assert result.exit_code == 0, result.output
    shown = tmp_path / "shown.yaml"
    shown.write_text(result.stdout)
    expected = load_config(tiny_config_file, ["federation.rounds=5"], [7, 8])
    assert load_config(shown) == expected
    assert yaml.safe_load(result.stdout)["seeds"] == [7, 8]


def test_config_validate_ok_and_bad_field(tiny_config_file: Path) -> None:
    ok = runner.invoke(app, ["config", "validate", str(tiny_config_file), "--seeds", "1,2"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip() == "ok: tiny (2 methods × 2 seeds, 3 rounds)"
    bad = runner.invoke(
        app, ["config", "validate", str(tiny_config_file), "--set", "federation.rounds=0"]
    )
    assert bad.exit_code == 2
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: federation.rounds")
    seeds = runner.invoke(app, ["config", "show", str(tiny_config_file), "--seeds", "x"])
    assert seeds.exit_code == 2 and "--seeds" in seeds.output


def test_run_json_records_provenance(
    tiny_config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    argv = ["geofl", "run", str(tiny_config_file), "--seeds", "5", "--set", "federation.rounds=1"]
    monkeypatch.setattr(sys, "argv", argv)
    result = runner.invoke(app, [*argv[1:], "--out", str(out), "--no-progress", "--no-report"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "run.json").read_text())
    prov = info["provenance"]
    assert prov["command"] == argv
    assert prov["overrides"] == ["federation.rounds=1"] and prov["seeds"] == [5]
    assert prov.keys() >= ENV_KEYS and prov["geofl_version"] == geofl.__version__
    assert prov["python"] == ".".join(map(str, sys.version_info[:3]))
    assert isinstance(prov["cpu_count"], int) and prov["platform"]
    assert prov["git"] is None or set(prov["git"]) == {"commit", "dirty"}
    assert "resumed" not in info and info["created"] == prov["at"]


def test_git_state_is_none_outside_a_checkout(tmp_path: Path) -> None:
    assert git_state(tmp_path) is None
    assert git_state(tmp_path / "venv" / "site-packages" / "geofl") is None


def test_git_state_in_a_checkout(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    try:
        git("init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git")
    pkg = tmp_path / "src" / "geofl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    state = git_state(pkg)
    assert state is not None and len(state["commit"]) == 40 and state["dirty"] is False
    (pkg / "__init__.py").write_text("x = 1\n")
    assert git_state(pkg) == {"commit": state["commit"], "dirty": True}


class _Crash:
    """Kills the run after fedavg's first round (a killed process)."""

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if info.method == "fedavg" and record.round == 1:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def test_resume_from_another_command_line_appends_a_resumed_entry(tmp_path: Path) -> None:
    src = tmp_path / "cfg.yaml"
    src.write_text(yaml.safe_dump(tiny_raw()))
    cfg = load_config(src, ["federation.rounds=2"])
    out = tmp_path / "cut"
    first = Provenance(argv=("geofl", "run", "x"), overrides=("federation.rounds=2",))
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, out, subscribers=[_Crash()], provenance=first)
    assert not (seed_dir(out, "fedavg", 3) / "final.json").exists()
    args = ["run", str(out / "config.yaml"), "--out", str(out), "--resume"]
    result = runner.invoke(app, [*args, "--no-progress", "--no-report"])
    assert result.exit_code == 0, result.output
    assert (seed_dir(out, "fedavg", 3) / "final.json").exists()
    info = json.loads((out / "run.json").read_text())
    assert info["provenance"]["command"] == ["geofl", "run", "x"]
    assert info["created"] == info["provenance"]["at"]
    (resumed,) = info["resumed"]
    assert resumed["overrides"] == [] and resumed["seeds"] is None
    assert resumed.keys() >= ENV_KEYS
