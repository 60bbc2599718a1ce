"""The report's communication table (001 §6.1.4): bytes per round and in total, rounds to a
target performance and the bytes moved until then, mean ± std over finished seeds."""

from __future__ import annotations

from html import escape
from typing import Any

from geofl.report.summary import NOT_REACHED, MethodSummary, RunData, Stat, format_pm, make_stat

__all__ = ["communication_html"]

#: Bytes → MB (10⁶ bytes).
MB = 1e-6


def _traffic(run: RunData, method: str, seeds: list[int]) -> tuple[Stat, Stat, Stat]:
    """Rounds run, bytes per round and total bytes (up + down) over the finished seeds."""
    runs = [run.methods[method][s].rounds for s in seeds if s in run.methods[method]]
    runs = [r for r in runs if r]
    totals = [float(sum(rec.bytes_up + rec.bytes_down for rec in r)) for r in runs]
    return (
        make_stat([float(len(r)) for r in runs]),
        make_stat([t / len(r) for t, r in zip(totals, runs, strict=True)]),
        make_stat(totals),
    )


def _pm_rounds(stat: Stat) -> str:
    """Rounds as integers when every seed ran a whole number of them (the usual case)."""
    whole = all(float(v).is_integer() for v in stat["values"]) and float(stat["std"]).is_integer()
    return format_pm(stat, scale=1.0, digits=0 if whole else 1)


def _target_cells(target: dict[str, Any] | None) -> list[str]:
    if target is None:
        return []
    per_seed = target.get("per_seed") or {}
    missed = [s for s, r in per_seed.items() if r == NOT_REACHED]
    note = (
        f"<br><small>{NOT_REACHED} in seed{'s' if len(missed) > 1 else ''} "
        f"{escape(', '.join(missed))}</small>"
        if missed
        else ""
    )
    rounds = _pm_rounds(target["rounds"]) if target["rounds"]["n"] else NOT_REACHED
    return [
        f'<td class="num">{rounds}{note}</td>',
        f'<td class="num">{format_pm(target["bytes_total"], scale=MB)}</td>',
    ]


def communication_html(run: RunData, methods: dict[str, MethodSummary]) -> str:
    """``<h2>Communication</h2>`` and a table of each method's traffic; ``""`` without
    finished seeds."""
    if not any(ms["seeds_done"] for ms in methods.values()):
        return ""
    target = next((ms["target"] for ms in methods.values() if "target" in ms), None)
    head = ["method", "rounds run", "MB per round (up + down)", "total MB (up + down)"]
    intro = "Bytes on the wire (001 §6.1.4: Comm_total = Σ_r Comm_round)"
    if target is not None:
        sign = "≤" if target.get("direction") == "min" else "≥"
        what = f"{target['split']} {target['metric']} {sign} {target['value']:g}"
        head += [f"rounds to {escape(what)}", "MB until then"]
        intro += "; rounds to the target performance and the bytes moved until it was reached"
    rows, names = [], run.display_names()
    for method, ms in methods.items():
        rounds, per_round, total = _traffic(run, method, [int(s) for s in ms["seeds_done"]])
        cells = [
            f"<td>{escape(names.get(method, method))}</td>",
            f'<td class="num">{_pm_rounds(rounds)}</td>',
            f'<td class="num">{format_pm(per_round, scale=MB)}</td>',
            f'<td class="num">{format_pm(total, scale=MB)}</td>',
        ]
        if target is not None:
            cells += _target_cells(ms.get("target")) or ['<td class="num">–</td>'] * 2
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = "".join(f"<th>{h}</th>" for h in head)
    return (
        f"<h2>Communication</h2>\n<p>{intro}.</p>\n<table><thead><tr>{header}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
