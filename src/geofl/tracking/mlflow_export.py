"""MLflow export: one parent run per geofl run directory, one child run per (method, seed).

By default the runs go to a file store in ``RUN_DIR/mlruns`` (no server;
``mlflow ui --backend-store-uri RUN_DIR/mlruns`` shows them); ``tracking.mlflow_uri`` points
elsewhere (a server, ``sqlite:///…``). MLflow keeps its file store in maintenance mode
behind ``MLFLOW_ALLOW_FILE_STORE``; geofl sets that variable (when unset) for file stores
only, and ``MLFLOW_DISABLE_TELEMETRY`` (when unset), since a run makes no network calls.

* parent: params = the resolved config, flattened (:func:`~geofl.tracking.params.flatten`);
  at the end ``config.yaml``, ``run.json``, ``summary.json`` and the report as artefacts.
* child (tag ``mlflow.parentRunId``): params = the config with this method's entry and the
  seed; metrics = every round's scalars with the round as step
  (:func:`~geofl.tracking.params.round_metrics`), then the final ones; artefacts =
  ``final.json`` and ``partition.json``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote, urlparse

from geofl.config.schema import TrackingConfig
from geofl.errors import ConfigError
from geofl.events import RunInfo
from geofl.records import RoundRecord
from geofl.tracking.params import final_metrics, flatten, method_params, round_metrics
from geofl.tracking.probe import cause, check_sqlite, check_writable_dir, fast_http
from geofl.tracking.state import read_state, require, update_state

__all__ = ["MlflowExport", "metric_key"]

#: Params per ``log_batch`` call (MLflow's limit is 100).
_PARAM_BATCH = 100
#: Metrics per ``log_batch`` call (MLflow's limit is 1000).
_METRIC_BATCH = 1000


def metric_key(name: str) -> str:
    """``name`` with characters MLflow refuses in keys replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", name)


def _is_file_store(uri: str) -> bool:
    return urlparse(uri).scheme in ("", "file")


def _store_schemes() -> frozenset[str] | None:
    """The URI schemes MLflow has a tracking store for (its registry, plug-ins included);
    None when this MLflow keeps them elsewhere."""
    try:
        from mlflow.tracking._tracking_service import utils

        return frozenset(utils._tracking_store_registry._registry)
    except (ImportError, AttributeError):
        return None


def _local_problem(uri: str) -> str | None:
    """Why the store of a file or SQLite ``uri`` cannot be written (None: it can, or the
    store is remote)."""
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        return check_sqlite(uri)
    if _is_file_store(uri):
        return check_writable_dir(Path(unquote(parsed.path)))
    return None


