"""Run integrity: one run per directory (lock), clean stops on SIGINT/SIGTERM, no resume
of nothing, warnings for degenerate data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.experiment import run_experiment
from geofl.errors import RunDirError, RunDirLockedError
from geofl.events import RunInfo
from geofl.records import RoundRecord
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


class _StopAfter:
    """Interrupts the fedavg run after round ``after`` (a kill after a durable round)."""

    def __init__(self, after: int) -> None:
        self.after = after

    def on_run_start(self, info: object) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if info.method == "fedavg" and record.round == self.after:
            raise KeyboardInterrupt

    def on_run_end(self, info: object, final: object) -> None: ...


def _private_cfg(tmp_path: Path) -> ExperimentConfig:
    raw = tiny_raw(federation={"num_clients": 4, "rounds": 4})
    raw["methods"][1]["release"] = [{"name": "gaussian", "clip": 10.0, "sigma": 0.01}]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.fixture(scope="module")
def whole_private(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("whole")
    return run_experiment(_private_cfg(tmp), tmp / "run")


@pytest.mark.parametrize("damage", ["delete", "garble", "edit"])
def test_a_damaged_round_log_blocks_resume_unless_rebuilt_from_the_checkpoint(
    tmp_path: Path, whole_private: Path, damage: str
) -> None:
    cfg, out = _private_cfg(tmp_path), tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, out, subscribers=[_StopAfter(3)])
    rounds = out / "methods" / "fedavg" / "seed-3" / "rounds.jsonl"
    lines = rounds.read_text().splitlines()
    assert len(lines) == 3
    if damage == "delete":
        del lines[1]
    elif damage == "garble":
        lines[1] = lines[1][:40] + "\x00garbage"
    else:
        lines[1] = lines[1].replace('"round": 2', '"round": 7')
    rounds.write_text("".join(f"{line}\n" for line in lines))
    before = rounds.read_text()
    with pytest.raises(RunDirError, match=r"rounds\.jsonl:2: round 2's record"):
        run_experiment(cfg, out, resume=True)
    assert rounds.read_text() == before  # refusing leaves the evidence as it was
    run_experiment(cfg, out, resume=True, rebuild_log=True)
    got = json.loads((out / "methods/fedavg/seed-3/final.json").read_text())
    want = json.loads((whole_private / "methods/fedavg/seed-3/final.json").read_text())
    assert got["final"] == want["final"]
    assert got["privacy"]["epsilon_per_client"] == want["privacy"]["epsilon_per_client"]
    assert _untimed(rounds) == _untimed(whole_private / "methods/fedavg/seed-3/rounds.jsonl")


def _untimed(path: Path) -> list[dict[str, object]]:
    """The records of a round log without their wall-clock timings."""
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time_s"} for r in recs]


def test_a_garbled_first_line_of_a_finished_seed_is_named_and_not_erased(
    tmp_path: Path, whole_private: Path
) -> None:
    out = tmp_path / "run"
    shutil.copytree(whole_private, out)
    (out / LOCK_FILE).unlink(missing_ok=True)
    rounds = out / "methods/fedavg/seed-3/rounds.jsonl"
    text = rounds.read_text()
    rounds.write_text("{garbled\n" + text.split("\n", 1)[1])
    damaged = rounds.read_text()
    result = CliRunner().invoke(
        app, ["run", str(out / "config.yaml"), "--out", str(out), "--resume", "--no-progress"]
    )
    assert result.exit_code == 2, result.output
    assert "rounds.jsonl:1" in result.output
    assert rounds.read_text() == damaged


def test_a_damaged_checkpoint_is_one_line(tmp_path: Path) -> None:
    cfg, out = _private_cfg(tmp_path), tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, out, subscribers=[_StopAfter(2)])
    ckpt = out / "methods/fedavg/seed-3/checkpoint.pt"
    for content in (b"", ckpt.read_bytes()[:100]):
        ckpt.write_bytes(content)
        with pytest.raises(RunDirError, match=r"checkpoint\.pt is damaged"):
            run_experiment(cfg, out, resume=True)


def _geofl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "geofl.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


@pytest.mark.slow  # ~13 s CPU: many CLI runs on bad sources
def test_bad_sources_and_outputs_end_in_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in _one_error_line(_geofl("run", str(binary)))
    assert "is a directory" in _one_error_line(_geofl("run", str(tmp_path)))
    src = _cfg_file(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    line = _one_error_line(_geofl("run", str(src), "--out", str(blocker), "--no-progress"))
    assert "is a file" in line
    line = _one_error_line(
        _geofl("run", str(src), "--out", str(tmp_path / "o"), env={"GEOFL_CACHE": str(blocker)})
    )
    assert "cache directory" in line and not (tmp_path / "o").exists()


def test_a_truncated_cache_file_is_named_with_a_fix(tmp_path: Path) -> None:
    import numpy as np

    from geofl.data.storage.cache import cached_arrays
    from geofl.errors import DataError

    cached_arrays(tmp_path, "k", lambda: {"a": np.arange(1000)})
    path = tmp_path / "k.npz"
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(DataError, match=r"k\.npz is damaged .*delete it"):
        cached_arrays(tmp_path, "k", lambda: {"a": np.arange(3)})


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import geofl.engine.checkpoint as checkpoint

    real = checkpoint.torch.save
    calls = {"n": 0}

    def save(obj: object, fh: Any) -> None:
        calls["n"] += isinstance(obj, dict) and "format" in obj  # checkpoints only
        if calls["n"] == 2:  # the second checkpoint: half written, then the disk is full
            fh.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real(obj, fh)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    src, out = _cfg_file(tmp_path), tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(src), "--out", str(out), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.output and "--resume" in result.output
    assert not list(out.rglob("*.tmp"))
    monkeypatch.setattr(checkpoint.torch, "save", real)
    again = CliRunner().invoke(
        app, ["run", str(src), "--out", str(out), "--resume", "--no-progress", "--no-report"]
    )
    assert again.exit_code == 0, again.output
