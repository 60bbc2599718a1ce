"""The shipped contract artifact is what the pinned vyper makes of the shipped source."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from geofl.errors import LedgerError
from geofl.governance.ledger import artifact
from geofl.governance.ledger.artifact import ARTIFACT_PATH, SOURCE_PATH, compile_artifact


@pytest.mark.skipif(
    importlib.util.find_spec("vyper") is None,
    reason="vyper is not installed, so Governance.vy cannot be recompiled",
)
def test_the_shipped_artifact_matches_a_fresh_compile():
    shipped = json.loads(ARTIFACT_PATH.read_text(encoding="utf-8"))
    fresh = compile_artifact(SOURCE_PATH)
    regenerate = "stale Governance.json: call geofl.governance.ledger.artifact.write_artifact()"
    assert fresh["compiler"] == shipped["compiler"], regenerate
    assert fresh["source_sha256"] == shipped["source_sha256"], regenerate
    assert fresh["abi"] == shipped["abi"], regenerate
    assert fresh["bytecode"] == shipped["bytecode"], regenerate


def test_the_artifact_is_package_data_and_loads():
    loaded = artifact.load_artifact()
    names = {e.get("name") for e in loaded.abi}
    assert {"grantRole", "commitRule", "approve", "PermissionChanged"} <= names
    assert loaded.bytecode and loaded.compiler.startswith("vyper ")


def test_an_edited_source_without_a_recompile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    source = tmp_path / "Governance.vy"
    shutil.copy(SOURCE_PATH, source)
    source.write_text(source.read_text() + "\n# edited\n")
    monkeypatch.setattr(artifact, "SOURCE_PATH", source)
    artifact.load_artifact.cache_clear()
    try:
        with pytest.raises(LedgerError, match="was not compiled from the shipped"):
            artifact.load_artifact()
    finally:
        artifact.load_artifact.cache_clear()
