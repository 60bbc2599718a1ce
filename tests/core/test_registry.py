"""Registries refuse duplicates and validate parameters with field paths."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from geofl.errors import ConfigError, RegistryError
from geofl.registry import Registry


class _P(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(1.0, gt=0)


def _registry() -> Registry[float]:
    reg: Registry[float] = Registry("widget")

    @reg.register("w", params=_P)
    def make(p: _P) -> float:
        """Make a widget."""
        return p.alpha * 2

    return reg


def test_build_validates_and_calls() -> None:
    assert _registry().build("w", {"alpha": 3}) == 6.0


def test_duplicate_key_is_refused() -> None:
    reg = _registry()
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("w")(lambda p: 0.0)


def test_unknown_key_lists_choices() -> None:
    with pytest.raises(ConfigError, match=r"methods.0.x: unknown widget 'v'; choose one of: w"):
        _registry().entry("v", path="methods.0.x")


def test_bad_params_name_the_field() -> None:
    reg = _registry()
    with pytest.raises(ConfigError, match=r"^m.alpha: Input should be greater than 0"):
        reg.validate("w", {"alpha": 0}, path="m")
    with pytest.raises(ConfigError, match=r"^m.beta: unknown field"):
        reg.validate("w", {"beta": 1}, path="m")
