"""The 004 threat model in the config: bad input is one line naming the field, exit 2,
nothing written; the backdoor preset validates and is resolved as stated."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.errors import ConfigError

runner = CliRunner()

BACKDOOR = "methods.1.attack={name: backdoor, fraction: 0.25}"


def _write(tmp_path: Path, raw: dict[str, object]) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("methods.1.attack.fraction=0.5", r"^methods.1.attack.fraction: Byzantine fraction 0.5 "),
        ("methods.1.attack.fraction=0.7", r"^methods.1.attack.fraction: Byzantine fraction 0.7 "),
        ("methods.1.attack.fraction=-0.1", r"^methods.1.attack.fraction: Byzantine fraction -0.1"),
        ("methods.1.attack.fraction=1.0", r"^methods.1.attack.fraction: .*\[0, 0.5\)"),
        ("methods.1.attack.fraction=0.1", r"^methods.1.attack.fraction: 0.1 of 4 clients is no "),
        ("methods.1.attack.poison_ratio=0", r"^methods.1.attack.poison_ratio: Input should be gre"),
        (
            "methods.1.attack.poison_ratio=1.5",
            r"^methods.1.attack.poison_ratio: Input should be les",
        ),
        (
            "methods.1.attack.schedule.period=0",
            r"^methods.1.attack.schedule.period: Input should be",
        ),
        ("methods.1.attack.schedule.start=0", r"^methods.1.attack.schedule.start: Input should be"),
        ("methods.1.attack.boost=0", r"^methods.1.attack.boost: Input should be greater than 0"),
        ("methods.1.attack.trigger.size=0", r"^methods.1.attack.trigger.size: Input should be"),
        ("methods.1.attack.trigger.opacity=2", r"^methods.1.attack.trigger.opacity: Input should"),
        ("methods.1.attack.colluders=2", r"^methods.1.attack.colluders: unknown field"),
        ("compare_to=ghost", r"^compare_to: no method is named 'ghost'; use one of: central, fed"),
    ],
)
def test_bad_threat_values_name_the_field(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, tiny_raw()), [BACKDOOR, override])


def test_edge_case_source_must_not_be_the_target(tmp_path: Path) -> None:
    bad = "methods.1.attack={name: edge_case, fraction: 0.25, source: 2, target: 2}"
    with pytest.raises(ConfigError, match=r"^methods.1.attack.source: source class 2 is the tar"):
        load_config(_write(tmp_path, tiny_raw()), [bad])


def test_backdoors_need_classification(tmp_path: Path) -> None:
    raw = tiny_raw(task={"name": "regression"})
    with pytest.raises(ConfigError, match=r"^methods.1.attack.name: backdoor attacks need"):
        load_config(_write(tmp_path, raw), [BACKDOOR])


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("methods.1.attack.fraction=0.5", "methods.1.attack.fraction"),
        ("methods.1.attack.poison_ratio=0", "methods.1.attack.poison_ratio"),
        ("methods.1.attack.schedule.period=0", "methods.1.attack.schedule.period"),
        # checked against the data before anything is written
        ("methods.1.attack.target=10", "methods.1.attack.target: class 10 does not exist"),
        ("methods.1.attack.trigger.size=17", "methods.1.attack.trigger.position: a 17×17"),
        ("methods.1.attack.trigger.values=[1, 2]", "methods.1.attack.trigger.values: 2 values"),
    ],
)
def test_cli_exits_2_with_one_line_and_writes_nothing(
    tiny_config_file: Path, tmp_path: Path, override: str, needle: str
) -> None:
    out = tmp_path / "run"
    args = ["run", str(tiny_config_file), "--out", str(out), "--set", BACKDOOR]
    result = runner.invoke(app, [*args, "--set", override, "--no-progress"])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output
    assert not out.exists()


def test_backdoor_preset_validates_as_documented() -> None:
    cfg = load_config("backdoor-example")
    assert cfg.seeds == [2024, 2025, 2026] and cfg.compare_to == "fedavg"
    assert [m.aggregator.name for m in cfg.methods] == ["mean", "median", "krum"]
    for m in cfg.methods:
        assert m.attack is not None and m.attack.name == "backdoor"
        p = m.attack.params
        assert (p["fraction"], p["poison_ratio"], p["boost"]) == (0.3, 0.2, 8.0)


def test_configs_without_compare_to_dump_as_before(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, tiny_raw()))
    assert "compare_to" not in cfg.model_dump(mode="json")
    with_it = load_config(_write(tmp_path, tiny_raw(compare_to="central")))
    assert with_it.model_dump(mode="json")["compare_to"] == "central"
