"""What a resume must find as the run left it (issue 31 item 17): ``config.yaml`` and the
input files the config names hash as ``run.json`` recorded at the start; a deleted
``run.json`` or ``checkpoint.pt`` is refused in one line, never silently recreated or
rerun."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from tests.engine.hierarchy_helpers import agri_raw, config
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.experiment import run_experiment
from geofl.engine.records.header import check_out_dir, write_header
from geofl.engine.records.provenance import Provenance
from geofl.errors import RunDirError
from geofl.events import RunInfo
from geofl.records import RoundRecord, TaskInfo

SDIR = Path("methods") / "fedavg" / "seed-3"


class _StopAfter:
    """A kill after round ``after``'s durable write."""

    def __init__(self, after: int) -> None:
        self.after = after

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        if record.round == self.after:
            raise KeyboardInterrupt

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None: ...


def _cfg(tmp_path: Path) -> ExperimentConfig:
    method = {"name": "fedavg", "partition": {"name": "iid"}}
    raw = tiny_raw(methods=[method], federation={"num_clients": 2, "rounds": 3})
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def _killed(tmp_path: Path, after: int) -> tuple[ExperimentConfig, Path]:
    cfg, out = _cfg(tmp_path), tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, out, subscribers=[_StopAfter(after)])
    return cfg, out


def _resume_cli(out: Path) -> Any:
    args = ["run", str(out / "config.yaml"), "--out", str(out), "--resume"]
    return CliRunner().invoke(app, [*args, "--no-progress", "--no-report"])


def test_run_json_records_the_config_hash(tmp_path: Path) -> None:
    _, out = _killed(tmp_path, 1)
    inputs = json.loads((out / "run.json").read_text())["inputs"]
    assert len(inputs["config_sha256"]) == 64 and inputs["files"] == {}


def test_an_edited_config_yaml_is_refused_on_resume(tmp_path: Path) -> None:
    """Resuming from the run's own config.yaml compared the file with itself: an edit
    (here one more round) was accepted and continued the run under other settings."""
    _, out = _killed(tmp_path, 1)
    stored = out / "config.yaml"
    raw = yaml.safe_load(stored.read_text())
    raw["federation"]["rounds"] = 4
    stored.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = _resume_cli(out)
    assert result.exit_code == 2, result.output
    assert "config.yaml was edited after the run started" in result.output
    assert not (out / SDIR / "final.json").exists()


def test_a_reformatted_config_yaml_resumes(tmp_path: Path) -> None:
    _, out = _killed(tmp_path, 1)
    stored = out / "config.yaml"
    raw = yaml.safe_load(stored.read_text())
    stored.write_text(yaml.safe_dump(raw, sort_keys=True, indent=4) + "# same values\n")
    result = _resume_cli(out)
    assert result.exit_code == 0, result.output
    assert (out / SDIR / "final.json").is_file()


def test_a_deleted_run_json_is_refused_not_recreated(tmp_path: Path) -> None:
    cfg, out = _killed(tmp_path, 1)
    (out / "run.json").unlink()
    with pytest.raises(RunDirError, match=r"run\.json is missing, so the run cannot be resumed"):
        run_experiment(cfg, out, resume=True)
    assert not (out / "run.json").exists()


def test_a_deleted_checkpoint_is_refused_after_round_two(tmp_path: Path) -> None:
    """Rounds 1–2 logged and no checkpoint: it was deleted. Refused in one line before
    anything is written (the rerun from round 1 was silent)."""
    _, out = _killed(tmp_path, 2)
    (out / SDIR / "checkpoint.pt").unlink()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    result = _resume_cli(out)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "checkpoint.pt is missing but" in lines[0], result.output
    assert "holds 2 rounds" in lines[0] and "delete" in lines[0]
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # the evidence stays as it was


def test_no_checkpoint_after_round_one_reruns_the_seed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill between round 1's log line and its checkpoint: round 1 reruns, said so."""
    cfg, out = _killed(tmp_path, 1)
    (out / SDIR / "checkpoint.pt").unlink()
    with caplog.at_level(logging.WARNING, logger="geofl"):
        run_experiment(cfg, out, resume=True)
    assert "no checkpoint.pt after round 1" in caplog.text
    final = json.loads((out / SDIR / "final.json").read_text())
    fresh = run_experiment(cfg, tmp_path / "fresh")
    want = json.loads((fresh / SDIR / "final.json").read_text())
    assert final["final"] == want["final"]


def test_a_run_json_without_hashes_resumes_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Run directories written before the hashes were recorded still resume."""
    cfg, out = _killed(tmp_path, 1)
    info = json.loads((out / "run.json").read_text())
    del info["inputs"]
    (out / "run.json").write_text(json.dumps(info))
    with caplog.at_level(logging.WARNING, logger="geofl"):
        run_experiment(cfg, out, resume=True)
    assert "records no input hashes" in caplog.text
    assert "inputs" in json.loads((out / "run.json").read_text())  # recorded from now on


def _tle_text(prefix: str) -> str:
    """Two LEOs and the GEO as a 3-line TLE file, the satellites named ``prefix-i``."""
    from geofl.network.orbits import walker_constellation

    tles = walker_constellation(n_leo=2, planes=1, epoch=datetime(2026, 1, 1, tzinfo=UTC))
    return "".join(f"{prefix}-{i}\n{t.line1}\n{t.line2}\n" for i, t in enumerate(tles))


def test_a_swapped_tle_file_is_refused_on_resume(tmp_path: Path) -> None:
    """The header a hierarchy run writes at its start, then the TLE file swapped: the
    resume is refused before any data is built, naming the field and the file."""
    tle = tmp_path / "sats.tle"
    tle.write_text(_tle_text("SAT"))
    cfg = config(tmp_path, agri_raw({"leo": {"n": 2, "planes": 1, "tle_file": str(tle)}}))
    out = tmp_path / "run"
    out.mkdir()
    write_header(cfg, out, TaskInfo("binary", "accuracy", "max"), Provenance())
    files = json.loads((out / "run.json").read_text())["inputs"]["files"]
    assert files["methods.0.hierarchy.leo.tle_file"]["path"] == str(tle.resolve())
    check_out_dir(out, cfg, resume=True)  # unchanged: accepted
    tle.write_text(_tle_text("OTHER"))  # other satellites, same path
    with pytest.raises(RunDirError, match=r"methods\.0\.hierarchy\.leo\.tle_file: .*sats\.tle "):
        run_experiment(cfg, out, resume=True)
