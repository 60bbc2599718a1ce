"""The tracking subscriber: a run exported to MLflow and/or TensorBoard as it trains.

Enabled by the config (``tracking: {mlflow: true, tensorboard: true}``) or ``geofl run
--track mlflow --track tensorboard``; observes only (never changes metrics). The engine
builds it before the run directory exists (:func:`build_tracking`: a missing library fails
in one line there, exit 2 in the CLI), calls it per (method, seed) and, once every seed is
done, :meth:`TrackingSubscriber.on_experiment_end`. The CLI adds the rendered report with
:func:`log_report` (so does ``geofl report`` on a tracked run).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geofl.config.schema import TrackingConfig
from geofl.events import SUBSCRIBERS, RunInfo, Subscriber
from geofl.records import RoundRecord, read_rounds
from geofl.registry import CheckContext
from geofl.tracking.mlflow_export import MlflowExport, metric_key
from geofl.tracking.state import read_state, update_state
from geofl.tracking.tensorboard_export import TensorboardExport

__all__ = ["TrackingSubscriber", "build_tracking", "log_report", "summary_metrics"]

#: Run-level files logged to the MLflow parent run at the end.
RUN_FILES = ("config.yaml", "run.json", "summary.json")


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """``<method>/<key>`` → mean over seeds of each ``final_test_*`` and ``best_val_test_*``
    Stat of ``summary.json`` (finite means only)."""
    out: dict[str, float] = {}
    for method, ms in (summary.get("methods") or {}).items():
        for key, stat in ms.items():
            if key.startswith(("final_test_", "best_val_test_")) and isinstance(stat, dict):
                mean = stat.get("mean")
                if isinstance(mean, int | float) and mean == mean:
                    out[f"{metric_key(method)}/{key}"] = float(mean)
    return out


class TrackingSubscriber:
    """Forwards run events to the enabled exporters.

    Args:
        cfg: The ``tracking`` section.
        resolved: The resolved experiment config (plain data).
        run_dir: The run directory (it need not exist yet).

    Raises:
        ConfigError: An enabled tracker's library is not installed.
    """

    def __init__(self, cfg: TrackingConfig, resolved: Mapping[str, Any], run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.mlflow = MlflowExport(cfg, resolved, run_dir) if cfg.mlflow else None
        self.tensorboard = TensorboardExport(cfg, resolved, run_dir) if cfg.tensorboard else None

    @property
    def exporters(self) -> list[MlflowExport | TensorboardExport]:
        """The enabled exporters."""
        return [e for e in (self.mlflow, self.tensorboard) if e is not None]

    def on_run_start(self, info: RunInfo) -> None:
        earlier: list[RoundRecord] = []
        if info.start_round > 1:  # resumed: rounds the exporters may not have seen
            path = info.out_dir / "rounds.jsonl"
            earlier = [r for r in read_rounds(path) if r.round < info.start_round]
        if self.tensorboard is not None:  # so that log_report finds it
            update_state(self.run_dir, "tensorboard", {"log_dir": str(self.tensorboard.log_dir)})
        for exporter in self.exporters:
            exporter.start(info, earlier)

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        for exporter in self.exporters:
            exporter.round(record)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        for exporter in self.exporters:
            exporter.end(info, final)

    def on_experiment_end(self, run_dir: Path) -> None:
        """Every seed is done and ``summary.json`` written: log the run-level files and the
        summary's means to the MLflow parent run."""
        if self.mlflow is not None:
            summary = _read_summary(Path(run_dir))
            files = [Path(run_dir) / name for name in RUN_FILES]
            self.mlflow.finish(files, summary=summary_metrics(summary))


def _read_summary(run_dir: Path) -> dict[str, Any]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def log_report(run_dir: Path, resolved: Mapping[str, Any] | None = None) -> list[str]:
    """Add ``RUN_DIR/report/`` to the trackers the run was exported to (``tracking.json``).

    MLflow: the folder as artefacts of the parent run (``report/``); TensorBoard: its PNGs as
    images and the summary as text, in ``<log dir>/report``.

    Args:
        run_dir: A run directory written with tracking on.
        resolved: The resolved config (default: none needed; the names come from the state).

    Returns:
        The trackers written to (``[]`` for a run exported to none).

    Raises:
        ConfigError: A tracker library recorded for the run is not installed.
    """
    run_dir = Path(run_dir)
    state, report = read_state(run_dir), run_dir / "report"
    done: list[str] = []
    ml = state.get("mlflow") or {}
    if ml.get("parent") and report.is_dir():
        cfg = TrackingConfig(mlflow=True, mlflow_uri=str(ml["uri"]))
        MlflowExport(cfg, dict(resolved or {}), run_dir).finish([], report=report)
        done.append("mlflow")
    tb = state.get("tensorboard") or {}
    if tb.get("log_dir") and report.is_dir():
        cfg = TrackingConfig(tensorboard=True, tensorboard_dir=str(tb["log_dir"]))
        text = "```json\n" + json.dumps(_read_summary(run_dir), indent=1)[:60000] + "\n```"
        TensorboardExport(cfg, dict(resolved or {}), run_dir).report(report, text)
        done.append("tensorboard")
    return done


def _check(cfg: TrackingConfig, ctx: CheckContext) -> None:
    """An enabled tracker's library must be installed (checked without importing it)."""
    for field, module, package in (
        ("mlflow", "mlflow", "mlflow"),
        ("tensorboard", "tensorboard", "tensorboard"),
    ):
        if getattr(cfg, field) and importlib.util.find_spec(module) is None:
            ctx.fail(
                field,
                f"needs {package}, which is not installed; install the extra with "
                f"pip install 'geofl[tracking]', or set tracking.{field}: false",
            )


@SUBSCRIBERS.register("tracking", params=TrackingConfig, check=_check)
def build_tracking(
    cfg: TrackingConfig, *, experiment: Mapping[str, Any], run_dir: Path
) -> Subscriber:
    """Export the runs to MLflow and/or TensorBoard (:mod:`geofl.tracking`)."""
    return TrackingSubscriber(cfg, experiment, run_dir)
