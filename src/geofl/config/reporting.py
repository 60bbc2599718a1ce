"""What a run reports beyond its metrics: published numbers to print next to ours
(``paper``), figures to re-draw (``figures``) and export to trackers (``tracking``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from geofl.config.base import _Strict

__all__ = ["FigureSpec", "PaperValue", "TrackingConfig"]


class PaperValue(_Strict):
    """A published number to print next to ours in the report.

    The optional columns reproduce the layout of a paper's results table (000 Table 1:
    setting, privacy perturbation, aggregation strategy).
    """

    final_test_accuracy: str
    source: str
    setting: str | None = None
    perturbation: str | None = None
    aggregation: str | None = None


class TrackingConfig(_Strict):
    """Export of a run to experiment trackers (:mod:`geofl.tracking`); observes only.

    Needs the optional extra ``tracking`` (``pip install 'geofl[tracking]'``). Not part of a
    run's resume identity: a run may be resumed with tracking switched on or off.
    """

    mlflow: bool = Field(False, description="log params, per-round metrics and artefacts to MLflow")
    tensorboard: bool = Field(False, description="write TensorBoard event files")
    mlflow_uri: str | None = Field(
        None,
        description="MLflow tracking URI (a server, sqlite:///…); default: a file store in "
        "RUN_DIR/mlruns",
    )
    experiment: str | None = Field(
        None, description="MLflow experiment name; default: the config's name"
    )
    tensorboard_dir: str | None = Field(
        None, description="TensorBoard log directory; default: RUN_DIR/tensorboard"
    )


class FigureSpec(_Strict):
    """A paper figure re-drawn from a subset of the methods."""

    title: str = Field(..., min_length=1)
    methods: list[str] = Field(..., min_length=1)
    kind: Literal["accuracy", "rolling_std"] = "accuracy"
