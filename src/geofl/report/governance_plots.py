"""Governance figures: a node's reputation components over rounds (000 Fig. 13)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from geofl.report.style import new_figure, save, style

__all__ = ["plot_reputation"]

_CURVES = (
    ("reputation", "Rep (Eq. 22)", "-"),
    ("contribution", "contribution (Eq. 18)", "--"),
    ("participation", "participation", "-."),
    ("consistency", "behavioural consistency (Eq. 21)", ":"),
)


def plot_reputation(rows: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    """Reputation and its three components per round for one node.

    Args:
        rows: One dict per round with ``round`` and the four component values; rows whose
            ``miss_streak`` > 0 are marked as failed rounds.
        path: PNG to write.
        title: Figure title.
    """
    fig = new_figure()
    ax = fig.subplots()
    xs = [r["round"] for r in rows]
    for key, label, ls in _CURVES:
        ax.plot(xs, [r[key] for r in rows], ls, marker="o", ms=3, label=label)
    failed = [r["round"] for r in rows if r.get("miss_streak", 0) > 0]
    for x in failed:
        ax.axvspan(x - 0.5, x + 0.5, color="tab:red", alpha=0.12, lw=0)
    ax.set_ylim(0, 1.05)
    style(ax, title + (" (shaded: failed rounds)" if failed else ""), "round", "score")
    ax.legend(fontsize=8, loc="lower left")
    return save(fig, Path(path))
