"""The report's run-wide figures: trajectories, stability, convergence, per-class bars and
client partitions, drawn on the task's primary metric with the methods' labels.

Classification keeps its historical file names (``accuracy_trajectories.png``,
``per_class_accuracy.png``); other tasks write ``metric_trajectories.png`` and
``per_class_<metric>.png``. A figure without data (a rolling std on a run shorter than its
window, per-class bars before any seed finished) is not drawn: a one-line note says why.
Captions speak of seeds and bands only when some method has more than one seed.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from geofl.report.class_plots import empty_bars
from geofl.report.fragments import figure_html, partition_figure_name, slug
from geofl.report.plots import (
    has_per_class,
    has_rolling_std,
    has_series,
    plot_accuracy_trajectories,
    plot_convergence,
    plot_partition_heatmap,
    plot_per_class_accuracy,
    plot_rolling_std,
)
from geofl.report.results import first_partition, num_clients, partition_label
from geofl.report.run_data import RunData
from geofl.report.stats import metric_unit

__all__ = ["RUN_FIGURES", "run_figures"]

#: Run-wide figure files (besides the partition heatmaps) that a re-render may remove.
RUN_FIGURES = (
    "accuracy_trajectories.png",
    "metric_trajectories.png",
    "rolling_std.png",
    "convergence.png",
    "asr_trajectories.png",
)

#: The attack success rate a backdoored run records next to the task's metrics
#: (:data:`geofl.attacks.probe.ASR_METRIC`).
ASR = "asr"

#: What the columns of a partition heatmap count, by task (default: classes).
_PARTITION_COLUMNS = {
    "multilabel": "label (columns; positives, a sample counts once per label it carries)",
    "regression": "quantile bin of the target (columns)",
}

#: The target kind (:mod:`geofl.data.targets`) of a task's histogram columns.
_TASK_TARGET_KIND = {"binary": "binary", "multilabel": "multi_hot", "regression": "real"}


def _classes(run: RunData) -> list[str] | None:
    parts = [first_partition(seeds) for seeds in run.methods.values()]
    return next((p.get("classes") for p in parts if p and p.get("classes")), None)


def _per_class_key(run: RunData) -> str | None:
    """The first per-class vector the finished seeds report (``accuracy``, ``ap``, …)."""
    for seeds in run.methods.values():
        for r in seeds.values():
            test = ((r.final or {}).get("final") or {}).get("test") or {}
            for key in test:
                if key.startswith("per_class_"):
                    return str(key).removeprefix("per_class_")
    return None


def _rolling_figure(run: RunData, out: Path) -> tuple[str | None, str | None]:
    """The rolling-std figure, or a note on why it is not drawn: ``(block, note)``."""
    runs, w, pm = run.labelled(), run.rolling_window, run.task.primary_metric
    what = escape(pm)
    if not has_rolling_std(runs, w, pm):
        longest = max((len(r.rounds) for s in runs.values() for r in s.values()), default=0)
        return None, (
            f"Rolling standard deviation of test {what}: not drawn, it needs ≥ {w} evaluated "
            f"rounds and the longest run has {longest}."
        )
    plot_rolling_std(runs, out / "rolling_std.png", window=w, metric=pm)
    pp = ", in percentage points" if pm == "accuracy" else ""
    seeds = "" if run.single_seed else " (thin: seeds, bold: mean)"
    cf = " (cf. paper 000 Fig. 6)" if pm == "accuracy" else ""
    caption = (
        f"Rolling standard deviation of test {what} over a window of {w} evaluated rounds"
        f"{pp}: lower means more stable training{seeds}{cf}."
    )
    return figure_html("rolling_std.png", caption, f"Rolling standard deviation of test {pm}"), None


def _line_figures(run: RunData, out: Path) -> tuple[list[str], list[str]]:
    """Trajectories, rolling std and convergence: ``(figure blocks, notes)``."""
    runs, pm = run.labelled(), run.task.primary_metric
    what, unit, classification = escape(pm), metric_unit(pm), pm == "accuracy"
    if not has_series(runs, "test", pm):
        return [], [f"No evaluated round yet: no {what} figures."]
    lines = (
        ", one line per method (one seed)"
        if run.single_seed
        else ". Thin translucent lines are individual seeds, bold lines the mean over seeds"
    )
    traj = "accuracy_trajectories.png" if classification else "metric_trajectories.png"
    plot_accuracy_trajectories(runs, out / traj, metric=pm)
    cf = " (cf. paper 000 Fig. 5)" if classification else ""
    blocks = [
        figure_html(
            traj, f"Test {what}{unit} per evaluated round{lines}{cf}.", f"Test {pm} per round"
        )
    ]
    blocks += _asr_figure(run, out, lines)
    rolling, note = _rolling_figure(run, out)
    blocks += [rolling] if rolling else []
    plot_convergence(runs, out / "convergence.png", metric=pm)
    band = "" if run.single_seed else ", mean over seeds with a ±1 std band"
    cf = " (paper 000 Fig. 4)" if classification else ""
    caption = (
        f"Convergence: validation {what} (solid), running training {what} over the round's "
        f"local batches (dashed) and training loss per round{band}{cf}."
    )
    alt = f"Training and validation {pm} and training loss per round"
    blocks.append(figure_html("convergence.png", caption, alt))
    return blocks, [note] if note else []


def _asr_figure(run: RunData, out: Path, lines: str) -> list[str]:
    """The attack success rate per evaluated round (004 Fig. 3's right axis), when some
    method records one (a backdoor or object-disappearance attack; classification: triggered
    samples classified as the target, detection: triggered objects missed, 004 Eq. 15)."""
    runs = run.labelled()
    if not has_series(runs, "test", ASR):
        return []
    plot_accuracy_trajectories(
        runs, out / "asr_trajectories.png", metric=ASR, title="Attack success rate per round"
    )
    caption = f"Attack success rate (%) on the triggered test samples per evaluated round{lines}."
    return [figure_html("asr_trajectories.png", caption, "Attack success rate per round")]


def _per_class_figure(run: RunData, out: Path) -> list[str]:
    key = _per_class_key(run)
    runs = run.labelled()
    if key is None or not has_per_class(runs, key):
        return []
    name = "per_class_accuracy.png" if key == "accuracy" else f"per_class_{slug(key)}.png"
    plot_per_class_accuracy(runs, out / name, classes=_classes(run), metric=key)
    over = "" if run.single_seed else ", mean over finished seeds"
    zeros, missing = empty_bars(runs, key)
    marks = (" A bold 0 marks a bar of height 0." if zeros else "") + (
        " A grey – marks a class without a value (absent from the test split)." if missing else ""
    )
    what = (
        "Test accuracy (%) of each class"
        if key == "accuracy"
        else f"Test {escape(key)} of each class (or output)"
    )
    return [figure_html(name, f"{what} at the final round{over}.{marks}", f"Per-class test {key}")]


def _partition_figures(run: RunData, out: Path) -> list[str]:
    """One client × class (label, target bin) heatmap per federated method."""
    columns = _PARTITION_COLUMNS.get(run.task.name, "class (columns)")
    kind = _TASK_TARGET_KIND.get(run.task.name, "class")
    names = run.display_names()
    blocks: list[str] = []
    for i, (method, seeds) in enumerate(run.methods.items()):
        part = first_partition(seeds)
        if part is None or num_clients(part) <= 1:
            continue  # centralized (pooled) methods have a single client
        seed = next(s for s, r in seeds.items() if r.partition is not None)
        file, label = partition_figure_name(i, method), partition_label(part)
        plot_partition_heatmap(
            part, out / file, title=f"{names[method]} — {label}, seed {seed}", target_kind=kind
        )
        blocks.append(
            figure_html(
                file,
                f"Client partition of <strong>{escape(names[method])}</strong> (seed {seed}): "
                f"training samples per client (rows) and {columns}; {escape(label)}.",
                f"Client partition of {names[method]}",
            )
        )
    return blocks


def run_figures(run: RunData, out: Path) -> tuple[list[str], list[str]]:
    """Draw every run-wide PNG into ``out``: ``(figure blocks, notes on figures not drawn)``.

    Stale files of a previous render (a partition heatmap of a renamed method, a rolling
    std that no longer has data) are removed first.
    """
    for stale in [*out.glob("partition-*.png"), *out.glob("per_class_*.png")]:
        stale.unlink()
    for name in RUN_FIGURES:
        (out / name).unlink(missing_ok=True)
    blocks, notes = _line_figures(run, out)
    return blocks + _per_class_figure(run, out) + _partition_figures(run, out), notes
