"""Figures of the privacy and aggregation analyses (000 §4.4–4.6).

* :func:`plot_attack_auc` — grouped bars of the passive attribute-inference AUC per method
  (000 Fig. 9): ours solid, the paper's hatched, chance level dashed.
* :func:`plot_aggregation_weights` — clients × rounds heatmap of the normalised aggregation
  weights a server gave each accepted update (e.g. the JS-consistency weights, 000 Eq. 15–16).

Same conventions as :mod:`geofl.report.plots`: own Figure, atomic PNG, a PNG that says so
when there is nothing to draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from geofl.report.run_data import SeedRun, num
from geofl.report.style import legend, new_figure, no_data, plain, save, style

__all__ = [
    "ATTRIBUTES",
    "RISK_COLOURS",
    "plot_aggregation_weights",
    "plot_attack_auc",
    "risk_levels",
    "weight_matrix",
]

#: Attributes of the passive attack (key, display name, bar colour).
ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    ("high_risk", "high-risk", "#d62728"),
    ("low_entropy", "low-entropy", "#1f77b4"),
)

#: Tick-label colour of a client's risk level (000 Eq. 3–4).
RISK_COLOURS = {"high": "#c0392b", "mid": "#d68910", "low": "#1e8449"}


def plot_attack_auc(
    ours: Mapping[str, Mapping[str, float]],
    path: Path,
    *,
    paper: Mapping[str, Mapping[str, float]] | None = None,
    title: str = "Passive attribute inference: attack ROC-AUC (0.5 = chance)",
) -> Path:
    """Grouped bars: per method, the AUC of each attribute, ours solid, the paper's hatched.

    Args:
        ours: ``method -> attribute -> AUC`` (attributes of :data:`ATTRIBUTES`; NaN or a
            missing key: no bar, marked "n/a"). Methods are drawn in this order.
        path: PNG to write.
        paper: Published values in the same form; a hatched, outlined bar next to ours
            where present.
        title: Axes title.
    """
    paper = paper or {}
    methods = list(ours)
    with_paper = any(
        math.isfinite(num(paper.get(m, {}).get(a))) for m in methods for a, _, _ in ATTRIBUTES
    )
    sources = ("ours", "paper") if with_paper else ("ours",)
    slots = [(a, src) for a, _, _ in ATTRIBUTES for src in sources]
    fig = new_figure((max(7.0, 1.3 * len(methods) * len(slots) / 2 + 2.5), 4.4))
    ax = fig.add_subplot()
    style(ax, title, "", "attack ROC-AUC")
    if not methods:
        no_data(ax, "attacked methods")
        return save(fig, path)
    colours = {a: c for a, _, c in ATTRIBUTES}
    width = 0.8 / len(slots)
    for j, (attr, src) in enumerate(slots):
        xs = np.arange(len(methods)) + (j - (len(slots) - 1) / 2) * width
        table = ours if src == "ours" else paper
        for x, m in zip(xs, methods, strict=True):
            v = num(table.get(m, {}).get(attr))
            if not math.isfinite(v):
                if src == "ours":
                    ax.text(x, 0.02, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
                continue
            if src == "ours":
                ax.bar(x, v, width=width, color=colours[attr])
            else:
                ax.bar(
                    x,
                    v,
                    width=width,
                    facecolor="white",
                    edgecolor=colours[attr],
                    hatch="///",
                    lw=1.0,
                )
            ax.text(x, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(0.5, color="#444444", ls="--", lw=1.0)
    ax.set_ylim(0.0, 1.25)  # room for the value labels under the legend
    ax.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    tilt = 20 if len(methods) > 4 else 0
    ax.set_xticks(
        range(len(methods)),
        [plain(m) for m in methods],
        rotation=tilt,
        ha="right" if tilt else "center",
        rotation_mode="anchor",
    )
    ax.set_xlim(-0.5, len(methods) - 0.5)
    ax.grid(False, axis="x")
    handles = _attack_handles(with_paper)
    legend(ax, handles=handles, loc="upper right", ncols=min(len(handles), 3))
    return save(fig, path)


def _attack_handles(with_paper: bool) -> list[Patch | Line2D]:
    """Legend entries of the attack chart: solid (ours), hatched (paper), chance line."""
    handles: list[Patch | Line2D] = []
    for _, name, c in ATTRIBUTES:
        handles.append(Patch(facecolor=c, label=f"{name} (ours)"))
        if with_paper:
            handles.append(
                Patch(facecolor="white", edgecolor=c, hatch="///", label=f"{name} (paper)")
            )
    handles.append(Line2D([], [], color="#444444", ls="--", lw=1.0, label="chance (0.5)"))
    return handles


def weight_matrix(run: SeedRun, num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """Aggregation weight of each client per round.

    Args:
        run: One seed of a method; its ``rounds.jsonl`` records carry ``participants``
            (accepted clients) and ``weights`` (aligned with them).
        num_clients: K; clients with larger ids are ignored.

    Returns:
        ``(rounds [T], weights [K, T])``: every round from the first to the last record,
        NaN where the client had no accepted update (or the round has no record).
    """
    records = run.rounds
    if not records:
        return np.zeros(0), np.full((num_clients, 0), np.nan)
    first = records[0].round
    last = max(r.round for r in records)
    rounds = np.arange(first, last + 1)
    grid = np.full((num_clients, rounds.size), np.nan)
    for r in records:
        col = r.round - first
        for k, w in zip(r.participants, r.weights, strict=False):
            if 0 <= k < num_clients:
                grid[k, col] = num(w)
    return rounds, grid


def risk_levels(run: SeedRun) -> dict[int, str]:
    """Each client's risk level from the release logs (``client_log[id][step]["level"]``)."""
    levels: dict[int, str] = {}
    for record in run.rounds:
        for cid, log in record.client_log.items():
            if not str(cid).isdigit() or int(cid) in levels or not isinstance(log, dict):
                continue
            for report in log.values():
                level = report.get("level") if isinstance(report, dict) else None
                if isinstance(level, str):
                    levels[int(cid)] = level
                    break
    return levels


