"""Optional extras (issue 34): the core install loads and validates every core config, and a
config that needs a missing extra fails at load with one line naming the pip command."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.errors import ConfigError
from geofl.registry import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _hide(monkeypatch: pytest.MonkeyPatch, extra: str) -> None:
    """Make the modules of ``extra`` look uninstalled to ``importlib.util.find_spec``."""
    real = importlib.util.find_spec
    hidden = set(EXTRAS[extra])

    def find_spec(name: str, package: str | None = None) -> Any:
        if name.split(".")[0] in hidden:
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize(
    ("extra", "preset", "overrides", "path"),
    [
        ("governance", "paper000-governance-a", [], "governance"),
        ("space", "paper003-hierarchical-example", [], "methods.1.hierarchy.leo.contacts"),
        ("detection", "detection-example", [], "task"),
        ("tracking", "demo", ["tracking.mlflow=true"], "tracking.mlflow"),
    ],
)
def test_missing_extra_is_one_line_naming_pip(
    monkeypatch: pytest.MonkeyPatch, extra: str, preset: str, overrides: list[str], path: str
) -> None:
    _hide(monkeypatch, extra)
    with pytest.raises(ConfigError) as err:
        load_config(preset, overrides)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    assert f"pip install 'geofl[{extra}]'" in msg


def test_validate_and_run_refuse_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _hide(monkeypatch, "governance")
    for args in (
        ["config", "validate", "paper000-governance-a"],
        ["run", "paper000-governance-a", "--out", str(tmp_path / "run")],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "pip install 'geofl[governance]'" in result.output
    assert not (tmp_path / "run").exists()


def test_ideal_contacts_need_no_space_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "space")
    ideal = [f"methods.{i}.hierarchy.leo.contacts=ideal" for i in (1, 2)]
    cfg = load_config("paper003-hierarchical-example", ideal)
    assert cfg.methods[1].hierarchy is not None


def test_installed_extras_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every module present (faked), nothing is refused: the check is the only gate."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: object())
    assert load_config("paper000-governance-a").governance is not None


def test_pyproject_extras_match_the_map() -> None:
    """Every extra the code names exists in pyproject.toml, and ``all`` installs them all."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    assert extras["all"] == [f"geofl[{','.join(EXTRAS)}]"]
    core = " ".join(meta["dependencies"])
    for pkg in ("web3", "eth-tester", "vyper", "coincurve", "sgp4", "pycocotools", "flwr"):
        assert pkg not in core, f"{pkg} belongs to an extra, not the core install"


_CORE_ONLY = """
import importlib.abc, sys
HIDDEN = {hidden!r}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(name, name=name)
sys.meta_path.insert(0, Hide())
from geofl import plugins
from geofl.config.load import load_config
plugins.load_all()
import geofl.cli
cfg = load_config("demo")
print("core ok", len(cfg.methods))
"""


def test_core_install_imports_and_validates_demo() -> None:
    """No extra's module is imported by ``geofl``, its plug-ins, its CLI or the demo config."""
    # the extras' modules and what they bring along (not in the core install)
    deps = {"eth_hash", "eth_utils", "eth_abi", "eth_account", "hexbytes", "rlp", "tomli_w"}
    hidden = sorted({m for mods in EXTRAS.values() for m in mods} | deps | {"skyfield"})
    script = _CORE_ONLY.format(hidden=hidden)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "core ok 3" in out.stdout


def test_ledger_commands_on_a_core_install_name_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``geofl ledger …`` opens the chain: without the extra, one line naming pip, exit 2."""
    _hide(monkeypatch, "governance")
    done = runner.invoke(app, ["ledger", "verify", str(tmp_path)])
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1, done.output
    assert "geofl ledger: needs the 'governance' extra" in lines[0]
    assert "pip install 'geofl[governance]'" in lines[0]
