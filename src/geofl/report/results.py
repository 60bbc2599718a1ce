"""The report's results section: one row per method, every metric, the paper's value.

Methods appear by their labels (``run.json["labels"]``). Mean ± sample std over finished
seeds; a run of one seed per method says "n = 1" once and shows plain values. Columns with
no value in any row (no paper values, a rolling std undefined on a short run) are left out.
"""

from __future__ import annotations

from html import escape
from typing import Any, cast

from geofl.report.fragments import (
    BADGE_INCOMPLETE,
    EMPTY,
    Column,
    partition_text,
    table_html,
)
from geofl.report.paper import TABLE1_COLUMNS, has_table1, table1_html
from geofl.report.run_data import RunData, SeedRun
from geofl.report.stats import Stat, format_pm, metric_scale, metric_unit
from geofl.report.summary import MethodSummary

__all__ = [
    "first_partition",
    "incomplete_notice",
    "num_clients",
    "partition_label",
    "results_html",
    "spread_note",
]

#: Short column names of metrics (others are shown by their key).
_SHORT = {
    "accuracy": "acc",
    "macro_f1": "macro-F1",
    "micro_f1": "micro-F1",
    "map": "mAP",
    "roc_auc": "ROC-AUC",
    "f1": "F1",
    "rmse": "RMSE",
    "mae": "MAE",
    "r2": "R²",
    "asr": "ASR",
    "miss_untriggered": "miss (no trigger)",
}


def first_partition(seeds: dict[int, SeedRun]) -> dict[str, Any] | None:
    """``partition.json`` of the first seed that has one."""
    return next((r.partition for r in seeds.values() if r.partition is not None), None)


def num_clients(partition: dict[str, Any]) -> int:
    """Number of clients of a ``partition.json``."""
    return len(partition.get("sizes") or partition.get("histograms") or [])


def partition_label(partition: dict[str, Any] | None) -> str:
    """E.g. ``"dirichlet (alpha=0.1), K=10"``; ``"–"`` when unknown (not escaped)."""
    if partition is None:
        return EMPTY
    params = partition.get("params")
    label = partition_text(
        str(partition.get("partitioner") or "?"), params if isinstance(params, dict) else None
    )
    return f"{label}, K={num_clients(partition)}"


def spread_note(run: RunData) -> str:
    """The one sentence that says what a number ± spread means in this run (HTML)."""
    if run.single_seed:
        return "One seed per method (n = 1): every value is that seed's; there is no spread."
    return "Mean ± sample standard deviation (ddof = 1) over finished seeds."


def _paper_cell(paper: dict[str, Any] | None, skip: frozenset[str] = frozenset()) -> str:
    """Published value, other non-null entries except ``skip``, and the source (small)."""
    if not paper:
        return EMPTY
    value = paper.get("final_test_accuracy")
    parts = [escape(str(value))] if value is not None else []
    parts += [
        f"{escape(str(k))}: {escape(str(v))}"
        for k, v in paper.items()
        if k not in ("final_test_accuracy", "source", *skip) and v is not None
    ]
    source = paper.get("source")
    if source:
        parts.append(f"<small>{escape(str(source))}</small>")
    return "<br>".join(parts) or EMPTY


def _fmt(stat: Stat | None, metric: str) -> str:
    """Mean ± std of a metric: percent with 2 decimals for fractions, else 4 digits; ``–``
    when the method does not report it (a clean method next to backdoored ones has no ASR)."""
    if stat is None:
        return EMPTY
    scale = metric_scale(metric)
    return format_pm(stat, scale=scale, digits=2 if scale == 100.0 else 4)


def _other_metrics(methods: dict[str, MethodSummary], primary: str) -> list[str]:
    """Scalar test metrics besides the primary one and the loss (classification: macro-F1)."""
    names = [
        k.removeprefix("final_test_")
        for ms in methods.values()
        for k in ms
        if k.startswith("final_test_")
    ]
    return [n for n in dict.fromkeys(names) if n not in (primary, "loss")]


def _method_cell(label: str, ms: MethodSummary) -> str:
    badge = BADGE_INCOMPLETE if ms["incomplete"] else ""
    if ms.get("diverged"):
        why = "; ".join(f"seed {s}: {r}" for s, r in ms["diverged"].items())
        badge += f'<span class="badge" title="{escape(why)}">diverged</span>'
    return escape(label) + badge


