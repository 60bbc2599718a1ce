"""Run-wide figures of a task other than classification, drawn on its own metrics.

Classification keeps its historical figures and captions (:mod:`geofl.report.html`); every
other task gets the same figures on its primary metric (trajectories, rolling std,
convergence) and, when its splits report one, a per-class (or per-output) vector.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from geofl.report.fragments import figure_html, slug
from geofl.report.plots import (
    plot_accuracy_trajectories,
    plot_convergence,
    plot_per_class_accuracy,
    plot_rolling_std,
)
from geofl.report.run_data import RunData
from geofl.report.stats import metric_unit

__all__ = ["task_figures"]


def _per_class_key(run: RunData) -> str | None:
    """The first per-class vector the finished seeds report (``ap``, ``rmse``, …)."""
    for seeds in run.methods.values():
        for r in seeds.values():
            test = ((r.final or {}).get("final") or {}).get("test") or {}
            for key in test:
                if key.startswith("per_class_"):
                    return str(key).removeprefix("per_class_")
    return None


def task_figures(run: RunData, out: Path, *, classes: list[str] | None) -> list[str]:
    """The run-wide figures drawn on the primary metric of a task other than
    classification (whose figures and captions keep their historical form)."""
    runs, w, pm = run.methods, run.rolling_window, run.task.primary_metric
    unit = metric_unit(pm)
    plot_accuracy_trajectories(runs, out / "metric_trajectories.png", metric=pm)
    plot_rolling_std(runs, out / "rolling_std.png", window=w, metric=pm)
    plot_convergence(runs, out / "convergence.png", metric=pm)
    blocks = [
        figure_html(
            "metric_trajectories.png",
            f"Test {escape(pm)}{unit} per evaluated round. Thin translucent lines are "
            "individual seeds, bold lines the mean over seeds of each method.",
            f"Test {pm} per round",
        ),
        figure_html(
            "rolling_std.png",
            f"Rolling standard deviation of test {escape(pm)} over a window of {w} "
            "evaluated rounds: lower means more stable training.",
            f"Rolling standard deviation of test {pm}",
        ),
        figure_html(
            "convergence.png",
            f"Convergence: validation {escape(pm)} (solid), running training {escape(pm)} "
            "over the round's local batches (dashed) and training loss per round.",
            f"Training and validation {pm} and training loss per round",
        ),
    ]
    key = _per_class_key(run)
    if key is not None:
        name = f"per_class_{slug(key)}.png"
        plot_per_class_accuracy(runs, out / name, classes=classes, metric=key)
        blocks.append(
            figure_html(
                name,
                f"Test {escape(key)} of each class (or output) at the final round, mean "
                "over finished seeds.",
                f"Per-class test {key}",
            )
        )
    return blocks
