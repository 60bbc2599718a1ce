"""Hostile input to the Python API (:mod:`geofl.api`): damaged run directories read back with
:meth:`RunResult.load`, and sources and callbacks of any type, fail in one line
(``RunDirError`` / ``ConfigError``), never with a traceback from deep inside."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geofl import api

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _final_like() -> st.SearchStrategy[Any]:
    """``final.json`` objects with each section replaced by anything."""
    return (
        st.fixed_dictionaries(
            {},
            optional={
                "final": JSON,
                "best_val": JSON,
                "rounds": JSON,
                "wall_s": JSON,
                "diverged": JSON,
            },
        )
        | JSON
    )


def _write_run(root: Path, info: Any, final: Any) -> None:
    """A run directory of one method and seed with the given run.json and final.json."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps(info))
    sdir = root / "methods" / "m" / "seed-1"
    sdir.mkdir(parents=True, exist_ok=True)
    (sdir / "final.json").write_text(json.dumps(final))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    info=st.fixed_dictionaries(
        {},
        optional={
            "name": JSON,
            "methods": JSON | st.just(["m"]),
            "seeds": JSON | st.just([1]),
            "task": JSON,
        },
    )
    | JSON,
    final=_final_like(),
)
def test_a_damaged_run_directory_reads_or_fails_in_one_line(
    tmp_path: Path, info: Any, final: Any
) -> None:
    _write_run(tmp_path / "run", info, final)
    try:
        result = api.RunResult.load(tmp_path / "run")
    except api.RunDirError as err:
        message = str(err)
    else:
        assert all(isinstance(r, api.SeedResult) for r in result.runs)
        return
    assert "\n" not in message


@pytest.mark.parametrize(
    "final",
    [
        {"final": [1]},
        {"best_val": "x"},
        {"final": {"test": {"accuracy": "high"}}},
        {"rounds": "two"},
    ],
)
def test_a_damaged_final_json_is_a_run_dir_error(tmp_path: Path, final: Any) -> None:
    _write_run(tmp_path, {"name": "x", "methods": ["m"], "seeds": [1]}, final)
    with pytest.raises(api.RunDirError, match=r"final\.json"):
        api.RunResult.load(tmp_path)


@given(source=st.integers() | st.floats() | st.binary() | st.lists(st.integers()) | st.none())
def test_a_source_of_another_type_is_a_config_error(source: Any) -> None:
    with pytest.raises(api.ConfigError, match=r"^source: "):
        api.load(source)
