"""Figures of a run: accuracy trajectories, stability, convergence, partitions, per-class bars.

Every function draws on its own :class:`matplotlib.figure.Figure` (no pyplot, no global
state beyond a temporary rc context), writes a PNG atomically and returns its path. A method
keeps one colour in every figure (its position in the run's method order). Figures with
nothing to draw still write a PNG that says so, so a report never links a missing file.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from geofl.io import atomic_write
from geofl.report.run_data import ROLLING_WINDOW, SeedRun, num
from geofl.report.stats import metric_scale, metric_unit
from geofl.tasks.metrics import rolling_std

__all__ = [
    "PARTITION_AXIS",
    "Runs",
    "colour",
    "legend",
    "new_figure",
    "no_data",
    "plain",
    "plot_accuracy_trajectories",
    "plot_convergence",
    "plot_partition_heatmap",
    "plot_per_class_accuracy",
    "plot_rolling_std",
    "save",
    "style",
]

#: ``method -> seed -> SeedRun`` (see :class:`geofl.report.summary.RunData`).
Runs = Mapping[str, Mapping[int, SeedRun]]

_SIZE = (7.0, 4.0)
_DPI = 120
_PALETTE = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
]  # fmt: skip


def colour(i: int) -> str:
    """Colour of the ``i``-th method of a run (the palette repeats after 10)."""
    return _PALETTE[i % len(_PALETTE)]


def new_figure(size: tuple[float, float] = _SIZE) -> Figure:
    """A constrained-layout Figure in the house size and resolution (no pyplot)."""
    return Figure(figsize=size, dpi=_DPI, layout="constrained")


def plain(text: object) -> str:
    """Escape ``$`` so that strings from the run dir are never parsed as mathtext."""
    return str(text).replace("$", r"\$")


def style(ax: Axes, title: str, xlabel: str, ylabel: str, grid: bool = True) -> None:
    """The house style, set per axes (no rcParams, so no global state)."""
    ax.set_title(plain(title), fontsize=10, fontweight="bold")
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    if grid:
        ax.grid(True, alpha=0.3)
        ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def legend(ax: Axes, **kwargs: Any) -> None:
    """A small frameless legend on ``ax`` (``kwargs`` go to :meth:`Axes.legend`)."""
    ax.legend(fontsize=8, frameon=False, **kwargs)


def save(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as PNG to ``path`` atomically (temporary file + rename); returns it."""
    return atomic_write(Path(path), lambda fh: fig.savefig(fh, format="png", dpi=_DPI), sync=False)


