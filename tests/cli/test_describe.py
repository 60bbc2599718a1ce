"""``geofl data describe``: whole class names, readable partitions, entropy, figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tests.conftest import tiny_raw
from typer.testing import CliRunner

from geofl.cli import app
from geofl.cli.describe import _entropy, _fmt_entropy
from geofl.report.fragments import partition_figure_name, partition_text

runner = CliRunner()


def _describe(*args: str) -> str:
    result = runner.invoke(app, ["data", "describe", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _config(tmp_path: Path, methods: list[dict[str, Any]]) -> Path:
    path = tmp_path / "tiny.yaml"
    raw = tiny_raw(methods=methods, federation={"num_clients": 10, "rounds": 1})
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("name", "params", "text"),
    [
        ("iid", {}, "iid"),
        ("pooled", None, "pooled"),
        ("dirichlet", {"alpha": 0.1, "min_samples": 20}, "dirichlet (alpha=0.1, min_samples=20)"),
        ("group", {"key": "region"}, "group by region"),
        ("region", {}, "group by region"),
    ],
)
def test_partition_text(name: str, params: dict[str, Any] | None, text: str) -> None:
    assert partition_text(name, params) == text


def test_entropy_of_a_one_class_client_is_zero_not_minus_zero() -> None:
    ent = _entropy(np.array([[7, 0, 0], [1, 1, 0], [0, 0, 0]]))
    assert _fmt_entropy(ent) == "[0.00, 0.69, 0.00]"
    assert _fmt_entropy(np.array([-1e-17, -0.0])) == "[0.00, 0.00]"


def test_multilabel_names_whole_and_heatmaps_named_and_labelled_as_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geofl.report import class_plots

    xlabels: list[str] = []
    real = class_plots.style

    def spy(ax: Any, title: str, xlabel: str, ylabel: str, grid: bool = True) -> None:
        xlabels.append(xlabel)
        real(ax, title, xlabel, ylabel, grid)

    monkeypatch.setattr(class_plots, "style", spy)
    out = _describe(
        "multilabel-example",
        "--set",
        "data.params.num_samples=300",
        "--set",
        "methods.1.partition.min_samples=10",
        "--plot",
        str(tmp_path),
    )
    lines = out.splitlines()
    for name in (
        "Natural grassland and sparsely vegetated areas",
        "Industrial or commercial units",
    ):
        assert any(name in line for line in lines), name  # whole, on one line
    assert "…" not in out
    names = [partition_figure_name(0, "fedavg-iid"), partition_figure_name(1, "fedavg-dir-rarest")]
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    assert names == ["partition-00-fedavg-iid.png", "partition-01-fedavg-dir-rarest.png"]
    assert xlabels == ["label", "label"]  # the heatmaps' x-axis


def test_partitions_print_readably_and_entropy_has_no_minus_zero(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        [
            {"name": "iid", "partition": {"name": "iid"}},
            {"name": "skew", "partition": {"name": "dirichlet", "alpha": 0.01, "min_samples": 5}},
            {"name": "regions", "partition": {"name": "group", "key": "region"}},
        ],
    )
    text = " ".join(_describe(str(cfg)).split())  # rich wraps long titles
    assert "iid: iid partition" in text
    assert "skew: dirichlet (alpha=0.01, min_samples=5) partition" in text
    assert "regions: group by region partition" in text
    assert "{" not in text and "-0.0" not in text
    assert "0.00" in text  # alpha=0.01 leaves clients with one class (was -0.0)
