"""The HTML report and its figures (geofl.report.html, geofl.report.plots)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from geofl.errors import RunDirError
from geofl.report import write_report
from geofl.report.plots import (
    plot_accuracy_trajectories,
    plot_partition_heatmap,
    plot_per_class_accuracy,
    plot_rolling_std,
)
from geofl.report.summary import load_run

from .conftest import METHODS

MakeRunDir = Any
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STATIC_FIGURES = {
    "accuracy_trajectories.png",
    "rolling_std.png",
    "convergence.png",
    "per_class_accuracy.png",
}


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The default fake run with one unfinished seed, rendered once for the module."""
    from .conftest import write_fake_run

    run_dir = write_fake_run(tmp_path_factory.mktemp("rep"), incomplete=[("consistency", 1)])
    index = write_report(run_dir)
    return index, index.read_text(encoding="utf-8")


def test_report_files(rendered: tuple[Path, str]) -> None:
    index, page = rendered
    assert index.name == "index.html"
    assert (index.parent.parent / "summary.json").is_file()
    pngs = {p.name for p in index.parent.glob("*.png")}
    # one heatmap per federated method; "centralized" (K=1) gets none
    assert pngs == STATIC_FIGURES | {"partition-01-fedavg.png", "partition-02-consistency.png"}
    for name in pngs:
        _assert_png(index.parent / name)
    linked = set(re.findall(r'<img src="([^"]+)"', page))
    assert linked == pngs
    assert not list(index.parent.glob(".*.tmp"))


def test_report_content(rendered: tuple[Path, str]) -> None:
    _, page = rendered
    assert "<title>geofl report — fake-run</title>" in page
    assert "2025-01-02T03:04:05+00:00" in page
    for method in METHODS:
        assert f"<td>{method}" in page
    assert "92.00 ± 2.83" in page  # fedavg final test accuracy over seeds 0.90, 0.94
    assert "72.91 ± 2.82" in page  # paper value ...
    assert "000 Table 1 row 3" in page  # ... with its source
    assert "dirichlet (alpha=0.1), K=10" in page
    assert "pooled, K=1" in page
    assert "Fig. 5" in page
    assert "Fig. 6" in page
    assert "<details>" in page


def test_no_paper_sections_without_their_data(rendered: tuple[Path, str]) -> None:
    index, page = rendered
    # no Table 1 columns, figures, privacy, attack result or consistency weighting
    for absent in (
        'class="table1"',
        ">Privacy</h2>",
        "ε =",
        "attack_auc.png",
        "Paper figures",
        "Aggregation weights",
        "weights-",
    ):
        assert absent not in page
    summary = json.loads((index.parent.parent / "summary.json").read_text())
    assert all(ms["epsilon_max"] is None for ms in summary["methods"].values())


def test_incomplete_runs_are_flagged(rendered: tuple[Path, str]) -> None:
    _, page = rendered
    assert '<tr class="incomplete"><td>consistency<span class="badge">incomplete' in page
    assert "consistency, seed 1: no final.json (15 evaluated rounds so far)" in page


def test_config_is_embedded_escaped(rendered: tuple[Path, str]) -> None:
    _, page = rendered
    assert "# thresholds: a &lt; b &amp; c &gt; d" in page


def test_strings_from_the_run_dir_are_escaped(make_run_dir: MakeRunDir) -> None:
    evil = "fed<b>$\\x$&co"  # also not mathtext: "$\x$" would make matplotlib raise
    methods = {evil: METHODS["fedavg"], "centralized": METHODS["centralized"]}
    paper = {evil: {"final_test_accuracy": "1 < 2", "source": "<script>x</script>"}}
    run_dir = make_run_dir(methods=methods, paper=paper)
    info = json.loads((run_dir / "run.json").read_text())
    info["name"] = "<i>run</i>"
    (run_dir / "run.json").write_text(json.dumps(info))
    page = write_report(run_dir).read_text(encoding="utf-8")
    for raw in ("<b>", "<i>", "<script>"):
        assert raw not in page
    assert "fed&lt;b&gt;$\\x$&amp;co" in page
    assert "&lt;i&gt;run&lt;/i&gt;" in page
    assert "1 &lt; 2" in page
    heatmaps = list((run_dir / "report").glob("partition-*.png"))
    assert [p.name for p in heatmaps] == ["partition-00-fed-b-x-co.png"]


def test_rerender_removes_stale_heatmaps(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(methods={"centralized": METHODS["centralized"]}, seeds=(0,), rounds=4)
    stale = run_dir / "report" / "partition-07-old.png"
    stale.parent.mkdir()
    stale.write_bytes(b"x")
    index = write_report(run_dir)
    assert not stale.exists()
    # fewer rounds than the rolling window: no rolling-std figure or column, a note instead
    assert {p.name for p in index.parent.glob("*.png")} == STATIC_FIGURES - {"rolling_std.png"}
    page = index.read_text(encoding="utf-8")
    assert "final rolling std" not in page
    assert "not drawn, it needs ≥ 10 evaluated rounds and the longest run has 4." in page


def test_missing_run_json_raises(tmp_path: Path) -> None:
    (tmp_path / "methods").mkdir()
    with pytest.raises(RunDirError, match=r"run\.json not found"):
        write_report(tmp_path)


def test_plots_without_data_still_write_pngs(tmp_path: Path) -> None:
    plot_accuracy_trajectories({}, tmp_path / "a.png")
    plot_rolling_std({}, tmp_path / "b.png")
    plot_per_class_accuracy({}, tmp_path / "c.png")
    plot_partition_heatmap({"histograms": []}, tmp_path / "d.png", title="empty")
    for name in "abcd":
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC


def test_large_partition_heatmap(make_run_dir: MakeRunDir, tmp_path: Path) -> None:
    run_dir = make_run_dir(methods={"fedavg": METHODS["fedavg"]}, seeds=(0,), rounds=2)
    part = load_run(run_dir).methods["fedavg"][0].partition
    assert part is not None
    big = {**part, "histograms": part["histograms"] * 5, "sizes": part["sizes"] * 5}
    _assert_png(plot_partition_heatmap(big, tmp_path / "big.png", title="50 clients"))
