"""Shared fixtures: an isolated dataset cache and a tiny, fast experiment config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test uses a session-wide temporary dataset cache, never ~/.cache."""
    monkeypatch.setenv("GEOFL_CACHE", str(tmp_path_factory.getbasetemp() / "geofl-cache"))


def tiny_raw(**over: Any) -> dict[str, Any]:
    """A two-method experiment that runs in a few seconds (16×16 synthetic patches)."""
    raw: dict[str, Any] = {
        "name": "tiny",
        "seeds": [3],
        "data": {"dataset": "synthetic", "params": {"num_samples": 400, "size": 16, "seed": 0}},
        "model": {"name": "small_cnn", "params": {"width": 8, "blocks": 2}},
        "train": {"batch_size": 32, "local_epochs": 1},
        "federation": {"num_clients": 4, "rounds": 3},
        "methods": [
            {"name": "central", "partition": {"name": "pooled"}},
            {"name": "fedavg", "partition": {"name": "dirichlet", "alpha": 0.5, "min_samples": 5}},
        ],
    }
    raw.update(over)
    return raw


@pytest.fixture
def tiny_config_file(tmp_path: Path) -> Path:
    """``tiny_raw()`` written as YAML."""
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_raw()))
    return path
