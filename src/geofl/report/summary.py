"""Summarise each method's results over seeds (``summary.json``).

Reads a run directory (:func:`~geofl.report.run_data.load_run`) and reduces it to mean ± std
over seeds (:mod:`geofl.report.stats`), the form papers report.

Conventions:
    * A seed without ``final.json`` is unfinished: it is listed under ``incomplete`` and left
      out of every statistic.
    * Undefined values (a rolling std over fewer rounds than the window, JSON ``null``) are
      left out of a :class:`~geofl.report.stats.Stat`; they are ``null`` in ``summary.json``.
    * Metric keys follow the run's task (``run.json["task"]``, :class:`TaskInfo`; runs
      written before tasks existed are classification): ``final_test_<metric>`` for every
      scalar the task reports, ``best_val_test_<primary>`` and a rolling std of the
      primary metric. Classification keeps exactly its historical keys
      (``final_test_accuracy``, ``final_test_macro_f1``, ``final_test_loss``,
      ``best_val_test_accuracy``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import numpy as np

from geofl import io
from geofl.records import TaskInfo
from geofl.report.paired import PAIRED_METRICS, final_values, paired_statistics
from geofl.report.run_data import ROLLING_WINDOW, RunData, SeedRun, load_run, num, read_json
from geofl.report.stats import (
    PERCENT_METRICS,
    Stat,
    format_pm,
    make_stat,
    metric_scale,
    metric_unit,
)
from geofl.tasks.metrics import rolling_std

__all__ = [
    "NOT_REACHED",
    "PERCENT_METRICS",
    "ROLLING_WINDOW",
    "MethodSummary",
    "RunData",
    "RunSummary",
    "SeedRun",
    "Stat",
    "format_pm",
    "load_run",
    "make_stat",
    "metric_names",
    "metric_scale",
    "metric_unit",
    "num",
    "read_json",
    "summarize_run",
    "write_summary",
]

#: Scalar metrics a task reports when no finished seed says otherwise (their summary keys
#: exist even before any seed finished).
_DEFAULT_METRICS = {"classification": ("accuracy", "macro_f1", "loss")}


class MethodSummary(TypedDict):
    """Per-method entry of :class:`RunSummary` (accuracies as fractions in [0, 1]).

    The keys listed are classification's; another task has ``final_test_<metric>`` for
    each of its scalar metrics and ``best_val_test_<primary>`` in their place (a summary
    of such a run is built as a plain dict with those keys).

    ``bytes_total`` is each seed's communication over its rounds, up plus down (001
    §6.1.4: Comm_total). ``target`` is present when the runs report rounds to a target
    (``eval.target``): its metric, value and split, per seed the first round reaching it
    or ``"not reached"``, and Stats of those rounds and of the bytes moved until then over
    the seeds that reached it.

    ``epsilon_max`` is the per-seed ``final.json["privacy"]["epsilon_max"]`` (ε of the worst
    client at the run's δ) over finished seeds, None for a method whose release adds no
    noise. An infinite ε (``null`` in ``final.json``) is left out of the Stat like any
    undefined value.
    """

    seeds_done: list[int]
    incomplete: list[int]
    final_test_accuracy: Stat
    final_test_macro_f1: Stat
    final_test_loss: Stat
    best_val_test_accuracy: Stat
    best_val_round: Stat
    final_rolling_std: Stat
    bytes_up_per_round: Stat
    bytes_total: Stat
    target: NotRequired[dict[str, Any]]
    diverged: dict[str, str]
    paper: dict[str, Any] | None
    epsilon_max: Stat | None


class RunSummary(TypedDict):
    """Content of ``summary.json``; ``paired`` only with ``compare_to`` in the config."""

    name: str
    seeds: list[int]
    methods: dict[str, MethodSummary]
    paired: NotRequired[dict[str, Any]]


def _final_metric(final: dict[str, Any], *path: str) -> float:
    node: Any = final
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return num(node)


def _epsilon_max(finals: Sequence[dict[str, Any]]) -> Stat | None:
    privacy = [f["privacy"] for f in finals if isinstance(f.get("privacy"), dict)]
    if not privacy:
        return None
    return make_stat([num(p.get("epsilon_max")) for p in privacy])


def metric_names(task: TaskInfo, finals: Sequence[dict[str, Any]]) -> list[str]:
    """Scalar test metrics of the finished seeds, in the order the task reports them."""
    names: dict[str, None] = {}
    for f in finals:
        test = (f.get("final") or {}).get("test")
        if isinstance(test, dict):
            names.update((k, None) for k, v in test.items() if not isinstance(v, list | dict))
    names.pop("n", None)
    return list(names) or list(_DEFAULT_METRICS.get(task.name, (task.primary_metric, "loss")))


def _summarize_method(
    runs: dict[int, SeedRun], paper: Any, window: int, task: TaskInfo
) -> MethodSummary:
    done = [r for r in runs.values() if r.final is not None]
    finals = [r.final for r in done if r.final is not None]
    primary = task.primary_metric
    last_std = []
    for r in done:
        _, values = r.series("test", primary)
        values = values[np.isfinite(values)]  # rounds without evaluation (eval.every > 1)
        rs = rolling_std(values, window) if values.size else values
        last_std.append(float(rs[-1]) if rs.size else math.nan)
    out: dict[str, Any] = {
        "seeds_done": [r.seed for r in done],
        "incomplete": [r.seed for r in runs.values() if r.final is None],
    }
    for name in metric_names(task, finals):
        out[f"final_test_{name}"] = make_stat(
            [_final_metric(f, "final", "test", name) for f in finals]
        )
    out[f"best_val_test_{primary}"] = make_stat(
        [_final_metric(f, "best_val", "test", primary) for f in finals]
    )
    out.update(
        best_val_round=make_stat([_final_metric(f, "best_val", "round") for f in finals]),
        final_rolling_std=make_stat(last_std),
        diverged={
            str(r.seed): str(r.final["diverged"])
            for r in done
            if r.final is not None and r.final.get("diverged")
        },
        bytes_up_per_round=make_stat(
            [float(np.mean([rec.bytes_up for rec in r.rounds])) for r in done if r.rounds]
        ),
        bytes_total=make_stat(
            [
                float(sum(rec.bytes_up + rec.bytes_down for rec in r.rounds))
                for r in done
                if r.rounds
            ]
        ),
        paper=dict(paper) if isinstance(paper, dict) else None,
        epsilon_max=_epsilon_max(finals),
    )
    target = _target_summary(done)
    if target is not None:
        out["target"] = target
    return cast(MethodSummary, out)


#: What a seed's target entry says when no round reached the target.
NOT_REACHED = "not reached"


def _target_summary(done: Sequence[SeedRun]) -> dict[str, Any] | None:
    """Rounds to the target over seeds (``final.json["target"]``), or None without one."""
    entries = {
        r.seed: r.final["target"]
        for r in done
        if r.final is not None and isinstance(r.final.get("target"), dict)
    }
    if not entries:
        return None
    first = next(iter(entries.values()))
    reached = [e for e in entries.values() if e.get("round") is not None]
    return {
        "metric": first.get("metric"),
        "value": first.get("value"),
        "split": first.get("split"),
        "direction": first.get("direction", "max"),
        "per_seed": {
            str(seed): NOT_REACHED if e.get("round") is None else int(e["round"])
            for seed, e in entries.items()
        },
        "rounds": make_stat([num(e["round"]) for e in reached]),
        "bytes_total": make_stat([num(e.get("bytes_total")) for e in reached]),
    }


def summarize_run(run_dir: Path) -> RunSummary:
    """Mean ± std over finished seeds of each method's final metrics.

    ``final_rolling_std`` is the rolling std (window :attr:`RunData.rolling_window`, 10 by
    default; :func:`~geofl.tasks.metrics.rolling_std`) of the task's primary test metric
    (accuracy for classification) at the last evaluated round; it is undefined (left out)
    for seeds with fewer evaluated rounds than the window.

    Args:
        run_dir: The run directory.

    Raises:
        RunDirError: See :func:`load_run`.
    """
    run = load_run(run_dir)
    paper = run.info.get("paper") or {}
    paper = paper if isinstance(paper, dict) else {}
    summary = RunSummary(
        name=run.name,
        seeds=run.seeds,
        methods={
            m: _summarize_method(runs, paper.get(m), run.rolling_window, run.task)
            for m, runs in run.methods.items()
        },
    )
    baseline = run.config.get("compare_to")
    if isinstance(baseline, str) and baseline in run.methods:
        finals = {m: {s: r.final for s, r in v.items() if r.final} for m, v in run.methods.items()}
        metrics = (run.task.primary_metric, *PAIRED_METRICS)
        summary["paired"] = paired_statistics(final_values(finals, metrics), baseline)
    return summary


def _json_ready(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_ready(v) for v in x]
    return x


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory + ``os.replace``.

    Readers never see a half-written file; the file gets the usual umask permissions.
    """
    io.write_text_atomic(path, text)


def write_summary(run_dir: Path) -> RunSummary:
    """Compute :func:`summarize_run` and write it atomically to ``run_dir/summary.json``.

    NaN values are written as ``null`` (strict JSON).

    Returns:
        The summary (with NaN, not None, for undefined values).
    """
    summary = summarize_run(run_dir)
    text = json.dumps(_json_ready(summary), indent=2, ensure_ascii=False, allow_nan=False)
    write_text_atomic(Path(run_dir) / "summary.json", text + "\n")
    return summary