def plot_aggregation_weights(
    seeds: Mapping[int, SeedRun],
    path: Path,
    *,
    num_clients: int | None = None,
    title: str = "Aggregation weights per round",
) -> Path:
    """Clients × rounds heatmap of the normalised aggregation weight, one panel per seed.

    A cell is blank where the client's update was not accepted that round (not sampled,
    lost or rejected). When the release logs carry a risk level, the client's tick label
    says it and is coloured by it (:data:`RISK_COLOURS`).

    Args:
        seeds: ``seed -> SeedRun`` of one method.
        path: PNG to write.
        num_clients: K (default: the largest client id seen + 1).
        title: Figure title.
    """
    seen = [k for run in seeds.values() for r in run.rounds for k in r.participants]
    k = max(num_clients or 0, max(seen, default=-1) + 1)
    panels = [(s, *weight_matrix(run, k)) for s, run in seeds.items()]
    panels = [p for p in panels if p[1].size] or panels[:1]
    height = min(max(2.2, 0.22 * k + 1.3), 6.0)
    fig = new_figure((7.5, height * max(len(panels), 1) + 0.4))
    fig.suptitle(plain(title), fontsize=10, fontweight="bold")
    if not panels or k == 0 or not any(p[1].size for p in panels):
        ax = fig.add_subplot()
        no_data(ax, "aggregated rounds")
        return save(fig, path)
    top = max(float(np.nanmax(g)) if np.isfinite(g).any() else 0.0 for _, _, g in panels)
    cmap = mpl.colormaps["viridis"].with_extremes(bad="#f2f2f2")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    image = None
    for ax, (seed, rounds, grid) in zip(axes, panels, strict=True):
        style(ax, f"seed {seed}", "communication round", "client", grid=False)
        if not rounds.size:
            no_data(ax, "aggregated rounds")
            continue
        image = ax.imshow(
            np.ma.masked_invalid(grid),
            aspect="auto",
            interpolation="nearest",
            cmap=cmap,
            vmin=0.0,
            vmax=top or 1.0,
            extent=(rounds[0] - 0.5, rounds[-1] + 0.5, k - 0.5, -0.5),
        )
        _client_ticks(ax, k, risk_levels(seeds[seed]))
    if image is not None:
        cbar = fig.colorbar(image, ax=list(axes), shrink=0.9)
        cbar.set_label(f"weight (uniform 1/K = {1 / k:.3g})", fontsize=9)
        cbar.ax.tick_params(labelsize=8)
    return save(fig, path)


def _client_ticks(ax: Axes, k: int, levels: Mapping[int, str]) -> None:
    step = max(1, math.ceil(k / 25))
    ticks: Sequence[int] = list(range(0, k, step))
    ax.set_yticks(ticks, [f"{i} ({levels[i]})" if i in levels else str(i) for i in ticks])
    for tick, i in zip(ax.get_yticklabels(), ticks, strict=True):
        if i in levels:
            tick.set_color(RISK_COLOURS.get(levels[i], "#222222"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
