"""Per-class figures of a run: client × class partition heatmaps and per-class bars.

Drawn in the house style of :mod:`geofl.report.style`; a figure with nothing to draw still
writes a PNG that says so, so a caller never links a missing file (the report leaves such
figures out: :func:`has_per_class`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from geofl.report.run_data import Runs, num
from geofl.report.stats import metric_scale, metric_unit
from geofl.report.style import SIZE, colour, new_figure, no_data, plain, save, style

__all__ = [
    "PARTITION_AXIS",
    "empty_bars",
    "has_per_class",
    "plot_partition_heatmap",
    "plot_per_class_accuracy",
]

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
    fig = new_figure((max(SIZE[0], 0.45 * c + 2.5), height))
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
            ax.text(
                j,
                i,
                f"{int(v)}",
                ha="center",
                va="center",
                fontsize=7,
                color="black" if v > 0.6 * top else "white",
            )
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


def has_per_class(runs: Runs, key: str = "accuracy") -> bool:
    """Whether some finished seed reports the per-class vector ``per_class_<key>``."""
    return bool(_per_class_means(runs, key))


def empty_bars(runs: Runs, key: str = "accuracy") -> tuple[bool, bool]:
    """Whether the per-class chart has bars of (rounded) zero height, and classes without
    a value: ``(zeros, missing)`` (what its marks are, for the caption)."""
    means = list(_per_class_means(runs, key).values())
    zeros = any(bool(np.any(np.round(m, 1) == 0.0)) for m in means)
    return zeros, any(bool(np.any(np.isnan(m))) for m in means)


def _mark_empty_bars(ax: Axes, xs: np.ndarray, values: np.ndarray, c: str) -> None:
    """A "0" over bars of (rounded) zero height and a grey "–" where a class has no value,
    so that neither reads as missing data."""
    for x, v in zip(xs, values, strict=True):
        if math.isnan(v):
            text, tint, weight = "–", "#888888", "normal"
        elif round(float(v), 1) == 0.0:
            text, tint, weight = "0", c, "bold"
        else:
            continue
        ax.annotate(
            text,
            (float(x), 0.0),
            xytext=(0, 1.5),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
            color=tint,
            fontweight=weight,
        )


def plot_per_class_accuracy(
    runs: Runs, path: Path, classes: Sequence[str] | None = None, *, metric: str = "accuracy"
) -> Path:
    """Grouped bars of final per-class test accuracy (%) — or the task's per-class
    ``metric`` (``per_class_<metric>``: multi-label AP, per-output RMSE) — mean over
    finished seeds. A bar of zero height carries a "0", a class without a value a "–".

    Args:
        runs: ``method -> seed -> SeedRun`` (the keys label the legend); only seeds with
            ``final.json`` count.
        path: PNG to write.
        classes: Class names (default: class indices).
        metric: The per-class vector drawn.
    """
    means = _per_class_means(runs, metric)
    c = max((m.size for m in means.values()), default=0)
    names = [plain(x) for x in classes or []][:c]
    names += [str(j) for j in range(len(names), c)]
    order = {m: i for i, m in enumerate(runs)}
    single = all(len(seeds) <= 1 for seeds in runs.values())
    fig = new_figure((max(SIZE[0], 0.55 * c + 2.5), SIZE[1] + 0.6))
    ax = fig.add_subplot()
    over = "" if single else " (mean over seeds)"
    style(
        ax,
        f"Per-class test {metric} at the final round{over}",
        "",
        f"final test {metric}{metric_unit(metric)}",
    )
    if not means:
        no_data(ax, "finished runs")
        return save(fig, path)
    bar_w = 0.8 / len(means)
    for g, (method, m) in enumerate(means.items()):
        xs = np.arange(m.size) + (g - (len(means) - 1) / 2) * bar_w
        c_m = colour(order[method])
        ax.bar(xs, np.nan_to_num(m), width=bar_w, color=c_m, label=plain(method))
        _mark_empty_bars(ax, xs, m, c_m)
    ax.set_xticks(range(c), names, rotation=40, ha="right", rotation_mode="anchor")
    if metric_scale(metric) == 100.0:
        ax.set_ylim(0.0, 105.0)
        ax.set_yticks(range(0, 101, 20))
    ax.grid(False, axis="x")
    fig.legend(loc="outside lower center", ncols=min(len(means), 4), fontsize=8, frameon=False)
    return save(fig, path)
