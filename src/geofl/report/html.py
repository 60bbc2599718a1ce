"""The static HTML report of a run directory (``RUN_DIR/report/index.html`` + PNGs).

The page is self-contained (inline CSS, images referenced relatively), so the ``report/``
folder can be copied or served as is. Every string that comes from the run directory is
HTML-escaped.

Sections: results (in the layout of the paper's table when the paper values carry its
columns, :mod:`geofl.report.paper`, then every metric per method), privacy (ε of noisy
releases and the attribute-inference attack, :mod:`geofl.report.privacy`), the paper's
figures re-drawn from our runs, the run-wide figures, aggregation weights and the config.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any, cast

from geofl.report.communication import communication_html
from geofl.report.fragments import (
    BADGE_INCOMPLETE,
    figure_html,
    partition_figure_name,
    partition_text,
)
from geofl.report.governance import governance_html
from geofl.report.paired import paired_html
from geofl.report.paper import TABLE1_COLUMNS, has_table1, paper_figures, table1_html
from geofl.report.plots import (
    plot_accuracy_trajectories,
    plot_convergence,
    plot_partition_heatmap,
    plot_per_class_accuracy,
    plot_rolling_std,
)
from geofl.report.privacy import (
    attack_section,
    epsilon_sentences,
    neighbouring,
    weight_figures,
)
from geofl.report.summary import (
    MethodSummary,
    RunData,
    SeedRun,
    Stat,
    format_pm,
    load_run,
    metric_scale,
    metric_unit,
    write_summary,
    write_text_atomic,
)
from geofl.report.task_figures import task_figures
from geofl.report.uplink import uplink_html

__all__ = ["write_report"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;
margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
h1{margin-bottom:.2rem}.meta{color:#666;font-size:.9rem;margin-top:0}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:1rem 0}
th,td{border-bottom:1px solid #ddd;padding:.4rem .55rem;text-align:left;vertical-align:top}
th{background:#f4f6f8}td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
tr.incomplete{background:#fff8e6}small{color:#666}
.badge{display:inline-block;background:#f0ad4e;color:#fff;border-radius:3px;padding:0 .35rem;
font-size:.75rem;margin-left:.3rem}
.warn{background:#fff8e6;border-left:4px solid #f0ad4e;padding:.5rem 1rem;margin:1rem 0}
figure{margin:1.5rem 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#444;font-size:.9rem;margin-top:.3rem}
pre{background:#f6f8fa;padding:1rem;overflow-x:auto;font-size:.85rem}
details summary{cursor:pointer;font-weight:600}
ul.epsilon li{margin:.3rem 0}
"""


def _first_partition(seeds: dict[int, SeedRun]) -> dict[str, Any] | None:
    return next((r.partition for r in seeds.values() if r.partition is not None), None)


def _num_clients(partition: dict[str, Any]) -> int:
    return len(partition.get("sizes") or partition.get("histograms") or [])


def _partition_label(partition: dict[str, Any] | None) -> str:
    """E.g. ``"dirichlet (alpha=0.1), K=10"``; ``"–"`` when unknown."""
    if partition is None:
        return "–"
    params = partition.get("params")
    label = partition_text(
        str(partition.get("partitioner") or "?"), params if isinstance(params, dict) else None
    )
    return f"{label}, K={_num_clients(partition)}"


def _paper_cell(paper: dict[str, Any] | None, skip: frozenset[str] = frozenset()) -> str:
    """Published value, other non-null entries except ``skip``, and the source (small)."""
    if not paper:
        return "–"
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
    return "<br>".join(parts) or "–"


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
}


def _fmt(stat: Stat, metric: str) -> str:
    """Mean ± std of a metric: percent with 2 decimals for fractions, else 4 digits."""
    scale = metric_scale(metric)
    return format_pm(stat, scale=scale, digits=2 if scale == 100.0 else 4)


