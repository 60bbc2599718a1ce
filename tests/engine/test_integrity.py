"""Run integrity: one run per directory (lock), clean stops on SIGINT/SIGTERM, no resume
of nothing, warnings for degenerate data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.engine.experiment import run_experiment
from geofl.errors import RunDirLockedError
from geofl.rundir import LOCK_FILE, lock_run_dir


def _cfg_file(tmp_path: Path, **over: object) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(**over)))
    return path


def test_a_second_process_on_a_locked_run_dir_is_refused(tmp_path: Path) -> None:
    cfg = load_config(_cfg_file(tmp_path))
    out = tmp_path / "run"
    # another open file description conflicts like another process would
    locked = pytest.raises(RunDirLockedError, match=rf"in use by process {os.getpid()}")
    with lock_run_dir(out), locked:
        run_experiment(cfg, out)
    assert [p.name for p in out.iterdir()] == [LOCK_FILE]  # nothing half-written


def test_a_stale_lock_file_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text("999999\n")  # no process holds an flock on it
    with lock_run_dir(out) as path:
        assert path.read_text() == f"{os.getpid()}\n"


def test_resume_of_a_directory_without_a_run_is_refused(tmp_path: Path) -> None:
    src = _cfg_file(tmp_path)
    result = CliRunner().invoke(
        app, ["run", str(src), "--out", str(tmp_path / "typo"), "--resume", "--no-progress"]
    )
    assert result.exit_code == 2
    assert "holds no run to resume" in result.output
    assert not (tmp_path / "typo").exists()


def test_single_class_training_data_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import numpy as np

    from geofl.engine.experiment import _warn_degenerate

    with caplog.at_level("WARNING", logger="geofl"):
        _warn_degenerate(np.zeros(10, dtype=np.int64), ["a", "b"])
        _warn_degenerate(np.array([0, 1, 1]), ["a", "b", "c"])
    assert "single class (a)" in caplog.text
    assert "classes ['c'] have no training samples" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_after_a_durable_round_and_resume_finishes_identically(
    tmp_path: Path, sig: signal.Signals
) -> None:
    src = _cfg_file(tmp_path, federation={"num_clients": 4, "rounds": 6})
    out = tmp_path / "run"
    # one torch thread, as this process runs (tests/conftest.py): same reduction order
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "geofl.cli", "run", str(src), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--no-progress", "--no-report"], env=env, stderr=subprocess.PIPE, text=True
    )
    rounds = out / "methods" / "central" / "seed-3" / "rounds.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        rounds.exists() and rounds.read_text().count("\n") >= 1
    ):
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "stopped after round" in err and "--resume" in err
    done = json.loads(rounds.read_text().splitlines()[-1])["round"]
    assert 1 <= done < 6
    again = subprocess.run(
        [*cmd, "--resume", "--no-progress", "--no-report"], env=env, capture_output=True
    )
    assert again.returncode == 0, again.stderr
    fresh = tmp_path / "fresh"
    cfg = load_config(src)
    run_experiment(cfg, fresh)
    for method in ("central", "fedavg"):
        a = json.loads((out / "methods" / method / "seed-3" / "final.json").read_text())
        b = json.loads((fresh / "methods" / method / "seed-3" / "final.json").read_text())
        assert a["final"] == b["final"], method
