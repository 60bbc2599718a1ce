"""The tracking subscriber: a run exported to MLflow and/or TensorBoard as it trains.

Enabled by the config (``tracking: {mlflow: true, tensorboard: true}``) or ``geofl run
--track mlflow --track tensorboard``; observes only (never changes metrics). The engine
builds it before the run directory exists (:func:`build_tracking`: a missing library fails
in one line there, exit 2 in the CLI), calls it per (method, seed) and, once every seed is
done, :meth:`TrackingSubscriber.on_experiment_end`. The CLI adds the rendered report with
:func:`log_report` (so does ``geofl report`` on a tracked run).

A tracker is checked before round 1 (:meth:`TrackingSubscriber.preflight`: one line, exit 2
in the CLI, when it cannot be written). A tracker that fails later costs only its own
export: one warning, the tracker is off for the rest of the process, and the run finishes
with its own files (``rounds.jsonl``, ``final.json``, the report) as without it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from geofl.config.schema import TrackingConfig
from geofl.errors import ConfigError
from geofl.events import SUBSCRIBERS, RunInfo, Subscriber
from geofl.records import RoundRecord, read_rounds
from geofl.registry import CheckContext
from geofl.tracking.mlflow_export import MlflowExport, metric_key
from geofl.tracking.probe import cause
from geofl.tracking.state import read_state, update_state
from geofl.tracking.tensorboard_export import TensorboardExport

__all__ = ["TrackingSubscriber", "build_tracking", "log_report", "summary_metrics"]

log = logging.getLogger("geofl")

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
        self._checked = False

    @property
    def exporters(self) -> list[MlflowExport | TensorboardExport]:
        """The enabled exporters (a failed one is no longer among them)."""
        return [e for e in (self.mlflow, self.tensorboard) if e is not None]

    def preflight(self, run_dir: Path) -> None:
        """Check every enabled tracker once, before round 1 (the run directory exists).

        Raises:
            ConfigError: a tracker cannot be written, naming its URI or directory.
        """
        if not self._checked:
            for exporter in self.exporters:
                exporter.check()
            self._checked = True

    def _guard(
        self, exporter: MlflowExport | TensorboardExport, fn: Callable[..., None], *args: Any
    ) -> None:
        """``fn(*args)``, one export step of ``exporter``; a failure warns once and turns
        ``exporter`` off, so that a tracker never costs the run its own results."""
        try:
            fn(*args)
        except Exception as err:  # any library's error: the run's own files come first
            name = "mlflow" if exporter is self.mlflow else "tensorboard"
            log.warning(
                "tracking: %s export failed (%s: %s); %s is off for the rest of this run, "
                "whose own results are unaffected",
                name,
                type(err).__name__,
                cause(err),
                name,
            )
            if exporter is self.mlflow:
                self.mlflow = None
            else:
                self.tensorboard = None

    def on_run_start(self, info: RunInfo) -> None:
        self.preflight(self.run_dir)  # a FederatedRun driven without run_experiment
        earlier: list[RoundRecord] = []
        if info.start_round > 1:  # resumed: rounds the exporters may not have seen
            path = info.out_dir / "rounds.jsonl"
            earlier = [r for r in read_rounds(path) if r.round < info.start_round]
        tb = self.tensorboard
        if tb is not None:  # so that log_report finds it
            where = {"log_dir": str(tb.log_dir)}
            self._guard(tb, update_state, self.run_dir, "tensorboard", where)
        for exporter in self.exporters:
            self._guard(exporter, exporter.start, info, earlier)

    def on_round_end(self, info: RunInfo, record: RoundRecord) -> None:
        for exporter in self.exporters:
            self._guard(exporter, exporter.round, record)

    def on_run_end(self, info: RunInfo, final: dict[str, Any]) -> None:
        for exporter in self.exporters:
            self._guard(exporter, exporter.end, info, final)

    def on_experiment_end(self, run_dir: Path) -> None:
        """Every seed is done and ``summary.json`` written: log the run-level files and the
        summary's means to the MLflow parent run."""
        ml = self.mlflow
        if ml is not None:
            summary = _read_summary(Path(run_dir))
            files = [Path(run_dir) / name for name in RUN_FILES]
            self._guard(ml, ml.finish, files, None, summary_metrics(summary))


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
        The trackers written to (``[]`` for a run exported to none). A tracker that fails
        is left out with a warning: the report itself is written already.

    Raises:
        ConfigError: A tracker library recorded for the run is not installed.
    """
    run_dir = Path(run_dir)
    state, report = read_state(run_dir), run_dir / "report"
    done: list[str] = []
    ml = state.get("mlflow") or {}
    if ml.get("parent") and report.is_dir():
        cfg = TrackingConfig(mlflow=True, mlflow_uri=str(ml["uri"]))
        export = MlflowExport(cfg, dict(resolved or {}), run_dir)
        if _reported("mlflow", export.finish, [], report):
            done.append("mlflow")
    tb = state.get("tensorboard") or {}
    if tb.get("log_dir") and report.is_dir():
        cfg = TrackingConfig(tensorboard=True, tensorboard_dir=str(tb["log_dir"]))
        text = "```json\n" + json.dumps(_read_summary(run_dir), indent=1)[:60000] + "\n```"
        board = TensorboardExport(cfg, dict(resolved or {}), run_dir)
        if _reported("tensorboard", board.report, report, text):
            done.append("tensorboard")
    return done


def _reported(name: str, fn: Callable[..., None], *args: Any) -> bool:
    """``fn(*args)``; whether it worked (a failure is one warning naming ``name``)."""
    try:
        fn(*args)
    except ConfigError:
        raise
    except Exception as err:  # any library's error: the report is on disk already
        log.warning(
            "tracking: the report was not logged to %s (%s: %s)",
            name,
            type(err).__name__,
            cause(err),
        )
        return False
    return True


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
