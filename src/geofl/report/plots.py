"""Figures of a run: accuracy trajectories, stability, convergence, partitions, per-class bars.

Every function draws on its own :class:`matplotlib.figure.Figure` (no pyplot, no global
state beyond a temporary rc context), writes a PNG atomically and returns its path. A method
keeps one colour in every figure (its position in the run's method order). Figures with
nothing to draw still write a PNG that says so, so a report never links a missing file.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from geofl.report.summary import ROLLING_WINDOW, SeedRun, num
from geofl.tasks.metrics import rolling_std

__all__ = [
    "plot_accuracy_trajectories",
    "plot_convergence",
    "plot_partition_heatmap",
    "plot_per_class_accuracy",
    "plot_rolling_std",
]

#: ``method -> seed -> SeedRun`` (see :class:`geofl.report.summary.RunData`).
Runs = Mapping[str, Mapping[int, SeedRun]]

_SIZE = (7.0, 4.0)
_DPI = 120
_PALETTE = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
]  # fmt: skip


def _colour(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def _figure(size: tuple[float, float] = _SIZE) -> Figure:
    return Figure(figsize=size, dpi=_DPI, layout="constrained")


def _plain(text: object) -> str:
    """Escape ``$`` so that strings from the run dir are never parsed as mathtext."""
    return str(text).replace("$", r"\$")


def _style(ax: Axes, title: str, xlabel: str, ylabel: str, grid: bool = True) -> None:
    """The house style, set per axes (no rcParams, so no global state)."""
    ax.set_title(_plain(title), fontsize=10, fontweight="bold")
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    if grid:
        ax.grid(True, alpha=0.3)
        ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(ax: Axes, **kwargs: Any) -> None:
    ax.legend(fontsize=8, frameon=False, **kwargs)


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png", dpi=_DPI)
    os.replace(tmp, path)
    return path


def _no_data(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} yet", ha="center", va="center", transform=ax.transAxes,
            color="#666666")  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])


def _mean_by_round(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std over seeds at each round (over the seeds that reached that round)."""
    rounds = sorted({float(x) for xs, _ in curves for x in xs if math.isfinite(x)})
    grid = np.full((len(curves), len(rounds)), np.nan)
    index = {r: j for j, r in enumerate(rounds)}
    for i, (xs, ys) in enumerate(curves):
        for x, y in zip(xs, ys, strict=True):
            if math.isfinite(x):
                grid[i, index[float(x)]] = y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        return np.asarray(rounds), np.nanmean(grid, axis=0), np.nanstd(grid, axis=0)


