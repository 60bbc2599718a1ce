"""``geofl deploy``: the app directory ``flwr run`` needs, and bad input refused up front."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli
import yaml
from typer.testing import CliRunner

from tests.conftest import tiny_raw

pytest.importorskip("flwr")

from flwr.common.config import validate_config

from geofl.cli import app

runner = CliRunner()


def test_app_directory_is_a_valid_flower_app(tmp_path: Path) -> None:
    res = runner.invoke(app, ["deploy", "app", str(tmp_path / "app")])
    assert res.exit_code == 0, res.output
    doc = tomli.loads((tmp_path / "app" / "pyproject.toml").read_text())
    ok, errors, _ = validate_config(doc, check_module=True, project_dir=tmp_path / "app")
    assert ok, errors
    components = doc["tool"]["flwr"]["app"]["components"]
    assert components == {
        "serverapp": "geofl.deploy.flower:server_app",
        "clientapp": "geofl.deploy.flower:client_app",
    }


def test_loopback_refuses_more_sites_than_clients(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(tiny_raw()))
    res = runner.invoke(
        app, ["deploy", "loopback", str(cfg), "--out", str(tmp_path / "o"), "--sites", "9"]
    )
    assert res.exit_code == 2
    assert "--sites: 9 sites for 4 clients" in res.output
