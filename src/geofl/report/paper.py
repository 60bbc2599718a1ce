"""Report sections that put our runs next to a paper: its results table and its figures.

* :func:`table1_html` — the layout of 000 Table 1 (Method | Setting | Privacy perturbation |
  Aggregation | final accuracy), our mean ± std next to the published value, one row per
  method in config order. Used when a paper value has ``setting``, ``perturbation`` or
  ``aggregation`` (:func:`has_table1`).
* :func:`paper_figures` — each ``run.json["figures"]`` entry (``{title, methods, kind}``)
  re-drawn from our runs of the named methods, with the plot helpers of
  :mod:`geofl.report.plots`.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from geofl.report.fragments import BADGE_INCOMPLETE, figure_html, slug
from geofl.report.plots import (
    has_rolling_std,
    has_series,
    plot_accuracy_trajectories,
    plot_rolling_std,
    single_seed,
)
from geofl.report.summary import MethodSummary, RunData, SeedRun, format_pm

__all__ = [
    "FIGURE_PREFIX",
    "TABLE1_COLUMNS",
    "display_names",
    "has_table1",
    "paper_figures",
    "table1_html",
]

#: Paper-value keys shown as their own Table 1 columns, with their headers.
TABLE1_COLUMNS = (
    ("setting", "Setting"),
    ("perturbation", "Privacy perturbation"),
    ("aggregation", "Aggregation"),
)

#: File-name prefix of the re-drawn paper figures (stale ones are removed on re-render).
FIGURE_PREFIX = "paper-fig-"

_KINDS = ("accuracy", "rolling_std")


def display_names(run: RunData) -> dict[str, str]:
    """``method -> label`` (``run.json["labels"]``), made unique with the method name
    (:meth:`RunData.display_names`)."""
    return run.display_names()


def has_table1(methods: Mapping[str, MethodSummary]) -> bool:
    """True when some paper value carries a Table 1 column (setting, perturbation, ...).

    The table compares final test accuracies, so only classification summaries have it.
    """
    if not all("final_test_accuracy" in ms for ms in methods.values()):
        return False
    return any(
        ms["paper"] is not None and any(ms["paper"].get(k) is not None for k, _ in TABLE1_COLUMNS)
        for ms in methods.values()
    )


def _text(value: Any) -> str:
    return "–" if value is None or value == "" else escape(str(value))


def table1_html(run: RunData, methods: Mapping[str, MethodSummary]) -> str:
    """The results table in the layout of 000 Table 1, ours next to the paper's.

    Args:
        run: The loaded run (for labels and the number of seeds per method).
        methods: ``summary["methods"]``, in config order.

    Returns:
        A ``<table>`` (every string from the run directory escaped).
    """
    names = display_names(run)
    head = "".join(f"<th>{h}</th>" for _, h in TABLE1_COLUMNS)
    ours = "ours, %" if run.single_seed else "ours, mean ± std over seeds, %"
    rows = [f"<tr><th>Method</th>{head}<th>Final accuracy ({ours})</th><th>Paper (%)</th></tr>"]
    for method, ms in methods.items():
        paper = ms["paper"] or {}
        name = names.get(method, method)
        cell = escape(name) + (BADGE_INCOMPLETE if ms["incomplete"] else "")
        n_all = len(run.methods.get(method, {}))
        done = len(ms["seeds_done"])
        count = "" if run.single_seed else f"<br><small>{done}/{n_all} seeds</small>"
        value = f'<td class="num">{format_pm(ms["final_test_accuracy"])}{count}</td>'
        published = _text(paper.get("final_test_accuracy"))
        if paper.get("source"):
            published += f"<br><small>{escape(str(paper['source']))}</small>"
        flag = ' class="incomplete"' if ms["incomplete"] else ""
        rows.append(
            f"<tr{flag}><td>{cell}</td>"
            + "".join(f"<td>{_text(paper.get(k))}</td>" for k, _ in TABLE1_COLUMNS)
            + value
            + f'<td class="num">{published}</td></tr>'
        )
    return '<table class="table1">' + "\n".join(rows) + "</table>"


def _figure_specs(run: RunData) -> list[tuple[str, list[str], str]]:
    """``(title, methods, kind)`` of each well-formed ``run.json["figures"]`` entry."""
    specs = run.info.get("figures") or []
    out = []
    for spec in specs if isinstance(specs, list) else []:
        if not isinstance(spec, dict):
            continue
        methods = spec.get("methods")
        out.append(
            (
                str(spec.get("title") or "untitled figure"),
                [str(m) for m in methods] if isinstance(methods, list) else [],
                str(spec.get("kind") or "accuracy"),
            )
        )
    return out


def _draw(
    run: RunData,
    subset: dict[str, dict[int, SeedRun]],
    file: Path,
    title: str,
    kind: str,
    order: dict[str, int],
) -> str | None:
    """Draw one paper figure; what it shows (HTML), or None when it has nothing to show."""
    window, single = run.rolling_window, single_seed(subset)
    lines = "" if single else "; thin translucent lines are seeds, bold lines the mean over seeds"
    if kind == "accuracy":
        if not has_series(subset):
            return None
        plot_accuracy_trajectories(subset, file, title=title, colours=order)
        return f"test accuracy (%) per evaluated round{lines}"
    if not has_rolling_std(subset, window):
        return None
    plot_rolling_std(subset, file, window=window, title=title, colours=order)
    return (
        f"rolling standard deviation of test accuracy over a window of {window} evaluated "
        f"rounds, in percentage points (lower is more stable){lines}"
    )


def paper_figures(run: RunData, out: Path) -> list[str]:
    """Re-draw each paper figure of ``run.json["figures"]`` from our runs of its methods.

    ``kind: accuracy`` → test-accuracy trajectories (seeds thin, mean bold);
    ``kind: rolling_std`` → rolling std of test accuracy over :attr:`RunData.rolling_window`
    evaluated rounds. A method keeps its colour from the run-wide figures. A figure without
    data (a rolling std on a run shorter than the window) is replaced by a one-line note.

    Args:
        run: The loaded run.
        out: The report folder (``paper-fig-*.png`` files there are replaced).

    Returns:
        One ``<figure>`` (or a warning or note) per entry.
    """
    for stale in out.glob(f"{FIGURE_PREFIX}*.png"):
        stale.unlink()
    names = display_names(run)
    order = {names[m]: i for i, m in enumerate(run.methods)}
    blocks = []
    for i, (title, methods, kind) in enumerate(_figure_specs(run)):
        if kind not in _KINDS:
            blocks.append(
                f'<div class="warn">Figure “{escape(title)}” has kind “{escape(kind)}”; '
                f"this report draws {' or '.join(_KINDS)}. Fix <code>figures</code> in the "
                "experiment config, or update geofl.</div>"
            )
            continue
        present = [m for m in methods if m in run.methods]
        subset: dict[str, dict[int, SeedRun]] = {names[m]: run.methods[m] for m in present}
        file = f"{FIGURE_PREFIX}{i:02d}-{slug(title)[:48]}.png"
        what = _draw(run, subset, out / file, title, kind, order)
        if what is None:
            needs = _needs(kind, run.rolling_window)
            blocks.append(
                f"<p><small><strong>{escape(title)}</strong>: not drawn, no run has the data "
                f"({needs}).</small></p>"
            )
            continue
        listed = ", ".join(escape(names[m]) for m in present) or "none of its methods"
        missing = [m for m in methods if m not in run.methods]
        note = (
            f" Not in this run: {escape(', '.join(missing))}." if missing else ""
        )  # e.g. a figure config edited after the run
        caption = f"<strong>{escape(title)}</strong> — re-drawn from our runs of {listed}: {what}."
        blocks.append(figure_html(file, caption + note, title))
    return blocks


def _needs(kind: str, window: int) -> str:
    return f"needs ≥ {window} evaluated rounds" if kind == "rolling_std" else "no evaluated round"
