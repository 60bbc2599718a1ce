"""Load-time checks that tie an algorithm or sampler to the rest of the config: one line,
naming the field at fault, before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.config.load import load_config
from geofl.errors import ConfigError


def _load(tmp_path: Path, method: dict[str, Any] | None = None, **over: Any) -> Any:
    raw = tiny_raw()
    if method is not None:
        raw["methods"][1].update(method)  # methods.1 is the federated one
    for key, value in over.items():
        raw[key].update(value)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


def _fails(tmp_path: Path, prefix: str, needle: str, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, **kwargs)
    line = str(err.value)
    assert line.startswith(prefix + ": "), line
    assert needle in line, line
    assert "\n" not in line
    return line


@pytest.mark.parametrize("algorithm", ["scaffold", "feddyn", "fednova"])
@pytest.mark.parametrize(
    "aggregator", [{"name": "krum"}, {"name": "median"}, {"name": "trimmed_mean"}]
)
def test_linear_algorithms_refuse_robust_aggregators(
    tmp_path: Path, algorithm: str, aggregator: dict[str, Any]
) -> None:
    line = _fails(
        tmp_path,
        "methods.1.algorithm.name",
        f"{algorithm} averages its updates",
        method={"algorithm": {"name": algorithm}, "aggregator": aggregator},
    )
    assert repr(aggregator["name"]) in line and "aggregator: {name: mean}" in line


def test_fednova_refuses_local_adam(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        "methods.1.algorithm.name",
        "fednova assumes local SGD steps; set train.optimizer: sgd",
        method={"algorithm": {"name": "fednova"}},
        train={"optimizer": "adam"},
    )


@pytest.mark.parametrize("release", ["gaussian", "risk_aware"])
def test_scaffold_refuses_a_noise_release_step(tmp_path: Path, release: str) -> None:
    _fails(
        tmp_path,
        "methods.1.algorithm.name",
        "scaffold uploads a second tensor that the release steps do not perturb",
        method={"algorithm": {"name": "scaffold"}, "release": [{"name": release}]},
    )


def test_data_size_weighting_refuses_conceal_size(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        "methods.1.weighting.name",
        "needs each client's sample count n_k",
        method={"release": [{"name": "conceal_size"}]},
    )
    # the default weighting is data_size, and spelling it out fails the same way
    _fails(
        tmp_path,
        "methods.1.weighting.name",
        "use weighting: {name: uniform}",
        method={"release": [{"name": "conceal_size"}], "weighting": {"name": "data_size"}},
    )


def test_poisson_sampler_refuses_participation(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        "federation.sampling.name",
        "federation.participation=0.5 applies to the fixed sampler only",
        federation={"participation": 0.5, "sampling": {"name": "poisson", "rate": 0.2}},
    )


def test_sampler_params_are_validated(tmp_path: Path) -> None:
    _fails(
        tmp_path,
        "federation.sampling.rate",
        "less than or equal to 1",
        federation={"sampling": {"name": "poisson", "rate": 1.5}},
    )


def test_the_compatible_combinations_load(tmp_path: Path) -> None:
    ok = [
        ({"algorithm": {"name": "scaffold"}, "release": [{"name": "l2_clip", "bound": 1.0}]}, {}),
        ({"algorithm": {"name": "feddyn", "alpha": 0.1}}, {}),
        ({"algorithm": {"name": "fednova"}}, {"train": {"optimizer": "sgd"}}),
        ({"algorithm": {"name": "fedavg"}, "aggregator": {"name": "krum", "num_byzantine": 0}}, {}),
        ({"release": [{"name": "conceal_size"}], "weighting": {"name": "uniform"}}, {}),
        ({}, {"federation": {"sampling": {"name": "poisson", "rate": 0.2}}}),
    ]
    for method, over in ok:
        cfg = _load(tmp_path, method, **over)
        assert cfg.methods[1].name == "fedavg"


def test_cli_exits_2_on_an_algorithm_conflict(tiny_config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(tiny_config_file),
            "--out",
            str(out),
            "--set",
            "methods.1.algorithm={name: scaffold}",
            "--set",
            "methods.1.aggregator={name: krum}",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "methods.1.algorithm.name: scaffold averages its updates" in result.output
    assert not out.exists()
