"""Export runs to experiment trackers: MLflow and TensorBoard (optional extra ``tracking``).

:class:`~geofl.tracking.subscriber.TrackingSubscriber` observes a run like any engine
subscriber (config ``tracking: {mlflow: true, tensorboard: true}`` or ``geofl run
--track mlflow``); :func:`~geofl.tracking.subscriber.log_report` adds the rendered report.
Neither library is imported until an exporter is built.
"""

from __future__ import annotations

__all__: list[str] = []