def _other_metrics(ms: MethodSummary, primary: str) -> list[str]:
    """Scalar test metrics besides the primary one and the loss (classification: macro-F1)."""
    names = [k.removeprefix("final_test_") for k in ms if k.startswith("final_test_")]
    return [n for n in names if n not in (primary, "loss")]


def _final_cell(ms: MethodSummary, metric: str) -> str:
    """Final test ``metric`` of a method, ``–`` when its runs do not report it (a clean
    method next to backdoored ones has no ASR)."""
    stat = cast("dict[str, Stat]", ms).get(f"final_test_{metric}")
    return "–" if stat is None else _fmt(stat, metric)


def _row(
    method: str,
    ms: MethodSummary,
    seeds: dict[int, SeedRun],
    skip: frozenset[str],
    primary: str,
    others: list[str],
) -> str:
    flag = ' class="incomplete"' if ms["incomplete"] else ""
    badge = BADGE_INCOMPLETE if ms["incomplete"] else ""
    if ms.get("diverged"):
        why = "; ".join(f"seed {s}: {r}" for s, r in ms["diverged"].items())
        badge += f'<span class="badge" title="{escape(why)}">diverged</span>'
    done = ", ".join(str(s) for s in ms["seeds_done"]) or "none"
    best_round = ms["best_val_round"]
    at_round = (
        f"<br><small>at round {best_round['mean']:.0f} ± {best_round['std']:.0f}</small>"
        if best_round["n"]
        else ""
    )
    cells = [
        f"<td>{escape(method)}{badge}</td>",
        f"<td>{escape(_partition_label(_first_partition(seeds)))}</td>",
        f'<td class="num" title="finished seeds: {escape(done)}">'
        f"{len(ms['seeds_done'])}/{len(seeds)}</td>",
        f'<td class="num">{_fmt(ms[f"final_test_{primary}"], primary)}</td>',  # type: ignore[literal-required]
        f'<td class="num">{_fmt(ms[f"best_val_test_{primary}"], primary)}{at_round}</td>',  # type: ignore[literal-required]
        *(f'<td class="num">{_final_cell(ms, m)}</td>' for m in others),
        f'<td class="num">{_fmt(ms["final_rolling_std"], primary)}</td>',
        f'<td class="num">{format_pm(ms["bytes_up_per_round"], scale=1e-6)}</td>',
        f"<td>{_paper_cell(ms['paper'], skip)}</td>",
    ]
    return f"<tr{flag}>" + "".join(cells) + "</tr>"


def _incomplete_notice(run: RunData, methods: dict[str, MethodSummary]) -> str:
    items = []
    for method, ms in methods.items():
        for seed in ms["incomplete"]:
            n = len(run.methods[method][seed].rounds)
            items.append(
                f"<li>{escape(method)}, seed {seed}: no final.json "
                f"({n} evaluated round{'s' if n != 1 else ''} so far)</li>"
            )
    if not items:
        return ""
    return (
        '<div class="warn"><strong>Incomplete runs</strong> (left out of the statistics, '
        "shown in the figures as far as they got):<ul>" + "".join(items) + "</ul></div>"
    )


def _render_figures(run: RunData, out: Path) -> list[str]:
    """Draw every PNG into ``out`` and return the ``<figure>`` blocks (captions escaped)."""
    for stale in out.glob("partition-*.png"):
        stale.unlink()
    runs = run.methods
    w = run.rolling_window
    pm = run.task.primary_metric
    if pm != "accuracy":
        return task_figures(run, out, classes=_classes(run)) + _partition_figures(run, out)
    plot_accuracy_trajectories(runs, out / "accuracy_trajectories.png")
    plot_rolling_std(runs, out / "rolling_std.png", window=w)
    plot_convergence(runs, out / "convergence.png")
    plot_per_class_accuracy(runs, out / "per_class_accuracy.png", classes=_classes(run))
    blocks = [
        figure_html(
            "accuracy_trajectories.png",
            "Test accuracy (%) per evaluated round. Thin translucent lines are individual "
            "seeds, bold lines the mean over seeds of each method (cf. paper 000 Fig. 5).",
            "Test accuracy per round",
        ),
        figure_html(
            "rolling_std.png",
            f"Rolling standard deviation of test accuracy over a window of {w} evaluated "
            "rounds, in percentage points: lower means more stable training. Thin: seeds, "
            "bold: mean (cf. paper 000 Fig. 6).",
            "Rolling standard deviation of test accuracy",
        ),
        figure_html(
            "convergence.png",
            "Convergence: validation accuracy (solid), running training accuracy over the "
            "round's local batches (dashed) and training loss per round, mean over seeds "
            "with a ±1 std band (paper 000 Fig. 4).",
            "Training and validation accuracy and training loss per round",
        ),
        figure_html(
            "per_class_accuracy.png",
            "Test accuracy (%) of each class at the final round, mean over finished seeds.",
            "Per-class test accuracy",
        ),
    ]
    return blocks + _partition_figures(run, out)


