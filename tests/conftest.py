"""Shared fixtures (an isolated dataset cache, a tiny fast experiment config), the test tiers'
markers and the Hypothesis profiles.

Tiers: ``pytest`` runs the fast tier (pyproject's ``addopts`` deselect the markers below);
``pytest -m ""`` runs everything, as the README's test command and CI do. Hypothesis profiles:
``HYPOTHESIS_PROFILE=dev`` (the default: few examples, for a quick local loop) or ``ci``
(``.ci/run``: more examples); a test fixes its own count only where each example is costly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings

torch.set_num_threads(1)

settings.register_profile("dev", max_examples=20, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


#: Tiers in the order they run: the longest tests first (see below).
_LONG_FIRST = ("deploy", "ganache", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need a ganache node (the ``ganache_url`` fixture, or the ``rpc``
    backend of the ``make_ledger`` fixture, which requests it at run time) ``ganache``; then
    move the long tiers to the front, in a stable order.

    xdist's ``worksteal`` hands each worker a contiguous share of this order and lets an idle
    worker steal from the tail of another's queue. Long tests first make one worker start the
    minute-long deployments (one at a time: each runs several processes) while the other
    runs the short tests, which both then share at the end, so the workers finish together
    instead of one waiting out a deployment test that came last.
    """
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        names = getattr(item, "fixturenames", ())
        if "ganache_url" in names or params.get("make_ledger") == "rpc":
            item.add_marker(pytest.mark.ganache)

    def tier(item: pytest.Item) -> int:
        marks = {m.name for m in item.iter_markers()}
        return next((i for i, name in enumerate(_LONG_FIRST) if name in marks), len(_LONG_FIRST))

    items.sort(key=tier)


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
