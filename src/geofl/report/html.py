"""The static HTML report of a run directory (``RUN_DIR/report/index.html`` + PNGs).

The page is self-contained (inline CSS, images referenced relatively), so the ``report/``
folder can be copied or served as is. Every string that comes from the run directory is
HTML-escaped. Methods appear by their labels (``run.json["labels"]``).

Sections (each in the page's contents line): results (in the layout of the paper's table
when the paper values carry its columns, :mod:`geofl.report.paper`, then every metric per
method, :mod:`geofl.report.results`), paired statistics, communication, privacy (ε of noisy
releases and the attribute-inference attack, :mod:`geofl.report.privacy`), the paper's
figures re-drawn from our runs, the run-wide figures (:mod:`geofl.report.figures`),
aggregation weights, governance, run facts (:mod:`geofl.report.facts`) and the config.
Sections and figures without data are left out.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from geofl.report.communication import communication_html
from geofl.report.facts import facts_html
from geofl.report.figures import run_figures
from geofl.report.fragments import slug
from geofl.report.governance import governance_html
from geofl.report.hierarchy import hierarchy_html
from geofl.report.paired import paired_html
from geofl.report.paper import paper_figures
from geofl.report.privacy import (
    attack_section,
    epsilon_sentences,
    neighbouring,
    randomness_sentence,
    weight_figures,
)
from geofl.report.results import incomplete_notice, results_html
from geofl.report.run_data import RunData, load_run
from geofl.report.summary import RunSummary, write_summary, write_text_atomic
from geofl.report.uplink import uplink_html

__all__ = ["write_report"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:1100px;
margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
h1{margin-bottom:.2rem}.meta{color:#666;font-size:.9rem;margin-top:0}
nav.toc{font-size:.9rem;margin:.5rem 0 1rem}nav.toc a{margin-right:.8rem}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:1rem 0}
th,td{border-bottom:1px solid #ddd;padding:.4rem .55rem;text-align:left;vertical-align:top}
th{background:#f4f6f8}td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
table.facts th{width:12rem}
tr.incomplete{background:#fff8e6}small{color:#666}
.badge{display:inline-block;background:#f0ad4e;color:#fff;border-radius:3px;padding:0 .35rem;
font-size:.75rem;margin-left:.3rem}
.warn{background:#fff8e6;border-left:4px solid #f0ad4e;padding:.5rem 1rem;margin:1rem 0}
.note{color:#555;font-size:.9rem}
figure{margin:1.5rem 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#444;font-size:.9rem;margin-top:.3rem}
pre{background:#f6f8fa;padding:1rem;overflow-x:auto;font-size:.85rem}
details summary{cursor:pointer;font-weight:600}
ul.epsilon li{margin:.3rem 0}
"""


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
            + f"<p>{escape(randomness_sentence(run) or '')}</p>"
        )
    if attack:
        parts.append("<h3>Passive attribute inference</h3>\n" + attack)
    return "<h2>Privacy</h2>\n" + "\n".join(parts) if parts else ""


def _section(heading: str, intro: str, blocks: list[str]) -> str:
    return f"<h2>{heading}</h2>\n<p>{intro}</p>\n" + "\n".join(blocks) if blocks else ""


def _figures_html(run: RunData, out: Path) -> str:
    """The run-wide figures and one line per figure left out for lack of data."""
    blocks, notes = run_figures(run, out)
    notes_html = "".join(f'<p class="note">{n}</p>' for n in notes)
    if not blocks and not notes:
        return ""
    return "<h2>Figures</h2>\n" + notes_html + "\n".join(blocks)


def _config_html(run_dir: Path) -> str:
    config = run_dir / "config.yaml"
    body = (
        f"<pre>{escape(config.read_text(encoding='utf-8'))}</pre>"
        if config.is_file()
        else "<p><em>config.yaml not found in the run directory.</em></p>"
    )
    return (
        "<h2>Configuration</h2>\n<details><summary>Resolved experiment config (config.yaml)"
        f"</summary>\n{body}\n</details>"
    )


def _with_contents(body: str) -> tuple[str, str]:
    """Give every ``<h2>`` an id; returns ``(contents line, body)``."""
    links: list[str] = []

    def anchor(match: re.Match[str]) -> str:
        attrs, title = match.group(1), match.group(2)
        found = re.search(r'id="([^"]+)"', attrs)
        ident = found.group(1) if found else slug(re.sub(r"<[^>]+>", "", title)).lower()
        links.append(f'<a href="#{ident}">{title}</a>')
        return match.group(0) if found else f'<h2 id="{ident}">{title}</h2>'

    body = re.sub(r"<h2([^>]*)>(.*?)</h2>", anchor, body)
    return '<nav class="toc">' + "".join(links) + "</nav>", body


def _paired(run: RunData, summary: RunSummary, names: dict[str, str]) -> str:
    """The paired statistics (``compare_to``); one line when one seed makes them undefined."""
    paired = summary.get("paired") or {}
    if paired and run.single_seed:
        base = names.get(str(paired.get("baseline")), str(paired.get("baseline")))
        return (
            f'<p class="note">Paired t-tests against {escape(base)} need at least two '
            "matched seeds; this run has one.</p>"
        )
    return paired_html(paired, names)


def _body(run: RunData, summary: RunSummary, out: Path) -> str:
    """Every section of the page, in order (empty sections are ``""``)."""
    methods, names = summary["methods"], run.display_names()
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
    sections = [
        incomplete_notice(run, methods),
        "<h2>Results</h2>\n" + results_html(run, methods),
        _paired(run, summary, names),
        communication_html(run, methods),
        uplink_html(run, methods),
        hierarchy_html(run, methods, out),
        _privacy_html(run, out),
        paper,
        _figures_html(run, out),
        weights,
        governance_html(run.run_dir, out, names),
        facts_html(run),
        _config_html(run.run_dir),
    ]
    return "\n".join(s for s in sections if s)


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
    contents, body = _with_contents(_body(run, summary, out))
    title = escape(summary["name"])
    seeds = ", ".join(str(s) for s in summary["seeds"]) or "–"
    meta = " · ".join(
        escape(s)
        for s in (
            f"created {run.info.get('created', '?')}",
            f"geofl {run.info.get('geofl_version', '?')}",
            f"seed {seeds}" if len(summary["seeds"]) == 1 else f"seeds {seeds}",
        )
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>geofl report — {title}</title><style>{_CSS}</style></head>
<body>
<h1>{title}</h1>
<p class="meta">{meta}</p>
{contents}
{body}
</body></html>
"""
    index = out / "index.html"
    write_text_atomic(index, page)
    return index
