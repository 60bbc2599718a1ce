"""The ``eval`` section: when and how a run evaluates, which model is best, early stopping
and target performance."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from geofl.config.base import MAX_COUNT, _OmitUnset, _Strict

__all__ = ["EarlyStoppingConfig", "EvalConfig", "TargetConfig"]


class EarlyStoppingConfig(_Strict):
    """Stop when a validation metric has not improved for ``patience`` rounds (001 §6.1.2:
    validation loss, 10 rounds)."""

    metric: str = Field("loss", min_length=1, description="validation metric watched")
    patience: int = Field(10, ge=1, le=MAX_COUNT, description="rounds without improvement")
    min_delta: float = Field(0.0, ge=0.0, description="smallest change counted as improvement")


class TargetConfig(_Strict):
    """A target performance whose first round and communication the run reports (001 §6.1.4)."""

    metric: str = Field(..., min_length=1, description="metric name, e.g. accuracy")
    value: float = Field(
        ..., description="reached when the metric is at least (max) / at most (min) this"
    )
    split: Literal["val", "test"] = Field("test", description="split the metric is read on")


class EvalConfig(_OmitUnset):
    """When and how to evaluate, which model is best, when to stop early."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("early_stopping", "select_by", "target", "group_by")

    every: int = Field(1, ge=1, description="evaluate val and test every N rounds (and last)")
    batch_size: int = Field(256, ge=1)
    rolling_window: int = Field(10, ge=1, description="rolling std window (000 Fig. 6)")
    observe_updates: bool = Field(
        False,
        description="record what an honest-but-curious server sees of each update "
        "(per-client statistics, observations.jsonl) for the passive attacks",
    )
    select_by: str | None = Field(
        None,
        description="validation metric that picks the best model (001 §6.1.2: macro_f1); "
        "absent: the task's primary metric",
    )
    early_stopping: EarlyStoppingConfig | None = Field(
        None, description="stop after rounds without validation gain; absent: never"
    )
    target: TargetConfig | None = Field(
        None, description="report the first round (and bytes) reaching a metric value"
    )
    group_by: str | None = Field(
        None,
        min_length=1,
        description="per-sample metadata key whose groups get their own metrics and the "
        "primary metric's std and min across groups (003 Table 12: region); absent: none",
    )