def _classes(run: RunData) -> list[str] | None:
    parts = [_first_partition(seeds) for seeds in run.methods.values()]
    return next((p.get("classes") for p in parts if p and p.get("classes")), None)


#: What the columns of a partition heatmap count, by task (default: classes).
_PARTITION_COLUMNS = {
    "multilabel": "label (columns; positives, a sample counts once per label it carries)",
    "regression": "quantile bin of the target (columns)",
}

#: The target kind (:mod:`geofl.data.targets`) of a task's histogram columns.
_TASK_TARGET_KIND = {"binary": "binary", "multilabel": "multi_hot", "regression": "real"}


def _partition_figures(run: RunData, out: Path) -> list[str]:
    """One client × class (label, target bin) heatmap per federated method."""
    columns = _PARTITION_COLUMNS.get(run.task.name, "class (columns)")
    kind = _TASK_TARGET_KIND.get(run.task.name, "class")
    blocks: list[str] = []
    for i, (method, seeds) in enumerate(run.methods.items()):
        part = _first_partition(seeds)
        if part is None or _num_clients(part) <= 1:
            continue  # centralized (pooled) methods have a single client
        seed = next(s for s, r in seeds.items() if r.partition is not None)
        name = partition_figure_name(i, method)
        label = _partition_label(part)
        plot_partition_heatmap(
            part, out / name, title=f"{method} — {label}, seed {seed}", target_kind=kind
        )
        blocks.append(
            figure_html(
                name,
                f"Client partition of <strong>{escape(method)}</strong> (seed {seed}): "
                f"training samples per client (rows) and {columns}; "
                f"{escape(label)}.",
                f"Client partition of {method}",
            )
        )
    return blocks


def _results_html(run: RunData, methods: dict[str, MethodSummary]) -> str:
    """The results table(s): the paper's layout first when its columns are given."""
    table1 = has_table1(methods)
    skip = frozenset(k for k, _ in TABLE1_COLUMNS) if table1 else frozenset()
    pm = run.task.primary_metric
    names = list({m: None for ms in methods.values() for m in _other_metrics(ms, pm)})
    rows = [_row(m, ms, run.methods.get(m, {}), skip, pm, names) for m, ms in methods.items()]
    others = "".join(f"<th>final {escape(_SHORT.get(m, m))}{metric_unit(m)}</th>" for m in names)
    short, unit = escape(_SHORT.get(pm, pm)), metric_unit(pm)
    spread = "pp" if metric_scale(pm) == 100.0 else escape(pm)
    header = (
        f"<tr><th>method</th><th>partition</th><th>seeds</th><th>final test {short}{unit}</th>"
        f"<th>best-val test {short}{unit}</th>{others}"
        f"<th>final rolling std ({spread}, w={run.rolling_window})</th>"
        "<th>MB up per round</th><th>paper</th></tr>"
    )
    select = str((run.config.get("eval") or {}).get("select_by") or pm)  # eval.select_by
    details = (
        f"<p>Mean ± sample standard deviation (ddof = 1) over finished seeds. Best-val test "
        f"{short} is the test {escape(pm)} at the round with the best validation "
        f"{escape(select)}.</p>\n"
        f"<table>{header}\n" + "\n".join(rows) + "\n</table>"
    )
    if not table1:
        return details
    return (
        "<p>In the layout of the paper's results table: our final test accuracy (mean ± "
        "sample standard deviation over finished seeds) next to the published value, one row "
        "per method in config order.</p>\n"
        + table1_html(run, methods)
        + "\n<h3>All metrics</h3>\n"
        + details
    )