def no_data(ax: Axes, what: str) -> None:
    """Replace the axes content by a grey "no ``what`` yet" note."""
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
                         ls: str = "-", suffix: str = "",
                         colours: Mapping[str, int] | None = None) -> bool:  # fmt: skip
    """Thin line per seed and bold mean per method; False when nothing was drawn.

    Rounds where the metric is undefined (e.g. not evaluated, ``eval.every > 1``) are
    skipped, so lines join the evaluated rounds and rolling windows count evaluated rounds.
    ``colours`` maps a method to its palette index (default: its position in ``runs``).
    """
    drawn = False
    for i, (method, seeds) in enumerate(runs.items()):
        c = colour(colours.get(method, i) if colours else i)
        curves = []
        for run in seeds.values():
            xs, ys = run.series(split, key)
            keep = np.isfinite(xs) & np.isfinite(ys)
            xs, ys = xs[keep], ys[keep]
            if xs.size == 0:
                continue
            ys = ys * scale
            if window is not None:
                ys = rolling_std(ys, window)
            curves.append((xs, ys))
            if not band:
                ax.plot(xs, ys, color=c, lw=0.8, alpha=0.3)
        if not curves:
            continue
        xs, mean, std = _mean_by_round(curves)
        label = plain(f"{method}{suffix} (n={len(curves)})")
        ax.plot(xs, mean, color=c, lw=2.0, ls=ls, label=label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if band and len(curves) > 1:
            ax.fill_between(xs, mean - std, mean + std, color=c, alpha=0.15, lw=0)
        drawn = True
    return drawn


def plot_accuracy_trajectories(
    runs: Runs,
    path: Path,
    *,
    title: str | None = None,
    colours: Mapping[str, int] | None = None,
    metric: str = "accuracy",
) -> Path:
    """Test accuracy (%) — or the task's ``metric`` — vs round: thin line per seed, bold
    mean per method (000 Fig. 5).

    Args:
        runs: ``method -> seed -> SeedRun`` (the keys label the legend).
        path: PNG to write.
        title: Axes title (default: a description of the plot).
        colours: ``method -> palette index``, to keep a method's colour when ``runs`` is a
            subset of the run's methods (default: position in ``runs``).
        metric: The test metric drawn (the task's primary metric).
    """
    fig = new_figure()
    ax = fig.add_subplot()
    if _draw_seeds_and_mean(ax, runs, "test", metric, metric_scale(metric), colours=colours):
        legend(ax, loc="lower right")
    else:
        no_data(ax, "evaluated rounds")
    style(ax, title or f"Test {metric} per round (thin: seeds, bold: mean over seeds)",
           "communication round", f"test {metric}{metric_unit(metric)}")  # fmt: skip
    return save(fig, path)


def plot_rolling_std(
    runs: Runs,
    path: Path,
    window: int = ROLLING_WINDOW,
    *,
    title: str | None = None,
    colours: Mapping[str, int] | None = None,
    metric: str = "accuracy",
) -> Path:
    """Rolling std (window ``window``) of test accuracy in percentage points — or of the
    task's ``metric`` in its units (000 Fig. 6).

    Args:
        runs: ``method -> seed -> SeedRun`` (the keys label the legend).
        path: PNG to write.
        window: Rolling window in evaluated rounds.
        title: Axes title (default: a description of the plot with the window).
        colours: ``method -> palette index`` (see :func:`plot_accuracy_trajectories`).
        metric: The test metric (the task's primary metric).
    """
    fig = new_figure()
    ax = fig.add_subplot()
    drawn = _draw_seeds_and_mean(
        ax, runs, "test", metric, metric_scale(metric), window=window, colours=colours
    )
    if drawn and any(np.isfinite(np.asarray(ln.get_ydata())).any() for ln in ax.get_lines()):
        legend(ax, loc="upper right")
        ax.set_ylim(bottom=0.0)
    else:
        no_data(ax, f"runs with ≥ {window} evaluated rounds")
    unit = "percentage points" if metric_scale(metric) == 100.0 else metric
    style(ax, title or f"Training stability: rolling std of test {metric} (window {window})",
           "communication round", f"rolling std ({unit})")  # fmt: skip
    return save(fig, path)


def plot_convergence(runs: Runs, path: Path, *, metric: str = "accuracy") -> Path:
    """Train/validation accuracy (%) — or the task's ``metric`` — and train loss vs round,
    mean ± std per method (Fig. 4).

    Training accuracy (dashed) is the running accuracy over the local training batches of
    the round, sample-weighted over clients; validation accuracy (solid) is measured on the
    shared validation split after aggregation.

    Args:
        runs: ``method -> seed -> SeedRun``.
        path: PNG to write.
        metric: The task's primary metric.
    """
    fig = new_figure((_SIZE[0] * 1.4, _SIZE[1]))
    ax_acc, ax_loss = fig.subplots(1, 2)
    scale = metric_scale(metric)
    if _draw_seeds_and_mean(ax_acc, runs, "val", metric, scale, band=True):
        _draw_seeds_and_mean(ax_acc, runs, f"train_{metric}", "", scale, band=True, ls="--",
                             suffix=" train")  # fmt: skip
        legend(ax_acc, loc="lower right")
    else:
        no_data(ax_acc, "evaluated rounds")
    if not _draw_seeds_and_mean(ax_loss, runs, "train_loss", "", 1.0, band=True):
        no_data(ax_loss, "evaluated rounds")
    loss = "train loss (cross-entropy)" if metric == "accuracy" else "train loss"
    style(ax_acc, f"{metric.capitalize()}: validation (solid), training (dashed)",
           "communication round", f"{metric}{metric_unit(metric)}")  # fmt: skip
    style(ax_loss, "Training loss (mean ± std over seeds)",
           "communication round", loss)  # fmt: skip
    return save(fig, path)


#: The x-axis of a partition heatmap (what its columns are), by target kind
#: (:mod:`geofl.data.targets`); ``class`` for any other kind.
PARTITION_AXIS = {"multi_hot": "label", "real": "target bin"}


def plot_partition_heatmap(
    partition: Mapping[str, Any], path: Path, title: str, *, target_kind: str = "class"
) -> Path:
    """Clients × classes heatmap of sample counts, annotated when at most 20 × 21 cells.

    Args:
        partition: Content of ``partition.json`` (``classes``, ``histograms``, ``sizes``).
        path: PNG to write.
        title: Axes title (e.g. method and partitioner).
        target_kind: The dataset's target kind; names the x-axis (:data:`PARTITION_AXIS`).
    """
    counts = np.atleast_2d(np.asarray(partition.get("histograms") or [[]], dtype=np.float64))
    k, c = counts.shape
    classes = [plain(x) for x in partition.get("classes") or []][:c]
    classes += [str(j) for j in range(len(classes), c)]
    sizes = [num(s) for s in partition.get("sizes") or []]
    height = min(max(2.6, 0.3 * k + 1.9), 8.0)
    fig = new_figure((max(_SIZE[0], 0.45 * c + 2.5), height))
    ax = fig.add_subplot()
    xlabel = PARTITION_AXIS.get(target_kind, "class")
    style(ax, title, xlabel, "client (training samples)", grid=False)
    if counts.size == 0:
        no_data(ax, "partition")
        return save(fig, path)
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
    return save(fig, path)


def _per_class_means(runs: Runs, key: str) -> dict[str, np.ndarray]:
    means: dict[str, np.ndarray] = {}
    for method, seeds in runs.items():
        rows = []
        for run in seeds.values():
            test = ((run.final or {}).get("final") or {}).get("test") or {}
            row = [num(v) for v in test.get(f"per_class_{key}") or []]
            if row:
                rows.append(row)
        if rows:
            width = max(len(r) for r in rows)
            grid = np.array([r + [math.nan] * (width - len(r)) for r in rows])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN classes
                means[method] = np.nanmean(grid, axis=0) * metric_scale(key)
    return means


def plot_per_class_accuracy(
    runs: Runs, path: Path, classes: Sequence[str] | None = None, *, metric: str = "accuracy"
) -> Path:
    """Grouped bars of final per-class test accuracy (%) — or the task's per-class
    ``metric`` (``per_class_<metric>``: multi-label AP, per-output RMSE) — mean over
    finished seeds.

    Args:
        runs: ``method -> seed -> SeedRun``; only seeds with ``final.json`` count.
        path: PNG to write.
        classes: Class names (default: class indices).
        metric: The per-class vector drawn.
    """
    means = _per_class_means(runs, metric)
    c = max((m.size for m in means.values()), default=0)
    names = [plain(x) for x in classes or []][:c]
    names += [str(j) for j in range(len(names), c)]
    order = {m: i for i, m in enumerate(runs)}
    fig = new_figure((max(_SIZE[0], 0.55 * c + 2.5), _SIZE[1] + 0.6))
    ax = fig.add_subplot()
    style(ax, f"Per-class test {metric} at the final round (mean over seeds)",
           "", f"final test {metric}{metric_unit(metric)}")  # fmt: skip
    if not means:
        no_data(ax, "finished runs")
        return save(fig, path)
    bar_w = 0.8 / len(means)
    for g, (method, m) in enumerate(means.items()):
        xs = np.arange(m.size) + (g - (len(means) - 1) / 2) * bar_w
        ax.bar(xs, np.nan_to_num(m), width=bar_w, color=colour(order[method]), label=plain(method))
    ax.set_xticks(range(c), names, rotation=40, ha="right", rotation_mode="anchor")
    if metric_scale(metric) == 100.0:
        ax.set_ylim(0.0, 105.0)
        ax.set_yticks(range(0, 101, 20))
    ax.grid(False, axis="x")
    fig.legend(loc="outside lower center", ncols=min(len(means), 4), fontsize=8, frameon=False)
    return save(fig, path)
