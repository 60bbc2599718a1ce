"""Issue 31 item 17: a non-UTF-8 byte in rounds.jsonl is one ``error:`` line naming the
file and line (exit 2), not a UnicodeDecodeError traceback from ``geofl report``."""

from __future__ import annotations

from pathlib import Path

from tests.report.conftest import METHODS, MakeRunDir
from typer.testing import CliRunner

from geofl.cli import app


def _damage(run_dir: Path, line: int, byte: bytes) -> Path:
    path = run_dir / "methods/fedavg/seed-0/rounds.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1][:20] + byte + lines[line - 1][20:]
    path.write_bytes(b"".join(lines))
    return path


def test_report_names_the_line_with_a_non_utf8_byte(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(methods={"fedavg": METHODS["fedavg"]}, seeds=(0,), rounds=3)
    path = _damage(run_dir, 2, b"\xff")
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert f"{path}:2:" in " ".join(result.output.split()), result.output


def test_a_torn_multibyte_last_line_is_skipped_like_a_torn_json_line(
    make_run_dir: MakeRunDir,
) -> None:
    from geofl.report.run_data import load_run

    run_dir = make_run_dir(methods={"fedavg": METHODS["fedavg"]}, seeds=(0,), rounds=3)
    path = run_dir / "methods/fedavg/seed-0/rounds.jsonl"
    path.write_bytes(path.read_bytes() + b'{"round": 4, "note": "\xc3')  # cut inside "é"
    assert len(load_run(run_dir).methods["fedavg"][0].rounds) == 3