def _best_cell(ms: MethodSummary, primary: str) -> str:
    best = _fmt(cast("dict[str, Stat]", ms).get(f"best_val_test_{primary}"), primary)
    rounds = ms["best_val_round"]
    if best == EMPTY or not rounds["n"]:
        return best
    return f"{best}<br><small>at round {format_pm(rounds, scale=1.0, digits=0)}</small>"


def _columns(run: RunData, methods: dict[str, MethodSummary], skip: frozenset[str]) -> list[Column]:
    pm, names = run.task.primary_metric, run.display_names()
    stats = [cast("dict[str, Stat]", ms) for ms in methods.values()]
    short, unit = escape(_SHORT.get(pm, pm)), metric_unit(pm)
    spread = "pp" if metric_scale(pm) == 100.0 else escape(pm)
    seeds = [
        EMPTY
        if run.single_seed
        else f'<span title="finished seeds: {", ".join(map(str, ms["seeds_done"])) or "none"}">'
        f"{len(ms['seeds_done'])}/{len(run.methods.get(m, {}))}</span>"
        for m, ms in methods.items()
    ]
    method = [_method_cell(names.get(m, m), ms) for m, ms in methods.items()]
    parts = [escape(partition_label(first_partition(run.methods.get(m, {})))) for m in methods]
    others = [
        Column(
            f"final {escape(_SHORT.get(o, o))}{metric_unit(o)}",
            [_fmt(s.get(f"final_test_{o}"), o) for s in stats],
            numeric=True,
        )
        for o in _other_metrics(methods, pm)
    ]
    ms_list = list(methods.values())
    return [
        Column("method", method, keep=True),
        Column("partition", parts),
        Column("seeds", seeds, numeric=True),
        Column(
            f"final test {short}{unit}",
            [_fmt(s.get(f"final_test_{pm}"), pm) for s in stats],
            numeric=True,
        ),
        Column(
            f"best-val test {short}{unit}", [_best_cell(ms, pm) for ms in ms_list], numeric=True
        ),
        *others,
        Column(
            f"final rolling std ({spread}, w={run.rolling_window})",
            [_fmt(ms["final_rolling_std"], pm) for ms in ms_list],
            numeric=True,
        ),
        Column(
            "MB up per round",
            [format_pm(ms["bytes_up_per_round"], scale=1e-6) for ms in ms_list],
            numeric=True,
        ),
        Column("paper", [_paper_cell(ms["paper"], skip) for ms in ms_list]),
    ]


def results_html(run: RunData, methods: dict[str, MethodSummary]) -> str:
    """The results table(s): the paper's layout first when its columns are given."""
    table1 = has_table1(methods)
    skip = frozenset(k for k, _ in TABLE1_COLUMNS) if table1 else frozenset()
    pm = run.task.primary_metric
    short = escape(_SHORT.get(pm, pm))
    select = str((run.config.get("eval") or {}).get("select_by") or pm)  # eval.select_by
    rows = ["incomplete" if ms["incomplete"] else "" for ms in methods.values()]
    details = (
        f"<p>{spread_note(run)} Best-val test {short} is the test {escape(pm)} at the round "
        f"with the best validation {escape(select)}.</p>\n"
        + table_html(_columns(run, methods, skip), rows)
    )
    if not table1:
        return details
    ours = "our final test accuracy" + ("" if run.single_seed else " (mean ± sample std)")
    return (
        f"<p>In the layout of the paper's results table: {ours} next to the published "
        "value, one row per method in config order.</p>\n"
        + table1_html(run, methods)
        + "\n<h3>All metrics</h3>\n"
        + details
    )


def incomplete_notice(run: RunData, methods: dict[str, MethodSummary]) -> str:
    """A warning box listing the unfinished seeds; ``""`` when every seed finished."""
    names = run.display_names()
    items = []
    for method, ms in methods.items():
        for seed in ms["incomplete"]:
            n = len(run.methods[method][seed].rounds)
            items.append(
                f"<li>{escape(names.get(method, method))}, seed {seed}: no final.json "
                f"({n} evaluated round{'s' if n != 1 else ''} so far)</li>"
            )
    if not items:
        return ""
    return (
        '<div class="warn"><strong>Incomplete runs</strong> (left out of the statistics, '
        "shown in the figures as far as they got):<ul>" + "".join(items) + "</ul></div>"
    )
