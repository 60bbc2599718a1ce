"""Issue 33's bad deployment input, one line and exit 2 each (no Flower processes start):
a SuperNode without a key (or with a key file that is not there), a ``--resume`` in the
other randomness mode than the run directory's (``secure`` runs resume ``secure``: a
resumed site draws fresh noise and its ledger keeps every released step), a site that
sends a label histogram the method never releases, secure aggregation over one site."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests.conftest import tiny_raw

pytest.importorskip("flwr")

from geofl.cli import app
from geofl.client.state import ClientState
from geofl.client.step import ClientResult
from geofl.deploy import warmsite
from geofl.deploy.server import FlowerRunner, _runner
from geofl.deploy.setup import load_setup
from geofl.deploy.wire import encode_reply
from geofl.engine.scheduler import LostUpload
from geofl.errors import DeployError
from geofl.update import ClientUpdate, UpdateMeta


def _one_error_line(err: str) -> str:
    line = err.strip()
    assert line.startswith("error: ") and "\n" not in line, err
    return line


def test_a_supernode_without_a_key_is_refused_before_it_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["supernode", "--", "--superlink", "127.0.0.1:1", "--root-certificates", "ca.crt"]
    assert warmsite.main(args) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "a SuperNode without a key" in line and "--auth-supernode-private-key" in line


def test_a_key_file_that_is_not_there_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "site0"
    args = ["supernode", "--", "--root-certificates", "ca.crt"]
    assert warmsite.main([*args, "--auth-supernode-private-key", str(missing)]) == 2
    assert f"{missing}: no readable key file" in _one_error_line(capsys.readouterr().err)


def test_insecure_and_explicit_no_auth_need_no_key(tmp_path: Path) -> None:
    assert warmsite.node_key_problem(["--insecure", "--superlink", "x:1"]) is None
    assert warmsite.node_key_problem(["--root-certificates", "ca.crt"], no_auth=True) is None
    key = tmp_path / "k"
    key.write_text("key")
    assert warmsite.node_key_problem(["--auth-supernode-private-key", str(key)]) is None


def test_resume_in_the_other_randomness_mode_stops_before_anything_starts(
    tmp_path: Path,
) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(tiny_raw()), encoding="utf-8")
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump({"privacy": {"randomness": "secure"}}))
    args = ["deploy", "loopback", str(config), "--out", str(out), "--resume", "--method", "fedavg"]
    res = CliRunner().invoke(app, [*args, "--randomness", "seeded"])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert "run with privacy.randomness secure, this resume is seeded" in line
    assert not (out / "flower").exists()  # no SuperLink or SuperNode was started


def test_a_histogram_the_method_never_releases_is_refused_in_one_line() -> None:
    meta = UpdateMeta(client_id=0, num_samples=8, round=1, label_histogram=np.array([3, 5]))
    res = ClientResult(ClientUpdate(torch.zeros(4), meta), ClientState({}, ()), {}, None)
    runner = FlowerRunner(None, {0: 7}, {}, 1.0, histogram_allowed=False)  # type: ignore[arg-type]
    out = runner._outcome(0, _reply(encode_reply(res)))
    assert isinstance(out, LostUpload) and "\n" not in out.detail
    assert out.detail.startswith("site node 7 sent a label_histogram")


def _reply(content: object) -> object:
    """A stand-in for a Flower reply with ``content`` (what ``_outcome`` reads)."""

    class _Reply:
        def __init__(self) -> None:
            self.content = content

        def has_error(self) -> bool:
            return False

    return _Reply()


def test_secure_aggregation_over_one_site_is_refused(tmp_path: Path) -> None:
    raw = tiny_raw(methods=[tiny_raw()["methods"][1]])
    raw["privacy"] = {"secure_aggregation": True}
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    setup = load_setup(config, None, None, "seeded")
    hosts = dict.fromkeys(range(raw["federation"]["num_clients"]), 5)
    with pytest.raises(DeployError, match="secure aggregation needs 2 sites or more, 1 hosts"):
        _runner(None, setup, hosts, {}, 1.0, None, None, tmp_path)  # type: ignore[arg-type]
