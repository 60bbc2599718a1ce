"""Model selection, early stopping, rounds to a target and communication (001 §6.1.2, §6.1.4).

* **Best model** (``eval.select_by``): the evaluated round with the best validation value of
  a metric (001: macro-F1); by default the task's primary metric, as before the option.
* **Early stopping** (``eval.early_stopping``): the run ends after the first evaluated round
  r with r − r_best ≥ ``patience``, where r_best is the last round whose validation value
  improved on every earlier one by more than ``min_delta`` (001: validation loss, patience
  10 — "stagnates for 10 consecutive rounds"). A NaN value never improves.
* **Rounds to target** (``eval.target``): the first evaluated round whose metric on the
  chosen split reaches the value (≥ for metrics that improve upwards, ≤ downwards), and the
  bytes moved up to and including it; "not reached" (None) otherwise.
* **Communication**: bytes up (Δw and extra tensors of the accepted updates) and down (the
  model and payload tensors to every trained client) summed over the run's rounds: 001's
  Comm_total = Σ_r Comm_round, with Comm_round = 2m|w| for m clients of plain FedAvg.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from geofl.config.schema import EarlyStoppingConfig, TargetConfig
from geofl.errors import ConfigError
from geofl.records import RoundRecord
from geofl.tasks.base import Direction, Task, metric_direction

__all__ = [
    "EarlyStopper",
    "Watch",
    "communication",
    "improves",
    "rounds_to_target",
    "watch",
]


@dataclass(frozen=True)
class Watch:
    """A metric and the way it improves.

    Attributes:
        metric: Key in the split's :class:`~geofl.tasks.base.SplitMetrics` values.
        direction: ``"max"`` or ``"min"``.
    """

    metric: str
    direction: Direction


def watch(task: Task, metric: str | None, path: str) -> Watch:
    """The task's ``metric`` (its primary metric when None) with its direction.

    Raises:
        ConfigError: naming ``path`` when the task does not report ``metric`` (configs are
            checked at load for tasks that declare their metrics; this covers the rest).
    """
    name = task.primary_metric if metric is None else metric
    direction = metric_direction(task, name)
    if direction is None:
        raise ConfigError(
            path, f"task {task.name} reports no metric {name!r}; use {task.primary_metric} or loss"
        )
    return Watch(name, direction)


def improves(score: float, best: float, direction: Direction, min_delta: float = 0.0) -> bool:
    """Whether ``score`` beats ``best`` by more than ``min_delta`` (NaN never does)."""
    if direction == "max":
        return score > best + min_delta
    return score < best - min_delta


class EarlyStopper:
    """Ends a run after ``patience`` rounds without validation improvement (001 §6.1.2).

    Args:
        cfg: Metric, patience and minimal improvement.
        direction: Which way the metric improves.
    """

    def __init__(self, cfg: EarlyStoppingConfig, direction: Direction) -> None:
        self.cfg, self.direction = cfg, direction
        self.best: float | None = None
        self.best_round: int | None = None
        self.stopped_at: int | None = None

    def update(self, round_idx: int, value: float) -> bool:
        """Record round ``round_idx``'s validation value; True when the run should stop."""
        first = self.best is None and not math.isnan(value)
        if first or (
            self.best is not None and improves(value, self.best, self.direction, self.cfg.min_delta)
        ):
            self.best, self.best_round = value, round_idx
        since = round_idx - (self.best_round if self.best_round is not None else 0)
        if since >= self.cfg.patience:
            self.stopped_at = round_idx
        return self.stopped_at is not None

    def observe(self, record: RoundRecord) -> bool:
        """:meth:`update` with an evaluated record's validation value (test without a
        validation split); rounds without evaluation change nothing."""
        split = record.val if record.val is not None and record.val.n else record.test
        if split is None:
            return self.stopped_at is not None
        return self.update(record.round, split.values.get(self.cfg.metric, math.nan))

    def to_json(self) -> dict[str, Any]:
        """``final.json["early_stopping"]``: settings, best round and the stopping round."""
        return {
            "metric": self.cfg.metric,
            "patience": self.cfg.patience,
            "min_delta": self.cfg.min_delta,
            "best_round": self.best_round,
            "best_val": self.best,
            "stopped_at": self.stopped_at,
        }


def communication(records: Sequence[RoundRecord]) -> dict[str, int]:
    """Bytes up, down and in total over ``records``, and the number of rounds."""
    up = sum(r.bytes_up for r in records)
    down = sum(r.bytes_down for r in records)
    return {"rounds": len(records), "bytes_up": up, "bytes_down": down, "bytes_total": up + down}


def rounds_to_target(
    records: Sequence[RoundRecord], target: TargetConfig, direction: Direction
) -> dict[str, Any]:
    """The first evaluated round reaching ``target`` and the bytes moved until then.

    Returns:
        ``{"metric", "value", "split", "direction", "round", "bytes_total"}``; ``round`` and
        ``bytes_total`` are None when no round reached the target.
    """
    moved = 0
    reached: int | None = None
    for rec in records:
        moved += rec.bytes_up + rec.bytes_down
        split = getattr(rec, target.split)
        score = math.nan if split is None else split.values.get(target.metric, math.nan)
        ok = score >= target.value if direction == "max" else score <= target.value
        if ok:  # NaN compares False
            reached = rec.round
            break
    return {
        "metric": target.metric,
        "value": target.value,
        "split": target.split,
        "direction": direction,
        "round": reached,
        "bytes_total": moved if reached is not None else None,
    }
