"""Fuzzing what issue 31 found ``config validate`` let through: names that are paths,
duplicate YAML keys at any depth, and sizes that cannot fit in memory.

The contract: the config loads — then its name is one plain path component and its
estimated memory fits the limit — or a one-line :class:`~geofl.errors.ConfigError` is
raised. Any other exception is a crash. Derandomized, no dataset built, a few seconds.
"""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import tiny_raw

from geofl import plugins
from geofl.config.load import config_from_raw, load_raw
from geofl.config.memory import ENV_LIMIT, check_memory, estimate_memory
from geofl.errors import ConfigError

plugins.load_all()

FUZZ = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
LIMIT = 2**30  # 1 GiB, set through the environment


def _one_line(err: ConfigError) -> None:
    text = str(err)
    assert "\n" not in text and ": " in text, text


@FUZZ
@given(st.text(min_size=1, max_size=40))
def test_a_name_loads_only_as_one_plain_component(name: str) -> None:
    raw = tiny_raw(name=name)
    try:
        cfg = config_from_raw(raw)
    except ConfigError as err:
        _one_line(err)
        return
    parts = PurePosixPath(cfg.name).parts
    assert parts == (cfg.name,) and cfg.name not in (".", "..") and "\\" not in cfg.name
    out = Path("runs") / f"{cfg.name}-20260101-000000"
    assert out.parent == Path("runs")


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every mapping in ``node``."""
    out = [path] if isinstance(node, dict) else []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else []
    )
    for k, v in items:
        out += _paths(v, (*path, k))
    return out


@FUZZ
@given(st.data())
def test_a_duplicated_key_anywhere_is_refused_naming_it(
    tmp_path: Path, data: st.DataObject
) -> None:
    raw = tiny_raw()
    where = data.draw(st.sampled_from(_paths(raw)))
    node: Any = raw
    for k in where:
        node = node[k]
    key = data.draw(st.sampled_from(sorted(node)))
    dup = _duplicate(raw, where, key)
    path = tmp_path / "dup.yaml"
    path.write_text("\n".join(dup) + "\n")
    with pytest.raises(ConfigError) as err:
        load_raw(path)
    _one_line(err.value)
    assert f"duplicate key {key!r}" in str(err.value)


def _duplicate(raw: dict[str, Any], where: tuple[Any, ...], key: str) -> list[str]:
    """Block-YAML lines of ``raw`` with ``key`` written a second time, last in the mapping
    at ``where`` (a placeholder key dumped there, then renamed)."""
    doc = copy.deepcopy(raw)
    node: Any = doc
    for k in where:
        node = node[k]
    marker = "zz_duplicate_marker"
    node[marker] = node[key]
    text = yaml.safe_dump(doc, default_flow_style=False, sort_keys=False)
    return text.replace(f"{marker}:", f"{key}:").splitlines()


@FUZZ
@given(
    num_samples=st.one_of(st.integers(1, 10**12), st.floats(1.0, 1e12).map(float)),
    size=st.integers(16, 200_000),
    width=st.integers(4, 200_000),
)
def test_a_size_loads_only_if_its_estimate_fits(
    monkeypatch: pytest.MonkeyPatch, num_samples: float, size: int, width: int
) -> None:
    monkeypatch.setenv(ENV_LIMIT, str(LIMIT))
    raw = copy.deepcopy(tiny_raw())
    raw["data"]["params"].update(num_samples=num_samples, size=size)
    raw["model"]["params"]["width"] = width
    try:
        cfg = config_from_raw(raw)
        check_memory(cfg)
    except ConfigError as err:
        _one_line(err)
        return
    assert estimate_memory(cfg).total <= LIMIT