def _privacy_html(run: RunData, out: Path) -> str:
    """ε of the noisy releases and the attack results; ``""`` when there are neither."""
    sentences = epsilon_sentences(run)
    attack = attack_section(run, out)
    parts = []
    if sentences:
        relation = neighbouring(run)
        parts.append(
            "<h3>Formal privacy accounting</h3>\n<p>(ε, δ) of the methods whose release adds "
            "Gaussian noise, from the privacy accountant of each run"
            + (f"; neighbouring datasets: {escape(relation)}" if relation else "")
            + '.</p>\n<ul class="epsilon">'
            + "".join(f"<li>{escape(s)}</li>" for s in sentences)
            + "</ul>"
        )
    if attack:
        parts.append("<h3>Passive attribute inference</h3>\n" + attack)
    return "<h2>Privacy</h2>\n" + "\n".join(parts) if parts else ""


def _section(heading: str, intro: str, blocks: list[str]) -> str:
    return f"<h2>{heading}</h2>\n<p>{intro}</p>\n" + "\n".join(blocks) if blocks else ""


def write_report(run_dir: Path) -> Path:
    """(Re)write ``summary.json``, the figures and ``report/index.html`` of a run.

    Args:
        run_dir: The run directory (needs ``run.json``; everything else may be partial).

    Returns:
        Path of ``RUN_DIR/report/index.html``.

    Raises:
        RunDirError: ``run_dir`` or ``run.json`` is missing, or a JSON (or ``config.yaml``)
            file is corrupt.
    """
    run_dir = Path(run_dir)
    summary = write_summary(run_dir)
    run = load_run(run_dir)
    out = run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures = _render_figures(run, out)
    paper = _section(
        "Paper figures, re-drawn from our runs",
        "Each figure of the paper named in the experiment config, drawn from our runs of "
        "the same methods (not the paper's numbers).",
        paper_figures(run, out),
    )
    weights = _section(
        "Aggregation weights",
        "Normalised weight the server gave each accepted update, per round.",
        weight_figures(run, out),
    )
    config = run_dir / "config.yaml"
    config_html = (
        f"<pre>{escape(config.read_text(encoding='utf-8'))}</pre>"
        if config.is_file()
        else "<p><em>config.yaml not found in the run directory.</em></p>"
    )
    title = escape(summary["name"])
    meta = " · ".join(
        escape(s)
        for s in (
            f"created {run.info.get('created', '?')}",
            f"geofl {run.info.get('geofl_version', '?')}",
            f"seeds {', '.join(str(s) for s in summary['seeds']) or '–'}",
        )
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>geofl report — {title}</title><style>{_CSS}</style></head>
<body>
<h1>{title}</h1>
<p class="meta">{meta}</p>
{_incomplete_notice(run, summary["methods"])}
<h2>Results</h2>
{_results_html(run, summary["methods"])}
{paired_html(summary.get("paired") or {}, {m: run.label(m) for m in run.methods})}
{communication_html(run, summary["methods"])}
{uplink_html(run, summary["methods"])}
{_privacy_html(run, out)}
{paper}
<h2>Figures</h2>
{chr(10).join(figures)}
{weights}
{governance_html(run_dir, out)}
<h2>Configuration</h2>
<details><summary>Resolved experiment config (config.yaml)</summary>
{config_html}
</details>
</body></html>
"""
    index = out / "index.html"
    write_text_atomic(index, page)
    return index