class MlflowExport:
    """Logs a geofl run to MLflow (see the module docstring).

    Args:
        cfg: The ``tracking`` section.
        resolved: The resolved experiment config (plain data).
        run_dir: The run directory.

    Raises:
        ConfigError: ``mlflow`` (the ``tracking`` extra) is not installed.
    """

    def __init__(self, cfg: TrackingConfig, resolved: Mapping[str, Any], run_dir: Path) -> None:
        # No network at run time: MLflow's usage telemetry stays off unless the user says
        # otherwise (set before mlflow is first imported).
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        require("mlflow", "tracking.mlflow")
        self.run_dir = Path(run_dir)
        self.uri = cfg.mlflow_uri or (self.run_dir.resolve() / "mlruns").as_uri()
        self.experiment = cfg.experiment or str(resolved.get("name") or "geofl")
        self.resolved = {k: v for k, v in resolved.items() if k != "tracking"}
        self._client: Any = None
        self._run: str | None = None

    # ------------------------------------------------------------------ plumbing
    def client(self) -> Any:
        """The ``MlflowClient`` (created on first use, when the run directory exists)."""
        if self._client is None:
            if _is_file_store(self.uri):
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def _log(
        self,
        run_id: str,
        metrics: Mapping[str, float] = {},
        step: int = 0,
        params: Mapping[str, str] = {},
    ) -> None:
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        ms = [Metric(metric_key(k), v, now, step) for k, v in metrics.items()]
        ps = [Param(metric_key(k), v) for k, v in params.items()]
        client = self.client()
        for i in range(0, len(ps), _PARAM_BATCH):
            client.log_batch(run_id, params=ps[i : i + _PARAM_BATCH])
        for i in range(0, len(ms), _METRIC_BATCH):
            client.log_batch(run_id, metrics=ms[i : i + _METRIC_BATCH])

    def parent(self) -> str:
        """The id of this run directory's parent run (created, with params, on first use)."""
        state = read_state(self.run_dir).get("mlflow") or {}
        if state.get("parent") and state.get("uri") == self.uri:
            return str(state["parent"])
        client = self.client()
        found = client.get_experiment_by_name(self.experiment)
        exp_id = (
            found.experiment_id if found is not None else client.create_experiment(self.experiment)
        )
        name = str(self.resolved.get("name") or self.run_dir.name)
        run = client.create_run(exp_id, run_name=name, tags={"geofl.run_dir": str(self.run_dir)})
        self._log(run.info.run_id, params=flatten(self.resolved))
        ids = {"experiment_id": exp_id, "parent": run.info.run_id, "runs": {}}
        update_state(self.run_dir, "mlflow", {"uri": self.uri, **ids})
        return str(run.info.run_id)

    def check(self) -> None:
        """Before round 1: the URI's scheme has a store, a local store can be written, and
        the experiment and this run's parent run can be created (or found, on resume) with
        no HTTP retry and a short timeout, instead of MLflow's minutes of retries.

        Raises:
            ConfigError: naming ``tracking.mlflow_uri``, the URI and the cause.
        """
        scheme, schemes = urlparse(self.uri).scheme, _store_schemes()
        if schemes is not None and scheme not in schemes:
            known = ", ".join(sorted(s for s in schemes if s))
            self._refuse(f"unknown scheme {scheme!r} (MLflow knows {known})")
        problem = _local_problem(self.uri)
        if problem is not None:
            self._refuse(problem)
        try:
            with fast_http():
                self.client().get_run(self.parent())
        except Exception as err:  # MLflow, requests, SQLAlchemy and OS errors alike
            self._client = None  # its sessions may hold the failed connection
            self._refuse(cause(err))

    def _refuse(self, why: str) -> NoReturn:
        raise ConfigError(
            "tracking.mlflow_uri",
            f"{self.uri} cannot be used: {why}; fix the URI or the server, or set "
            "tracking.mlflow: false",
        )

    # ------------------------------------------------------------------ events
    def start(self, info: RunInfo, earlier: Iterable[RoundRecord]) -> None:
        """Open (or, on resume, reopen) the child run; log ``earlier`` rounds if it is new."""
        parent = self.parent()
        key = f"{info.method}/{info.seed}"
        runs = dict((read_state(self.run_dir).get("mlflow") or {}).get("runs") or {})
        if key in runs:
            self._run = str(runs[key])
            self.client().update_run(self._run, status="RUNNING")
            return
        run = self.client().create_run(
            self.client().get_run(parent).info.experiment_id,
            run_name=f"{info.method} seed {info.seed}",
            tags={
                "mlflow.parentRunId": parent,
                "geofl.method": info.method,
                "geofl.seed": str(info.seed),
            },
        )
        self._run = str(run.info.run_id)
        update_state(self.run_dir, "mlflow", {"runs": {**runs, key: self._run}})
        self._log(self._run, params=method_params(self.resolved, info.method, info.seed))
        for record in earlier:
            self.round(record)

    def round(self, record: RoundRecord) -> None:
        """Log one round's scalars with the round as step."""
        if self._run is not None:
            self._log(self._run, round_metrics(record), step=record.round)

    def end(self, info: RunInfo, final: Mapping[str, Any]) -> None:
        """Final metrics and the seed's ``final.json``/``partition.json``; close the child."""
        if self._run is None:
            return
        self._log(self._run, final_metrics(final), step=info.rounds)
        for name in ("final.json", "partition.json"):
            if (info.out_dir / name).is_file():
                self.client().log_artifact(self._run, str(info.out_dir / name))
        self.client().set_terminated(self._run, status="FINISHED")
        self._run = None

    def finish(
        self,
        files: Iterable[Path],
        report: Path | None = None,
        summary: Mapping[str, float] | None = None,
    ) -> None:
        """Log the run-level ``files``, the ``report`` folder and ``summary`` metrics (e.g.
        ``fedavg/final_test_accuracy``: the mean over seeds) to the parent; close it."""
        parent, client = self.parent(), self.client()
        if summary:
            self._log(parent, summary)
        for path in files:
            if path.is_file():
                client.log_artifact(parent, str(path))
        if report is not None and report.is_dir():
            client.log_artifacts(parent, str(report), artifact_path="report")
        client.set_terminated(parent, status="FINISHED")
