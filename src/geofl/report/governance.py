"""The governance section of a report: per governed run, the round records and reputation.

Reads only ``governance.jsonl`` (the readable log the governance process writes next to its
ledger), so rendering needs no chain; ``geofl ledger verify`` checks that log's records
against the ledger itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from geofl.io import read_jsonl
from geofl.report.fragments import figure_html, slug
from geofl.report.governance_plots import plot_reputation

__all__ = ["governance_html"]


def _rows(entries: list[dict[str, Any]]) -> str:
    out = []
    for e in entries:
        com = e.get("committee")
        members = ", ".join(str(m) for m in com["members"]) if com else "(previous)"
        agg = (e.get("aggregation") or {}).get("model_hash", "")
        perms = "; ".join(
            f"client{p['node']} {p['old']}→{p['new']} ({escape(str(p['reason']))}, "
            f"approved by {p['approvers']}{'' if p['applied'] else ', not applied'})"
            for p in e.get("permissions", [])
        )
        out.append(
            f"<tr><td>{e['round']}</td><td>[{members}]</td><td><code>{agg[:12]}…</code></td>"
            f"<td>{perms or '–'}</td></tr>"
        )
    return "\n".join(out)


def _lowest_node(entries: list[dict[str, Any]]) -> int | None:
    """The governed node whose reputation fell lowest (the one worth plotting)."""
    best: tuple[float, int] | None = None
    for e in entries:
        for node, comp in e.get("reputation", {}).items():
            key = (float(comp["reputation"]), int(node))
            best = key if best is None or key < best else best
    return None if best is None else best[1]


def governance_html(run_dir: Path, out: Path, labels: Mapping[str, str] | None = None) -> str:
    """The report's governance section; ``""`` when no run was governed.

    Args:
        run_dir: The run directory.
        out: The report folder.
        labels: ``method -> display name`` (default: the method names).
    """
    blocks = []
    labels = labels or {}
    for log in sorted(Path(run_dir).glob("methods/*/seed-*/governance.jsonl")):
        seed_dir = log.parent
        method = seed_dir.parent.name
        name = f"{labels.get(method, method)}, {seed_dir.name.replace('-', ' ')}"
        records = read_jsonl(log)
        rule = next((e for e in records if e.get("event") == "rule"), {})
        entries = [e for e in records if "round" in e]
        blocks.append(
            f"<h3>{escape(name)} — rule {escape(str(rule.get('label', '?')))}</h3>\n"
            "<table><tr><th>round</th><th>committee</th><th>aggregation commitment</th>"
            f"<th>permission changes</th></tr>\n{_rows(entries)}\n</table>"
        )
        node = _lowest_node(entries)
        if node is not None:
            rows = [
                {"round": e["round"], **e["reputation"][str(node)]}
                for e in entries
                if str(node) in e.get("reputation", {})
            ]
            png = out / f"reputation-{slug(method)}-{seed_dir.name}-client{node}.png"
            plot_reputation(rows, png, title=f"{name}, client {node}")
            blocks.append(
                figure_html(
                    png.name,
                    f"Reputation components of client {node} (the lowest reputation reached "
                    "in this run) over rounds, cf. paper 000 Fig. 13; shaded: failed rounds.",
                    f"reputation of client {node}",
                )
            )
    if not blocks:
        return ""
    return (
        "<h2>Governance</h2>\n<p>Per governed run: the committee elected each round, the "
        "aggregation commitment written to the ledger and the permission changes approved "
        "on chain (paper 000 §3.5, Tables 2–3). <code>geofl ledger verify RUN_DIR</code> "
        "replays the ledger and checks these records against it.</p>\n" + "\n".join(blocks)
    )
