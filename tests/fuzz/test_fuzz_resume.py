"""Hostile run directories and tracker targets (issue 31 items 16–17): whatever ``run.json``
or ``config.yaml`` holds, a resume check ends in one :class:`RunDirError` line or lets the
resume go on — never another exception; the tracker probe's helpers never raise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import tiny_raw

from geofl.config.load import load_config
from geofl.config.schema import ExperimentConfig
from geofl.engine.records.header import check_out_dir, write_header
from geofl.engine.records.provenance import Provenance
from geofl.errors import RunDirError
from geofl.records import TaskInfo
from geofl.tracking.probe import cause, check_sqlite, check_writable_dir

FUZZ = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _header(tmp_path: Path) -> tuple[ExperimentConfig, Path]:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_raw()))
    cfg, out = load_config(path), tmp_path / "run"
    shutil.rmtree(out, ignore_errors=True)  # a fresh header per example
    out.mkdir()
    write_header(cfg, out, TaskInfo("classification", "accuracy", "max"), Provenance())
    return cfg, out


def _check(out: Path, cfg: ExperimentConfig) -> None:
    """One resume check: a RunDirError with a one-line message, or nothing."""
    message = ""
    try:
        check_out_dir(out, cfg, resume=True)
    except RunDirError as err:
        message = str(err)
    assert "\n" not in message and (not message or str(out) in message)


@FUZZ
@given(inputs=json_values)
def test_any_inputs_record_is_refused_in_one_line_or_accepted(
    tmp_path: Path, inputs: object
) -> None:
    cfg, out = _header(tmp_path)
    info = json.loads((out / "run.json").read_text())
    info["inputs"] = inputs
    (out / "run.json").write_text(json.dumps(info))
    _check(out, cfg)


@FUZZ
@given(blob=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_any_run_json_bytes_are_refused_in_one_line_or_accepted(
    tmp_path: Path, blob: bytes
) -> None:
    cfg, out = _header(tmp_path)
    (out / "run.json").write_bytes(blob)
    _check(out, cfg)


CONFIGS = [
    b"",
    b"~\n",
    b"- a\n- b\n",
    b"name: [unclosed\n",
    b"\xff\xfe\x00",
    b"when: 2026-01-01 00:00:00\n",  # a YAML timestamp JSON has no form for
    b"{1: a, b: c}\n",  # keys JSON cannot sort
    b"x: !!binary aGVsbG8=\n",
    b"x: .nan\n",
]


@pytest.mark.parametrize("blob", CONFIGS)
def test_a_hostile_config_yaml_is_refused_in_one_line(tmp_path: Path, blob: bytes) -> None:
    cfg, out = _header(tmp_path)
    (out / "config.yaml").write_bytes(blob)
    with pytest.raises(RunDirError) as err:
        check_out_dir(out, cfg, resume=True)
    assert "\n" not in str(err.value) and "config.yaml" in str(err.value)


@FUZZ
@given(name=st.text(min_size=1, max_size=20))
def test_the_probe_helpers_never_raise(tmp_path: Path, name: str) -> None:
    safe = name.replace("\x00", "_")
    text = cause(Exception(name))
    assert "\n" not in text and len(text) <= 200
    assert check_writable_dir(tmp_path / "base" / safe) is None
    problem = check_sqlite(f"sqlite:///{tmp_path}/{safe}.db")
    assert problem is None or isinstance(problem, str)
