"""``geofl run`` on malformed config files: exit code 2, one ``error:`` line, no run directory.

A light fuzz of the CLI's front door (the config fuzzing in ``test_fuzz_config.py`` covers
the schema): empty and binary files, wrong encodings, YAML that is not a mapping, broken
YAML, a directory or a missing file as SOURCE.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from geofl.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _fresh_recursion_limit() -> Iterator[None]:
    """The interpreter's default limit, as in a fresh ``geofl`` process when it reads the
    config (importing the governance plug-in later raises it to 100 000, and other tests in
    this session may have done so already)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(before)


FILES: list[object] = [
    pytest.param(b"", id="empty"),
    pytest.param(b"   \n\n\t\n", id="whitespace"),
    pytest.param(b"---\n...\n", id="empty-document"),
    pytest.param(b"~\n", id="null"),
    pytest.param(b"- name: x\n- methods: []\n", id="list-at-top"),
    pytest.param(b"42\n", id="number-at-top"),
    pytest.param(b"just a string\n", id="string-at-top"),
    pytest.param(b"name: x\x00y\nmethods: [{name: m}]\n", id="nul-byte"),
    pytest.param(b"name: x\n\tmethods: []\n", id="tab-indent"),
    pytest.param(b"name: [unclosed\n", id="unclosed-flow"),
    pytest.param(b"name: x\nmethods: [{name: m}]\n---\nname: y\n", id="two-documents"),
    pytest.param(b"name: *undefined\n", id="undefined-alias"),
    pytest.param(b"!!python/object/apply:os.system ['true']\n", id="python-tag"),
    pytest.param(b"name: x\nmethods: []\n", id="no-methods"),
    pytest.param(b"name: x\nmethods: [{name: m}]\nbogus: 1\n", id="unknown-key"),
    pytest.param(bytes(range(1, 32)) * 4, id="control-characters"),
    pytest.param(b"[" * 3000 + b"]" * 3000, id="deep-nesting"),
    pytest.param(bytes(range(256)) * 3, id="binary-garbage"),
    pytest.param(b"name: caf\xe9\nmethods: [{name: m}]\n", id="latin-1"),
    pytest.param("name: x\n".encode("utf-16"), id="utf-16"),
]


def _assert_refused(result: Result, out: Path) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert not out.exists()


@pytest.mark.parametrize("content", FILES)
def test_malformed_file_exits_2_with_one_error_line(tmp_path: Path, content: bytes) -> None:
    source = tmp_path / "bad.yaml"
    source.write_bytes(content)
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(source), "--out", str(out), "--no-progress"])
    _assert_refused(result, out)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("missing.yaml", id="missing-file"),
        pytest.param("dem0", id="misspelt-preset"),
        pytest.param("", id="empty-argument"),
        pytest.param("a-directory", id="directory"),
    ],
)
def test_bad_source_exits_2_with_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-directory").mkdir()
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", source, "--out", str(out), "--no-progress"])
    _assert_refused(result, out)
    assert sorted(os.listdir(tmp_path)) == ["a-directory"]  # nothing else written
