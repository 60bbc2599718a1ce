"""Test tiers (issue 34): plain ``pytest`` is the fast tier, markers select the rest, and
Hypothesis example counts come from a profile (``dev`` locally, ``ci`` in CI)."""

from __future__ import annotations

import os
import shlex
import tomllib
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
PYTEST = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
TIERS = ("slow", "deploy", "ganache")


def test_plain_pytest_deselects_every_slow_tier() -> None:
    args = shlex.split(PYTEST["addopts"])
    expression = args[args.index("-m") + 1]
    assert expression == " and ".join(f"not {m}" for m in TIERS)
    registered = {m.split(":")[0] for m in PYTEST["markers"]}
    assert set(TIERS) <= registered


def test_hypothesis_profiles_govern_example_counts() -> None:
    dev, ci = settings.get_profile("dev"), settings.get_profile("ci")
    assert dev.max_examples < ci.max_examples
    expected = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
    assert settings.default.max_examples == expected.max_examples


def test_ci_runs_every_tier_with_the_ci_profile() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert 'HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"' in script
    assert '*"pytest -m \\"\\""*' in script
