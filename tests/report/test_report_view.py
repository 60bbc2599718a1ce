"""What a reader sees: labels, single-seed wording, omitted empty columns and figures,
zero-height bars, run facts (issue 17 item 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from geofl.report import figures as figures_mod
from geofl.report import write_report
from geofl.report.class_plots import _mark_empty_bars
from geofl.report.facts import command_text
from geofl.report.fragments import EMPTY, Column, table_html
from geofl.report.style import new_figure

from .conftest import LABELS, MakeRunDir

PROVENANCE = {
    "at": "2025-01-02T03:04:05+00:00",
    "command": ["/x/src/geofl/cli/__main__.py", "run", "demo", "--set", "train.lr=0.1 ; rm"],
    "overrides": ["train.lr=0.1 ; rm"],
    "seeds": None,
    "geofl_version": "0.1.0",
    "git": {"commit": "4fd659841b5318f6cd3222c8eb2f5552526c5a84", "dirty": True},
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
    "numpy": "2.4.6",
    "platform": "Linux-6.1-x86_64",
    "cpu_count": 2,
}


def _text(html: str) -> str:
    """The page's visible text (tags dropped; the config block removed)."""
    html = re.sub(r"<details>.*?</details>", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def _with_provenance(run_dir: Path, **extra: Any) -> None:
    info = json.loads((run_dir / "run.json").read_text())
    info.update(provenance=PROVENANCE, **extra)
    (run_dir / "run.json").write_text(json.dumps(info))


def test_labels_replace_method_keys(
    make_run_dir: MakeRunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[list[str]] = []
    real = figures_mod.plot_accuracy_trajectories

    def spy(runs: Any, path: Path, **kw: Any) -> Path:
        drawn.append(list(runs))
        return real(runs, path, **kw)

    monkeypatch.setattr(figures_mod, "plot_accuracy_trajectories", spy)
    run_dir = make_run_dir(labels=LABELS, paper={})
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert drawn == [["Centralized", "FedAvg", "Integrated Method"]]  # the legend's entries
    for key, label in LABELS.items():
        assert f"<td>{label}</td>" in page  # results and communication tables
        assert f"<td>{key}</td>" not in page
    assert "Client partition of <strong>Integrated Method</strong>" in page


def test_single_seed_says_n_1_once(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(seeds=(0,), paper={}, labels=LABELS)
    text = _text(write_report(run_dir).read_text(encoding="utf-8"))
    assert text.count("n = 1") == 1
    for absent in (
        "±",
        "mean over seeds",
        "Thin translucent",
        "std band",
        "over finished seeds",
        "finished seeds",
        "(n=1)",
    ):
        assert absent not in text, absent
    assert "90.00" in text  # fedavg seed 0: final test accuracy 0.90, shown alone
    assert re.search(r"at round \d+ ", text)


def test_multi_seed_keeps_spread_language(run_dir: Path) -> None:
    text = _text(write_report(run_dir).read_text(encoding="utf-8"))
    assert "92.00 ± 2.83" in text
    assert "n = 1" not in text
    assert "Thin translucent lines are individual seeds" in text


def test_columns_without_data_are_left_out(make_run_dir: MakeRunDir) -> None:
    run_dir = make_run_dir(paper={}, seeds=(0,), rounds=4)
    page = write_report(run_dir).read_text(encoding="utf-8")
    results = page[page.index('<h2 id="results">') : page.index('<h2 id="communication">')]
    for header in ("<th>paper</th>", "final rolling std", "<th>seeds</th>"):
        assert header not in results
    assert "<th>final test acc (%)</th>" in results


def test_table_html_drops_empty_columns() -> None:
    html = table_html(
        [
            Column("m", ["a", "b"], keep=True),
            Column("x", [EMPTY, EMPTY]),
            Column("y", [EMPTY, "1"], numeric=True),
            Column("z", [EMPTY, EMPTY], keep=True),
        ],
        row_classes=["", "incomplete"],
    )
    assert "<th>x</th>" not in html
    assert "<thead><tr><th>m</th><th>y</th><th>z</th></tr></thead>" in html
    assert '<tr class="incomplete"><td>b</td><td class="num">1</td><td>–</td></tr>' in html


def test_zero_and_missing_bars_are_marked() -> None:
    ax = new_figure().add_subplot()
    values = np.array([50.0, 0.0, np.nan, 0.04])
    _mark_empty_bars(ax, np.arange(4.0), values, "#d62728")
    marks = [(t.get_text(), t.xy[0]) for t in ax.texts]  # type: ignore[attr-defined]
    assert marks == [("0", 1.0), ("–", 2.0), ("0", 3.0)]  # 0.04 % rounds to 0.0


def test_run_facts(run_dir: Path) -> None:
    _with_provenance(run_dir, resumed=[{**PROVENANCE, "at": "2025-01-03T00:00:00+00:00"}])
    page = write_report(run_dir).read_text(encoding="utf-8")
    facts = page[page.index('<h2 id="run-facts">') : page.index('<h2 id="configuration">')]
    assert "python -m geofl.cli run demo --set &#x27;train.lr=0.1 ; rm&#x27;" in facts
    assert "<code>4fd659841b53</code> (with uncommitted changes)" in facts
    assert "Python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6" in facts
    assert "Linux-6.1-x86_64, 2 CPUs" in facts
    assert "resumed (1)</th><td>2025-01-03T00:00:00+00:00 on Linux" in facts
    # the fake seeds ran 15 rounds of 1.3 s: 19.5 s per seed, 39.0 s over the two
    fedavg = re.search(r"<tr><td>fedavg</td>(.*?)</tr>", facts)
    assert fedavg is not None
    assert fedavg.group(1) == (
        '<td>2</td><td class="num">19.5 ± 0.0</td><td class="num">39.0</td>'
        '<td class="num">1.30</td>'
    )
    assert '<a href="#run-facts">Run facts</a>' in page


def test_run_facts_of_an_old_run_say_not_recorded(run_dir: Path) -> None:
    page = write_report(run_dir).read_text(encoding="utf-8")
    facts = page[page.index('<h2 id="run-facts">') :]
    assert "<th>command</th><td>not recorded</td>" in facts
    assert "geofl</th><td>0.1.0" in facts


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (None, "library call (no command line)"),
        (["/usr/bin/geofl", "run", "a b.yaml"], "/usr/bin/geofl run 'a b.yaml'"),
        (["/p/geofl/cli/__main__.py", "report", "r"], "python -m geofl.cli report r"),
    ],
)
def test_command_text(argv: list[str] | None, text: str) -> None:
    assert command_text(argv) == text


@pytest.mark.parametrize(("seed", "said"), [(0, False), (1, True)])
def test_per_class_caption_explains_only_marks_it_draws(
    make_run_dir: MakeRunDir, seed: int, said: bool
) -> None:
    """The fake seed 1 has no value for class 3 (absent from its test split); seed 0 has
    every class, none at 0 %."""
    page = write_report(make_run_dir(seeds=(seed,), paper={})).read_text(encoding="utf-8")
    assert ("A grey – marks a class without a value" in page) is said
    assert "A bold 0 marks" not in page
