"""A tracker that cannot be written (issue 31 item 16): refused before round 1 in one line
(exit 2, in seconds, naming the URI or directory); a tracker that fails during the run
warns once, is switched off, and the run's own results are written as without it."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from geofl.cli import app
from geofl.errors import ConfigError
from tests.conftest import tiny_raw

pytest.importorskip("mlflow.tracking", reason="needs the tracking extra")
pytest.importorskip("tensorboard", reason="needs the tracking extra")


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporter may set MLflow's variables; undo them after each test."""
    for name in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_DISABLE_TELEMETRY"):
        monkeypatch.delenv(name, raising=False)


def _config(tmp_path: Path) -> Path:
    method = {"name": "fedavg", "partition": {"name": "iid"}}
    raw = tiny_raw(methods=[method], federation={"num_clients": 2, "rounds": 2})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(tmp_path: Path, *args: str) -> tuple[Any, float, Path]:
    """``geofl run tiny.yaml --out RUN --no-progress --no-report ARGS``; result, seconds."""
    out = tmp_path / "run"
    t0 = time.monotonic()
    cmd = ["run", str(_config(tmp_path)), "--out", str(out), "--no-progress", "--no-report"]
    result = CliRunner().invoke(app, [*cmd, *args])
    return result, time.monotonic() - t0, out


def _closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused(result: Any, out: Path, *needles: str) -> str:
    """The one error line of a run refused before round 1 (exit 2, nothing left behind)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()  # refused before round 1: the new run directory is gone
    return lines[0]


def test_an_unknown_uri_scheme_is_one_line(tmp_path: Path) -> None:
    result, _, out = _run(tmp_path, "--track", "mlflow", "--set", "tracking.mlflow_uri=foo://x")
    _refused(result, out, "tracking.mlflow_uri", "foo://x", "unknown scheme 'foo'")


def test_an_unreachable_server_is_refused_in_seconds(tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    result, seconds, out = _run(
        tmp_path, "--track", "mlflow", "--set", f"tracking.mlflow_uri={uri}"
    )
    _refused(result, out, uri, "Connection refused")
    assert seconds < 30  # was 258 s of MLflow's retries


def test_a_sqlite_store_that_is_not_a_database_is_refused_in_seconds(tmp_path: Path) -> None:
    """A file that is no database fails for root too (chmod would not stop root); MLflow
    retried creating its engine for about two minutes, then raised."""
    db = tmp_path / "garbage.db"
    db.write_bytes(b"not a database" * 100)
    result, seconds, out = _run(
        tmp_path, "--track", "mlflow", "--set", f"tracking.mlflow_uri=sqlite:///{db}"
    )
    _refused(result, out, str(db), "not a database")
    assert seconds < 30


def test_a_sqlite_store_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    uri = f"sqlite:///{blocker}/x.db"
    result, _, out = _run(tmp_path, "--track", "mlflow", "--set", f"tracking.mlflow_uri={uri}")
    _refused(result, out, uri, "is not a directory")


def test_a_tensorboard_dir_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    result, _, out = _run(
        tmp_path, "--track", "tensorboard", "--set", f"tracking.tensorboard_dir={blocker}/tb"
    )
    _refused(result, out, "tracking.tensorboard_dir", "is not a directory")


def test_a_tracker_failing_mid_run_warns_once_and_the_results_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """MLflow fails at round 2 (a server gone), TensorBoard's disk fills at the run's end:
    each warns once and is switched off; the run's files are complete."""
    from geofl.tracking.mlflow_export import MlflowExport
    from geofl.tracking.tensorboard_export import TensorboardExport

    calls = {"round": 0, "end": 0}
    real_round = MlflowExport.round

    def failing_round(self: MlflowExport, record: Any) -> None:
        calls["round"] += 1
        if record.round == 2:
            raise RuntimeError("API request failed: server went away")
        real_round(self, record)

    def full_disk(self: TensorboardExport, info: Any, final: Any) -> None:
        calls["end"] += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(MlflowExport, "round", failing_round)
    monkeypatch.setattr(TensorboardExport, "end", full_disk)
    with caplog.at_level(logging.WARNING, logger="geofl"):
        result, _, out = _run(tmp_path, "--track", "mlflow", "--track", "tensorboard")
    assert result.exit_code == 0, result.output
    sdir = out / "methods" / "fedavg" / "seed-3"
    final = json.loads((sdir / "final.json").read_text())
    assert final["rounds"] == 2 and final["final"]["test"]["accuracy"] >= 0
    assert len((sdir / "rounds.jsonl").read_text().splitlines()) == 2
    assert (out / "summary.json").is_file()
    warnings = [r.getMessage() for r in caplog.records if "tracking:" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert any("mlflow export failed" in w and "server went away" in w for w in warnings)
    assert any("tensorboard export failed" in w and "No space left" in w for w in warnings)
    assert calls == {"round": 2, "end": 1}  # off after its failure


def test_a_failing_report_export_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from geofl.tracking.mlflow_export import MlflowExport
    from geofl.tracking.subscriber import log_report

    (tmp_path / "report").mkdir()
    (tmp_path / "tracking.json").write_text(
        json.dumps({"mlflow": {"uri": "http://127.0.0.1:1", "parent": "abc"}})
    )

    def gone(self: MlflowExport, *args: Any, **kw: Any) -> None:
        raise RuntimeError("server went away")

    monkeypatch.setattr(MlflowExport, "finish", gone)
    with caplog.at_level(logging.WARNING, logger="geofl"):
        assert log_report(tmp_path) == []
    assert "report was not logged to mlflow" in caplog.text


def test_the_probe_helpers(tmp_path: Path) -> None:
    from geofl.tracking.probe import cause, check_sqlite, check_writable_dir, fast_http

    blocker = tmp_path / "f"
    blocker.write_text("x")
    assert check_writable_dir(tmp_path / "new" / "deeper") is None  # created on demand
    assert "is not a directory" in str(check_writable_dir(blocker / "sub"))
    assert check_sqlite(f"sqlite:///{tmp_path}/new.db") is None
    assert check_sqlite("sqlite:///:memory:") is None
    assert "is a directory" in str(check_sqlite(f"sqlite:///{tmp_path}"))
    assert cause(OSError("x (Caused by [Errno 111] Connection refused'))")) == (
        "[Errno 111] Connection refused"
    )
    assert cause(ValueError("first\nsecond")) == "first"
    before = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    with fast_http():
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES") == before


def test_the_probe_of_a_good_store_creates_the_parent_run_once(tmp_path: Path) -> None:
    from geofl.config.schema import TrackingConfig
    from geofl.tracking.mlflow_export import MlflowExport
    from geofl.tracking.state import read_state

    export = MlflowExport(TrackingConfig(mlflow=True), {"name": "t"}, tmp_path)
    export.check()
    parent = read_state(tmp_path)["mlflow"]["parent"]
    export.check()  # a resumed run: the same parent, found again
    assert read_state(tmp_path)["mlflow"]["parent"] == parent
    bad = MlflowExport(TrackingConfig(mlflow=True, mlflow_uri="foo://y"), {}, tmp_path)
    with pytest.raises(ConfigError, match="unknown scheme"):
        bad.check()
