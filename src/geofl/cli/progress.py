"""The terminal progress display of ``geofl run``: a subscriber, not part of the engine."""

from __future__ import annotations

from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from geofl.events import RunInfo, metric_text
from geofl.records import RoundRecord

__all__ = ["ProgressSubscriber", "make_progress"]


class ProgressSubscriber:
    """A rich progress display: one bar per run with rounds, the current test value of the
    task's primary metric (test accuracy for classification), ETA."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress or make_progress()
        self._tasks: dict[tuple[str, int], TaskID] = {}

    def on_run_start(self, info: RunInfo) -> None:
        self._tasks[(info.method, info.seed)] = self.progress.add_task(
            f"{info.method} seed={info.seed}",
            total=info.rounds,
            completed=info.start_round - 1,
            metric="",
        )

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        test = record.test
        metric = (
            f"test {metric_text(info.primary_metric, test[info.primary_metric])}" if test else None
        )
        task = self._tasks[(info.method, info.seed)]
        if metric:
            self.progress.update(task, advance=1, metric=metric)
        else:
            self.progress.update(task, advance=1)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        self.progress.update(self._tasks[(info.method, info.seed)], completed=info.rounds)


def make_progress() -> Progress:
    """The progress layout used by ``geofl run``."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rounds"),
        TextColumn("{task.fields[metric]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