def _draw_seeds_and_mean(ax: Axes, runs: Runs, split: str, key: str, scale: float,
                         window: int | None = None, band: bool = False,
                         ls: str = "-", suffix: str = "") -> bool:  # fmt: skip
    drawn = False
    for i, (method, seeds) in enumerate(runs.items()):
        curves = []
        for run in seeds.values():
            xs, ys = run.series(split, key)
            if xs.size == 0:
                continue
            ys = ys * scale
            if window is not None:
                ys = rolling_std(ys, window)
            curves.append((xs, ys))
            if not band:
                ax.plot(xs, ys, color=_colour(i), lw=0.8, alpha=0.3)
        if not curves:
            continue
        xs, mean, std = _mean_by_round(curves)
        label = _plain(f"{method}{suffix} (n={len(curves)})")
        ax.plot(xs, mean, color=_colour(i), lw=2.0, ls=ls, label=label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if band and len(curves) > 1:
            ax.fill_between(xs, mean - std, mean + std, color=_colour(i), alpha=0.15, lw=0)
        drawn = True
    return drawn


def plot_accuracy_trajectories(runs: Runs, path: Path) -> Path:
    """Test accuracy (%) vs round: thin line per seed, bold mean per method (000 Fig. 5).

    Args:
        runs: ``method -> seed -> SeedRun``.
        path: PNG to write.
    """
    fig = _figure()
    ax = fig.add_subplot()
    if _draw_seeds_and_mean(ax, runs, "test", "accuracy", 100.0):
        _legend(ax, loc="lower right")
    else:
        _no_data(ax, "evaluated rounds")
    _style(ax, "Test accuracy per round (thin: seeds, bold: mean over seeds)",
           "communication round", "test accuracy (%)")  # fmt: skip
    return _save(fig, path)


def plot_rolling_std(runs: Runs, path: Path, window: int = ROLLING_WINDOW) -> Path:
    """Rolling std (window ``window``) of test accuracy in percentage points (000 Fig. 6).

    Args:
        runs: ``method -> seed -> SeedRun``.
        path: PNG to write.
        window: Rolling window in evaluated rounds.
    """
    fig = _figure()
    ax = fig.add_subplot()
    drawn = _draw_seeds_and_mean(ax, runs, "test", "accuracy", 100.0, window=window)
    if drawn and any(np.isfinite(np.asarray(ln.get_ydata())).any() for ln in ax.get_lines()):
        _legend(ax, loc="upper right")
        ax.set_ylim(bottom=0.0)
    else:
        _no_data(ax, f"runs with ≥ {window} evaluated rounds")
    _style(ax, f"Training stability: rolling std of test accuracy (window {window})",
           "communication round", "rolling std (percentage points)")  # fmt: skip
    return _save(fig, path)


def plot_convergence(runs: Runs, path: Path) -> Path:
    """Train/validation accuracy (%) and train loss vs round, mean ± std per method (Fig. 4).

    Training accuracy (dashed) is the running accuracy over the local training batches of
    the round, sample-weighted over clients; validation accuracy (solid) is measured on the
    shared validation split after aggregation.

    Args:
        runs: ``method -> seed -> SeedRun``.
        path: PNG to write.
    """
    fig = _figure((_SIZE[0] * 1.4, _SIZE[1]))
    ax_acc, ax_loss = fig.subplots(1, 2)
    if _draw_seeds_and_mean(ax_acc, runs, "val", "accuracy", 100.0, band=True):
        _draw_seeds_and_mean(ax_acc, runs, "train_accuracy", "", 100.0, band=True, ls="--",
                             suffix=" train")  # fmt: skip
        _legend(ax_acc, loc="lower right")
    else:
        _no_data(ax_acc, "evaluated rounds")
    if not _draw_seeds_and_mean(ax_loss, runs, "train_loss", "", 1.0, band=True):
        _no_data(ax_loss, "evaluated rounds")
    _style(ax_acc, "Accuracy: validation (solid), training (dashed)",
           "communication round", "accuracy (%)")  # fmt: skip
    _style(ax_loss, "Training loss (mean ± std over seeds)",
           "communication round", "train loss (cross-entropy)")  # fmt: skip
    return _save(fig, path)


def plot_partition_heatmap(partition: Mapping[str, Any], path: Path, title: str) -> Path:
    """Clients × classes heatmap of sample counts, annotated when at most 20 × 21 cells.

    Args:
        partition: Content of ``partition.json`` (``classes``, ``histograms``, ``sizes``).
        path: PNG to write.
        title: Axes title (e.g. method and partitioner).
    """
    counts = np.atleast_2d(np.asarray(partition.get("histograms") or [[]], dtype=np.float64))
    k, c = counts.shape
    classes = [_plain(x) for x in partition.get("classes") or []][:c]
    classes += [str(j) for j in range(len(classes), c)]
    sizes = [num(s) for s in partition.get("sizes") or []]
    height = min(max(2.6, 0.3 * k + 1.9), 8.0)
    fig = _figure((max(_SIZE[0], 0.45 * c + 2.5), height))
    ax = fig.add_subplot()
    _style(ax, title, "class", "client (training samples)", grid=False)
    if counts.size == 0:
        _no_data(ax, "partition")
        return _save(fig, path)
    im = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    cbar = fig.colorbar(im, ax=ax, shrink=0.9)
    cbar.set_label("samples", fontsize=9)
    cbar.ax.tick_params(labelsize=8)
    if k <= 20 and c <= 21:
        top = float(counts.max()) or 1.0
        for (i, j), v in np.ndenumerate(counts):
            ax.text(j, i, f"{int(v)}", ha="center", va="center", fontsize=7,
                    color="black" if v > 0.6 * top else "white")  # fmt: skip
    ax.set_xticks(range(c), classes, rotation=40, ha="right", rotation_mode="anchor")
    step = max(1, math.ceil(k / 25))
    ticks = list(range(0, k, step))
    labels = [
        f"{i} (n={sizes[i]:.0f})" if i < len(sizes) and math.isfinite(sizes[i]) else str(i)
        for i in ticks
    ]
    ax.set_yticks(ticks, labels)
    return _save(fig, path)


def _per_class_means(runs: Runs) -> dict[str, np.ndarray]:
    means: dict[str, np.ndarray] = {}
    for method, seeds in runs.items():
        rows = []
        for run in seeds.values():
            test = ((run.final or {}).get("final") or {}).get("test") or {}
            row = [num(v) for v in test.get("per_class_accuracy") or []]
            if row:
                rows.append(row)
        if rows:
            width = max(len(r) for r in rows)
            grid = np.array([r + [math.nan] * (width - len(r)) for r in rows])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN classes
                means[method] = np.nanmean(grid, axis=0) * 100.0
    return means


def plot_per_class_accuracy(runs: Runs, path: Path, classes: Sequence[str] | None = None) -> Path:
    """Grouped bars of final per-class test accuracy (%), mean over finished seeds.

    Args:
        runs: ``method -> seed -> SeedRun``; only seeds with ``final.json`` count.
        path: PNG to write.
        classes: Class names (default: class indices).
    """
    means = _per_class_means(runs)
    c = max((m.size for m in means.values()), default=0)
    names = [_plain(x) for x in classes or []][:c]
    names += [str(j) for j in range(len(names), c)]
    order = {m: i for i, m in enumerate(runs)}
    fig = _figure((max(_SIZE[0], 0.55 * c + 2.5), _SIZE[1] + 0.6))
    ax = fig.add_subplot()
    _style(ax, "Per-class test accuracy at the final round (mean over seeds)",
           "", "final test accuracy (%)")  # fmt: skip
    if not means:
        _no_data(ax, "finished runs")
        return _save(fig, path)
    bar_w = 0.8 / len(means)
    for g, (method, m) in enumerate(means.items()):
        xs = np.arange(m.size) + (g - (len(means) - 1) / 2) * bar_w
        ax.bar(
            xs, np.nan_to_num(m), width=bar_w, color=_colour(order[method]), label=_plain(method)
        )
    ax.set_xticks(range(c), names, rotation=40, ha="right", rotation_mode="anchor")
    ax.set_ylim(0.0, 105.0)
    ax.set_yticks(range(0, 101, 20))
    ax.grid(False, axis="x")
    fig.legend(loc="outside lower center", ncols=min(len(means), 4), fontsize=8, frameon=False)
    return _save(fig, path)
