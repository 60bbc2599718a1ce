"""Strict config values: no inf/NaN, no bool/str coercion into numbers, YAML 1.2 floats,
and method names with dots addressable in ``--set`` (issue: run integrity, items 6 and 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from geofl.config.load import apply_override, load_config, load_raw
from geofl.errors import ConfigError


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("train.lr=.inf", "train.lr"),
        ("train.weight_decay=.nan", "train.weight_decay"),
        ("federation.server_lr=.inf", "federation.server_lr"),
        ("methods.fedavg-dir0.1.partition.alpha=.inf", "methods.2.partition.alpha"),
        ("data.params.haze=.inf", "data.params.haze"),
        ("methods.1.release=[{name: gaussian, sigma: .inf}]", "methods.1.release.0.sigma"),
        ("methods.1.release=[{name: gaussian, clip: -.inf}]", "methods.1.release.0.clip"),
    ],
)
def test_non_finite_values_are_refused_naming_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}: .*not a finite number"):
        load_config("demo", [override])


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("train.batch_size=true", "train.batch_size"),
        ("federation.rounds='3'", "federation.rounds"),
        ("methods.1.aggregator={name: krum, num_byzantine: '1'}", "methods.1.aggregator"),
    ],
)
def test_bools_and_strings_are_not_coerced_into_numbers(override: str, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}.*expected a number"):
        load_config("demo", [override])


def test_yaml_1_2_floats_are_numbers(tmp_path: Path) -> None:
    raw = load_raw("demo")
    assert isinstance(raw["train"]["weight_decay"], float)
    text = tmp_path / "c.yaml"
    text.write_text("name: x\ntrain: {lr: 1.0e-2, weight_decay: 1e-4}\nseeds: [1]\n")
    got = load_raw(text)
    assert got["train"] == {"lr": 0.01, "weight_decay": 0.0001}
    assert got["seeds"] == [1]  # integers stay integers
    cfg: dict[str, object] = {}
    apply_override(cfg, "x=1.0e6")
    assert cfg["x"] == 1e6 and isinstance(cfg["x"], float)


def test_readme_set_example_with_a_dotted_method_name_works_verbatim() -> None:
    # README: geofl run demo --seeds 1,42 --set federation.rounds=30
    #         --set methods.fedavg-dir0.1.partition.alpha=0.3
    cfg = load_config(
        "demo",
        ["federation.rounds=30", "methods.fedavg-dir0.1.partition.alpha=0.3"],
        seeds=[1, 42],
    )
    method = next(m for m in cfg.methods if m.name == "fedavg-dir0.1")
    assert method.partition.params["alpha"] == 0.3 and cfg.federation.rounds == 30
    explicit = load_config("demo", ["methods[fedavg-dir0.1].partition.alpha=0.4"])
    assert explicit.methods[2].partition.params["alpha"] == 0.4


def test_unknown_method_name_lists_the_items() -> None:
    with pytest.raises(ConfigError, match=r"no list item named 'fedavg-dir0'.*fedavg-dir0\.1"):
        load_config("demo", ["methods.fedavg-dir0.2.partition.alpha=0.3"])
    with pytest.raises(ConfigError, match=r"unbalanced"):
        load_config("demo", ["methods[fedavg.partition.alpha=0.3"])
