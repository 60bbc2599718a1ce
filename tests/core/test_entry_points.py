"""Plug-ins from other packages arrive through the ``geofl.plugins`` entry-point group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from geofl import plugins


def _fake_distribution(root: Path, module: str, body: str) -> None:
    """An installed-looking distribution on ``root`` whose entry point names ``module``."""
    (root / f"{module}.py").write_text(body)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[geofl.plugins]\nfake = {module}\n")


def test_entry_point_plugins_register_and_broken_ones_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    body = (
        "from geofl.plugins import WEIGHTINGS\n"
        "from geofl.server.weighting import uniform_weights\n"
        "if 'test_entry_point_weighting' not in WEIGHTINGS:\n"
        "    WEIGHTINGS.register('test_entry_point_weighting')(lambda _: uniform_weights)\n"
    )
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    _fake_distribution(good, "geofl_fake_plugin_ok", body)
    _fake_distribution(bad, "geofl_fake_plugin_broken", "raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(good))
    monkeypatch.syspath_prepend(str(bad))
    monkeypatch.setattr(plugins, "_loaded", False)
    with caplog.at_level("WARNING", logger="geofl"):
        plugins.load_all()
    assert "test_entry_point_weighting" in plugins.WEIGHTINGS
    assert "boom" in caplog.text
    for name in ("geofl_fake_plugin_ok", "geofl_fake_plugin_broken"):
        sys.modules.pop(name, None)
