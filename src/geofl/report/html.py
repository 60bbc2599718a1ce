"""The static HTML report of a run directory (``RUN_DIR/report/index.html`` + PNGs).

The page is self-contained (inline CSS, images referenced relatively), so the ``report/``
folder can be copied or served as is. Every string that comes from the run directory is
HTML-escaped.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path
from typing import Any

from geofl.report.plots import (
    plot_accuracy_trajectories,
    plot_convergence,
    plot_partition_heatmap,
    plot_per_class_accuracy,
    plot_rolling_std,
)
from geofl.report.summary import (
    ROLLING_WINDOW,
    MethodSummary,
    RunData,
    SeedRun,
    format_pm,
    load_run,
    write_summary,
    write_text_atomic,
)

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
"""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "method"


def _first_partition(seeds: dict[int, SeedRun]) -> dict[str, Any] | None:
    return next((r.partition for r in seeds.values() if r.partition is not None), None)


def _num_clients(partition: dict[str, Any]) -> int:
    return len(partition.get("sizes") or partition.get("histograms") or [])


def _partition_label(partition: dict[str, Any] | None) -> str:
    """E.g. ``"dirichlet (alpha=0.1), K=10"``; ``"–"`` when unknown."""
    if partition is None:
        return "–"
    label = str(partition.get("partitioner") or "?")
    params = partition.get("params")
    if isinstance(params, dict) and params:
        label += " (" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")"
    return f"{label}, K={_num_clients(partition)}"


def _paper_cell(paper: dict[str, Any] | None) -> str:
    if not paper:
        return "–"
    value = paper.get("final_test_accuracy")
    parts = [escape(str(value))] if value is not None else []
    parts += [
        f"{escape(str(k))}: {escape(str(v))}"
        for k, v in paper.items()
        if k not in ("final_test_accuracy", "source")
    ]
    source = paper.get("source")
    if source:
        parts.append(f"<small>{escape(str(source))}</small>")
    return "<br>".join(parts) or "–"


def _row(method: str, ms: MethodSummary, seeds: dict[int, SeedRun]) -> str:
    flag = ' class="incomplete"' if ms["incomplete"] else ""
    badge = '<span class="badge">incomplete</span>' if ms["incomplete"] else ""
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
        f'<td class="num">{format_pm(ms["final_test_accuracy"])}</td>',
        f'<td class="num">{format_pm(ms["best_val_test_accuracy"])}{at_round}</td>',
        f'<td class="num">{format_pm(ms["final_test_macro_f1"])}</td>',
        f'<td class="num">{format_pm(ms["final_rolling_std"])}</td>',
        f"<td>{_paper_cell(ms['paper'])}</td>",
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


def _figure(src: str, caption: str, alt: str) -> str:
    """A ``<figure>``; ``caption`` is HTML (already escaped), ``alt`` plain text."""
    return (
        f'<figure><img src="{escape(src)}" alt="{escape(alt)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


def _render_figures(run: RunData, out: Path) -> list[str]:
    """Draw every PNG into ``out`` and return the ``<figure>`` blocks (captions escaped)."""
    for stale in out.glob("partition-*.png"):
        stale.unlink()
    runs = run.methods
    w = ROLLING_WINDOW
    plot_accuracy_trajectories(runs, out / "accuracy_trajectories.png")
    plot_rolling_std(runs, out / "rolling_std.png", window=w)
    plot_convergence(runs, out / "convergence.png")
    parts = [_first_partition(seeds) for seeds in runs.values()]
    classes = next((p.get("classes") for p in parts if p and p.get("classes")), None)
    plot_per_class_accuracy(runs, out / "per_class_accuracy.png", classes=classes)
    blocks = [
        _figure(
            "accuracy_trajectories.png",
            "Test accuracy (%) per evaluated round. Thin translucent lines are individual "
            "seeds, bold lines the mean over seeds of each method (cf. paper 000 Fig. 5).",
            "Test accuracy per round",
        ),
        _figure(
            "rolling_std.png",
            f"Rolling standard deviation of test accuracy over a window of {w} evaluated "
            "rounds, in percentage points: lower means more stable training. Thin: seeds, "
            "bold: mean (cf. paper 000 Fig. 6).",
            "Rolling standard deviation of test accuracy",
        ),
        _figure(
            "convergence.png",
            "Convergence: validation accuracy (solid), running training accuracy over the "
            "round's local batches (dashed) and training loss per round, mean over seeds "
            "with a ±1 std band (paper 000 Fig. 4).",
            "Training and validation accuracy and training loss per round",
        ),
        _figure(
            "per_class_accuracy.png",
            "Test accuracy (%) of each class at the final round, mean over finished seeds.",
            "Per-class test accuracy",
        ),
    ]
    for i, (method, seeds) in enumerate(runs.items()):
        part = _first_partition(seeds)
        if part is None or _num_clients(part) <= 1:
            continue  # centralized (pooled) methods have a single client
        seed = next(s for s, r in seeds.items() if r.partition is not None)
        name = f"partition-{i:02d}-{_slug(method)}.png"
        label = _partition_label(part)
        plot_partition_heatmap(part, out / name, title=f"{method} — {label}, seed {seed}")
        blocks.append(
            _figure(
                name,
                f"Client partition of <strong>{escape(method)}</strong> (seed {seed}): "
                f"training samples per client (rows) and class (columns); "
                f"{escape(label)}.",
                f"Client partition of {method}",
            )
        )
    return blocks


def write_report(run_dir: Path) -> Path:
    """(Re)write ``summary.json``, the figures and ``report/index.html`` of a run.

    Args:
        run_dir: The run directory (needs ``run.json``; everything else may be partial).

    Returns:
        Path of ``RUN_DIR/report/index.html``.

    Raises:
        RunDirError: ``run_dir`` or ``run.json`` is missing, or a JSON file is corrupt.
    """
    run_dir = Path(run_dir)
    summary = write_summary(run_dir)
    run = load_run(run_dir)
    out = run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures = _render_figures(run, out)
    rows = [_row(m, ms, run.methods.get(m, {})) for m, ms in summary["methods"].items()]
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
    header = (
        "<tr><th>method</th><th>partition</th><th>seeds</th><th>final test acc (%)</th>"
        "<th>best-val test acc (%)</th><th>final macro-F1 (%)</th>"
        f"<th>final rolling std (pp, w={ROLLING_WINDOW})</th><th>paper</th></tr>"
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
<p>Mean ± sample standard deviation (ddof = 1) over finished seeds. Best-val test acc is the
test accuracy at the round with the best validation accuracy.</p>
<table>{header}
{chr(10).join(rows)}
</table>
<h2>Figures</h2>
{chr(10).join(figures)}
<h2>Configuration</h2>
<details><summary>Resolved experiment config (config.yaml)</summary>
{config_html}
</details>
</body></html>
"""
    index = out / "index.html"
    write_text_atomic(index, page)
    return index
