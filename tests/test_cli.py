"""The geofl CLI: help everywhere, exit code 2 on bad input, run → report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geofl.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["run"],
        ["report"],
        ["presets"],
        ["predict"],
        ["epsilon"],
        ["data"],
        ["data", "describe"],
        ["config"],
        ["config", "show"],
        ["config", "validate"],
    ],
)
def test_every_command_has_help(args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_presets_lists_shipped_presets() -> None:
    result = runner.invoke(app, ["presets"])
    assert result.exit_code == 0
    assert "demo" in result.output and "fedavg-heterogeneity" in result.output


def test_bad_field_exits_2_with_one_line_and_no_run_dir(
    tiny_config_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        ["run", str(tiny_config_file), "--out", str(out), "--set", "methods.1.partition.alpha=0"],
    )
    assert result.exit_code == 2
    assert "methods.1.partition.alpha" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--seeds", "1,x"], "--seeds"),
        (["--set", "federation.num_clients=100000"], "federation.num_clients"),
        (["--set", "data.dataset=ucmerced", "--set", "data.params={root: /nope}"], "/nope"),
    ],
)
def test_bad_inputs_exit_2(
    tiny_config_file: Path, tmp_path: Path, extra: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(tiny_config_file), "--out", str(out), *extra])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert not out.exists()


def test_run_then_report_then_describe(tiny_config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "run",
            str(tiny_config_file),
            "--out",
            str(out),
            "--seeds",
            "1,2",
            "--no-progress",
            "--set",
            "federation.rounds=2",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["fedavg"]["final_test_accuracy"]["n"] == 2
    assert (out / "report" / "index.html").exists()
    again = runner.invoke(app, ["report", str(out)])
    assert again.exit_code == 0 and "index.html" in again.output
    # an existing run without --resume is refused with exit 2
    clash = runner.invoke(app, ["run", str(tiny_config_file), "--out", str(out)])
    assert clash.exit_code == 2 and "--resume" in clash.output
    desc = runner.invoke(
        app, ["data", "describe", str(tiny_config_file), "--plot", str(tmp_path / "p")]
    )
    assert desc.exit_code == 0, desc.output
    assert "partition" in desc.output and (tmp_path / "p" / "partition-01-fedavg.png").exists()


def test_report_on_a_non_run_dir_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not a run directory" in result.output


@pytest.mark.parametrize(
    ("preset", "needles"),
    [
        (
            "regression-example",
            [
                "14 features",
                "target quantiles",
                "yield_t_ha q5",
                "samples per quantile bin of the target",
            ],
        ),
        ("multilabel-example", ["13 labels", "label counts", "Burnt areas", "positives per label"]),
        ("tabular-binary-example", ["2 classes", "class counts", "stressed"]),
    ],
)
def test_describe_tabular_and_multilabel_presets(
    preset: str, needles: list[str], tmp_path: Path
) -> None:
    result = runner.invoke(
        app,
        [
            "data",
            "describe",
            preset,
            "--set",
            "data.params.num_samples=800",
            "--plot",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps long lines
    for needle in needles:
        assert needle in text, needle
    assert len(list(tmp_path.glob("partition-*.png"))) == 2


def test_epsilon_command_matches_the_accountant_and_refuses_bad_input() -> None:
    from geofl.privacy.budget import ledger_epsilon

    result = runner.invoke(
        app,
        [
            "epsilon",
            "--sigma",
            "1",
            "--dataset-size",
            "640",
            "--local-epochs",
            "2",
            "--rounds",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    spec = {
        "mechanism": "poisson_gaussian",
        "noise_multiplier": 1.0,
        "sampling_probability": 0.1,
        "count": 60,
    }
    eps = ledger_epsilon([spec], accountant="rdp", params={}, delta=1e-5)
    assert f"{eps:.4g}" in result.output and "60 steps" not in result.output
    for bad, needle in (
        (["--sigma", "0", "--q", "0.1", "--steps", "5"], "--sigma"),
        (["--sigma", "1", "--q", "1.5", "--steps", "5"], "--q"),
        (["--sigma", "1", "--q", "0.1"], "--dataset-size"),
        (["--sigma", "1", "--q", "0.1", "--steps", "5", "--accountant", "x"], "--accountant"),
    ):
        res = runner.invoke(app, ["epsilon", *bad])
        assert res.exit_code == 2 and needle in res.output, res.output
