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


def test_certs_and_node_key_are_what_flower_loads(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.cli.supernode.register import try_load_public_key

    res = runner.invoke(app, ["deploy", "certs", str(tmp_path / "c"), "--host", "link.example"])
    assert res.exit_code == 0, res.output
    cert = x509.load_pem_x509_certificate((tmp_path / "c" / "server.pem").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["link.example"]
    res = runner.invoke(app, ["deploy", "key", str(tmp_path / "k"), "site0"])
    assert res.exit_code == 0, res.output
    # the SuperNode reads the private key, `flwr supernode register` the public one
    key = load_ssh_private_key((tmp_path / "k" / "site0").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
    assert try_load_public_key(tmp_path / "k" / "site0.pub")
    assert (tmp_path / "k" / "site0").stat().st_mode & 0o777 == 0o600
    res = runner.invoke(app, ["deploy", "key", str(tmp_path / "k"), "site0"])
    assert res.exit_code == 2 and "site0 exists" in res.output
