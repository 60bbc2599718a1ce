"""Paper-000 sections of the report: Table 1, re-drawn figures, ε, attack AUC, weights."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from geofl.report import paper as paper_mod
from geofl.report import write_report
from geofl.report.summary import load_run, summarize_run
from geofl.tasks.metrics import rolling_std

from .conftest import ATTACK, FIGURES, LABELS, PAPER_TABLE1, write_fake_run

MakeRunDir = Any
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EPS_CONSISTENCY = (
    "Integrated Method: ε = 5.5 × 10⁷ at δ = 10⁻⁵ (max over clients and seeds; RDP; noise "
    "multiplier z = σ/(2C) between 2.5e-4 and 8.8e-4). A Gaussian mechanism this weak gives no "
    "meaningful formal guarantee: the perturbation is a heuristic defence."
)
EPS_FEDAVG = (
    "FedAvg: ε = 3.2 at δ = 10⁻⁵ (max over clients and seeds; RDP; noise multiplier "
    "z = σ/(2C) between 2.5e-4 and 8.8e-4)."
)
UNKNOWN_KIND = {"title": "Fig. 99", "methods": ["fedavg"], "kind": "histogram"}


def paper_run(root: Path, **overrides: Any) -> Path:
    """The default fake run with every paper-000 artefact."""
    kwargs: dict[str, Any] = {
        "paper": PAPER_TABLE1,
        "labels": LABELS,
        "figures": [*FIGURES, UNKNOWN_KIND],
        "privacy": {"consistency": {0: 5.5e7, 1: 4.0e7}, "fedavg": {0: 3.2, 1: 2.5}},
        "weighting": {"consistency": {"name": "consistency", "beta": 5.0}},
        "rolling_window": 5,
        "attack": ATTACK,
    }
    return write_fake_run(root, **{**kwargs, **overrides})


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    index = write_report(paper_run(tmp_path_factory.mktemp("paper")))
    return index, index.read_text(encoding="utf-8")


def _table(page: str, cls: str) -> list[list[str]]:
    """Rows of ``<table class="cls">`` as lists of cell HTML (header row included)."""
    match = re.search(rf'<table class="{cls}">(.*?)</table>', page, re.S)
    assert match, f"no table {cls}"
    return [
        re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), re.S)
    ]


def test_table1_layout_ours_next_to_paper(rendered: tuple[Path, str]) -> None:
    _, page = rendered
    header, *rows = _table(page, "table1")
    assert header == [
        "Method",
        "Setting",
        "Privacy perturbation",
        "Aggregation",
        "Final accuracy (ours, mean ± std over seeds, %)",
        "Paper (%)",
    ]
    assert [r[0].split("<br>")[0] for r in rows] == ["Centralized", "FedAvg", "Integrated Method"]
    centralized, fedavg, integrated = rows
    assert centralized[1:4] == ["–", "–", "–"]  # no paper value: still listed
    assert centralized[4].startswith("96.50 ± 0.71")
    assert centralized[5] == "–"
    assert fedavg[1:4] == ["α=0.1", "None", "FedAvg"]
    assert fedavg[4] == "92.00 ± 2.83<br><small>2/2 seeds</small>"
    assert fedavg[5] == "72.91 ± 2.82<br><small>000 Table 1 row 4</small>"
    assert integrated[0] == "Integrated Method"  # the label, not the method key
    assert integrated[3] == "Consistency-based weighting"
    assert integrated[4].startswith("92.50 ± 0.71")
    assert integrated[5].startswith("76.21 ± 1.21")
    # the detailed table follows, without repeating the Table 1 columns in its paper cell
    assert "<h3>All metrics</h3>" in page
    assert "setting: α=0.1" not in page


def test_paper_figures_are_drawn_and_captioned(rendered: tuple[Path, str]) -> None:
    index, page = rendered
    files = sorted(p.name for p in index.parent.glob("paper-fig-*.png"))
    assert files == [
        "paper-fig-00-Fig.-12-noise-vs-integrated.png",
        "paper-fig-01-Fig.-11-rolling-std.png",
    ]
    linked = re.findall(r'<img src="(paper-fig-[^"]+)"', page)
    assert linked == files
    for name in files:
        assert (index.parent / name).read_bytes()[:8] == PNG_MAGIC
    caption = (
        "<strong>Fig. 12: noise vs integrated</strong> — re-drawn from our runs of FedAvg, "
        "Integrated Method: test accuracy"
    )
    assert caption in page
    assert "over a window of 5 evaluated rounds" in page  # config eval.rolling_window
    assert "Figure “Fig. 99” has kind “histogram”" in page  # unknown kind: warned, not drawn


def test_paper_figures_plot_only_the_named_methods(
    make_run_dir: MakeRunDir, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, list[str], dict[str, Any]]] = []

    def fake(kind: str) -> Any:
        def plot(runs: Any, path: Path, **kwargs: Any) -> Path:
            calls.append((kind, list(runs), kwargs))
            return path

        return plot

    monkeypatch.setattr(paper_mod, "plot_accuracy_trajectories", fake("accuracy"))
    monkeypatch.setattr(paper_mod, "plot_rolling_std", fake("rolling_std"))
    figures = [
        {"title": "A", "methods": ["consistency"], "kind": "accuracy"},
        {"title": "B", "methods": ["fedavg", "gone"], "kind": "rolling_std"},
    ]
    run_dir = make_run_dir(labels=LABELS, figures=figures, rolling_window=7)
    blocks = paper_mod.paper_figures(load_run(run_dir), tmp_path)
    assert calls == [
        ("accuracy", ["Integrated Method"], {"title": "A", "colours": _ORDER}),
        ("rolling_std", ["FedAvg"], {"window": 7, "title": "B", "colours": _ORDER}),
    ]
    assert "Not in this run: gone." in blocks[1]


_ORDER = {"Centralized": 0, "FedAvg": 1, "Integrated Method": 2}


def test_epsilon_sentences(rendered: tuple[Path, str]) -> None:
    _, page = rendered
    block = re.search(r'<ul class="epsilon">(.*?)</ul>', page)
    assert block
    items = re.findall(r"<li>(.*?)</li>", block.group(1))
    assert items == [EPS_FEDAVG, EPS_CONSISTENCY]  # config order; centralized adds no noise
    assert page.count("no meaningful formal guarantee") == 1
    assert "update-level DP" in page  # the neighbouring relation is stated


def test_summary_epsilon_max(rendered: tuple[Path, str]) -> None:
    index, _ = rendered
    methods = json.loads((index.parent.parent / "summary.json").read_text())["methods"]
    assert methods["centralized"]["epsilon_max"] is None
    eps = methods["consistency"]["epsilon_max"]
    assert eps["values"] == [5.5e7, 4.0e7]
    assert eps["mean"] == pytest.approx(4.75e7)
    assert eps["n"] == 2
    assert methods["fedavg"]["epsilon_max"]["values"] == [3.2, 2.5]


def test_attack_chart_and_table(rendered: tuple[Path, str]) -> None:
    index, page = rendered
    assert (index.parent / "attack_auc.png").read_bytes()[:8] == PNG_MAGIC
    assert '<img src="attack_auc.png"' in page
    assert "Protocol: samples = client × 5-round windows; leave-one-seed-out CV." in page
    _, sub, fedavg, integrated = _table(page, "attack")
    assert sub == ["ours", "paper", "per fold"] * 2 + ["ours", "paper"]
    assert fedavg == [
        "FedAvg",
        "0.812<br><small>n = 60, 25 % positive</small>",
        "0.8251",
        "<small>0.790, 0.830</small>",
        "0.679<br><small>n = 60, 50 % positive</small>",
        "0.7521",
        "<small>0.700, –</small>",
        "61.23",
        "60.59",
    ]
    assert integrated[0] == "Integrated Method"
    assert integrated[2] == "–"  # no paper value
    assert integrated[4].startswith("–<br>")  # AUC undefined (one class only)
    assert integrated[7:] == ["–", "–"]


def test_consistency_weights_heatmap(rendered: tuple[Path, str]) -> None:
    index, page = rendered
    heatmaps = sorted(p.name for p in index.parent.glob("weights-*.png"))
    assert heatmaps == ["weights-02-consistency.png"]  # fedavg uses data-size weighting
    assert (index.parent / heatmaps[0]).stat().st_size > 10_000
    assert '<img src="weights-02-consistency.png"' in page
    assert "JS-consistency weighting, paper 000 Eq. 15–16, beta=5.0" in page


def test_rolling_window_from_config(rendered: tuple[Path, str]) -> None:
    index, page = rendered
    run_dir = index.parent.parent
    assert "final rolling std (pp, w=5)" in page
    rounds = (run_dir / "methods" / "fedavg" / "seed-0" / "rounds.jsonl").read_text()
    acc = [json.loads(line)["test"]["accuracy"] for line in rounds.splitlines()]
    stat = summarize_run(run_dir)["methods"]["fedavg"]["final_rolling_std"]
    assert stat["values"][0] == pytest.approx(float(rolling_std(acc, 5)[-1]))


def test_rerender_drops_stale_paper_sections(tmp_path: Path) -> None:
    small = {"methods": {"fedavg": ("dirichlet", {"alpha": 0.1}, 4, {0: 0.9})}, "seeds": (0,)}
    run_dir = paper_run(tmp_path, rounds=5, labels=None, **small)
    out = write_report(run_dir).parent
    assert (out / "attack_auc.png").is_file()
    assert len(list(out.glob("paper-fig-*.png"))) == 2
    (run_dir / "analysis" / "attribute_inference.json").unlink()
    info = json.loads((run_dir / "run.json").read_text())
    info["figures"] = []
    (run_dir / "run.json").write_text(json.dumps(info))
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert not (out / "attack_auc.png").exists()
    assert not list(out.glob("paper-fig-*.png"))
    assert "Passive attribute inference" not in page
    assert "fedavg: ε = 3.2" in page  # no labels: the method name


def test_paper_figure_without_data_is_a_note(tmp_path: Path) -> None:
    """A rolling-std figure on a run shorter than the window is not drawn, but said."""
    small = {"methods": {"fedavg": ("dirichlet", {"alpha": 0.1}, 4, {0: 0.9})}, "seeds": (0,)}
    run_dir = paper_run(tmp_path, rounds=3, labels=None, **small)
    out = write_report(run_dir).parent
    page = (out / "index.html").read_text(encoding="utf-8")
    assert [p.name for p in out.glob("paper-fig-*.png")] == [
        "paper-fig-00-Fig.-12-noise-vs-integrated.png"
    ]
    assert (
        "<strong>Fig. 11: rolling std</strong>: not drawn, no run has the data (needs ≥ 5" in page
    )
