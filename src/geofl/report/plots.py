"""Line figures of a run: test-metric trajectories, stability (rolling std), convergence.

Every function draws on its own :class:`matplotlib.figure.Figure` in the house style of
:mod:`geofl.report.style`, writes a PNG atomically and returns its path. Figures with
nothing to draw still write a PNG that says so, so a caller never links a missing file; the
report leaves them out instead (:func:`has_series`, :func:`has_rolling_std`).

A run of one seed per method is drawn as one line per method, without seed lines, bands or
"n =" in the legend; otherwise thin lines are seeds and bold lines the mean over seeds.
The per-class figures live in :mod:`geofl.report.class_plots` (re-exported here).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from geofl.report.class_plots import (
    PARTITION_AXIS,
    has_per_class,
    plot_partition_heatmap,
    plot_per_class_accuracy,
)
from geofl.report.run_data import ROLLING_WINDOW, Runs
from geofl.report.stats import metric_scale, metric_unit
from geofl.report.style import (
    SIZE,
    colour,
    legend,
    new_figure,
    no_data,
    outside_legend,
    plain,
    save,
    style,
)
from geofl.tasks.metrics import rolling_std

__all__ = [
    "PARTITION_AXIS",
    "Runs",
    "colour",
    "has_per_class",
    "has_rolling_std",
    "has_series",
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
    "single_seed",
    "style",
]


def single_seed(runs: Runs) -> bool:
    """True when no method of ``runs`` has more than one seed."""
    return all(len(seeds) <= 1 for seeds in runs.values())


def _finite_series(runs: Runs, split: str, key: str) -> list[np.ndarray]:
    """The finite values of one metric per seed (evaluated rounds only)."""
    out = []
    for seeds in runs.values():
        for run in seeds.values():
            xs, ys = run.series(split, key)
            out.append(ys[np.isfinite(xs) & np.isfinite(ys)])
    return out


def has_series(runs: Runs, split: str = "test", key: str = "accuracy") -> bool:
    """Whether some seed has a finite value of the metric in some round."""
    return any(v.size for v in _finite_series(runs, split, key))


def has_rolling_std(runs: Runs, window: int, key: str = "accuracy") -> bool:
    """Whether some seed has at least ``window`` evaluated rounds of the test metric (so a
    rolling std over ``window`` rounds is defined somewhere)."""
    return any(v.size >= window for v in _finite_series(runs, "test", key))


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


def _draw_seeds_and_mean(
    ax: Axes,
    runs: Runs,
    split: str,
    key: str,
    scale: float,
    window: int | None = None,
    band: bool = False,
    ls: str = "-",
    suffix: str = "",
    colours: Mapping[str, int] | None = None,
) -> bool:
    """Thin line per seed and bold mean per method; False when nothing was drawn.

    Rounds where the metric is undefined (e.g. not evaluated, ``eval.every > 1``) are
    skipped, so lines join the evaluated rounds and rolling windows count evaluated rounds.
    ``colours`` maps a method to its palette index (default: its position in ``runs``).
    With one seed per method only the method's line is drawn, labelled without "n =".
    """
    drawn, single = False, single_seed(runs)
    for i, (method, seeds) in enumerate(runs.items()):
        c = colour(colours.get(method, i) if colours else i)
        curves = []
        for run in seeds.values():
            xs, ys = run.series(split, key)
            keep = np.isfinite(xs) & np.isfinite(ys)
            xs, ys = xs[keep], ys[keep] * scale
            if xs.size == 0:
                continue
            curves.append((xs, rolling_std(ys, window) if window is not None else ys))
            if not band and not single:
                ax.plot(xs, curves[-1][1], color=c, lw=0.8, alpha=0.3)
        if not curves:
            continue
        xs, mean, std = _mean_by_round(curves)
        n = "" if single else f" (n={len(curves)})"
        ax.plot(xs, mean, color=c, lw=2.0, ls=ls, label=plain(f"{method}{suffix}{n}"))
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
    mean per method (000 Fig. 5); one line per method for single-seed runs.

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
        outside_legend(ax)
    else:
        no_data(ax, "evaluated rounds")
    how = "" if single_seed(runs) else " (thin: seeds, bold: mean over seeds)"
    style(
        ax,
        title or f"Test {metric} per round{how}",
        "communication round",
        f"test {metric}{metric_unit(metric)}",
    )
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
        outside_legend(ax)
        ax.set_ylim(bottom=0.0)
    else:
        no_data(ax, f"runs with ≥ {window} evaluated rounds")
    unit = "percentage points" if metric_scale(metric) == 100.0 else metric
    style(
        ax,
        title or f"Training stability: rolling std of test {metric} (window {window})",
        "communication round",
        f"rolling std ({unit})",
    )
    return save(fig, path)


def _style_handles(runs: Runs) -> list[Line2D]:
    """Legend entries of the convergence figure: one colour per method, two line styles."""
    n = {m: sum(r.complete or bool(r.rounds) for r in s.values()) for m, s in runs.items()}
    single = single_seed(runs)
    handles = [
        Line2D([], [], color=colour(i), lw=2.0, label=plain(m if single else f"{m} (n={n[m]})"))
        for i, m in enumerate(runs)
    ]
    grey = "#555555"
    return [
        *handles,
        Line2D([], [], color=grey, lw=1.5, ls="-", label="validation"),
        Line2D([], [], color=grey, lw=1.5, ls="--", label="training"),
    ]


def plot_convergence(runs: Runs, path: Path, *, metric: str = "accuracy") -> Path:
    """Train/validation accuracy (%) — or the task's ``metric`` — and train loss vs round,
    mean ± std per method (Fig. 4; no band for single-seed runs).

    Training accuracy (dashed) is the running accuracy over the local training batches of
    the round, sample-weighted over clients; validation accuracy (solid) is measured on the
    shared validation split after aggregation. The legend, right of the loss panel, names
    the methods' colours (both panels) and the line styles.

    Args:
        runs: ``method -> seed -> SeedRun``.
        path: PNG to write.
        metric: The task's primary metric.
    """
    fig = new_figure((SIZE[0] * 1.6, SIZE[1]))
    ax_acc, ax_loss = fig.subplots(1, 2)
    scale = metric_scale(metric)
    if _draw_seeds_and_mean(ax_acc, runs, "val", metric, scale, band=True):
        _draw_seeds_and_mean(
            ax_acc, runs, f"train_{metric}", "", scale, band=True, ls="--", suffix=" train"
        )
    else:
        no_data(ax_acc, "evaluated rounds")
    if _draw_seeds_and_mean(ax_loss, runs, "train_loss", "", 1.0, band=True):
        outside_legend(ax_loss, handles=_style_handles(runs))
    else:
        no_data(ax_loss, "evaluated rounds")
    loss = "train loss (cross-entropy)" if metric == "accuracy" else "train loss"
    over = "" if single_seed(runs) else " (mean ± std over seeds)"
    style(
        ax_acc,
        f"{metric.capitalize()}: validation (solid), training (dashed)",
        "communication round",
        f"{metric}{metric_unit(metric)}",
    )
    style(ax_loss, f"Training loss{over}", "communication round", loss)
    return save(fig, path)
