"""Trained models outside their run: :func:`load_model` and predictions for image files.

* :mod:`geofl.inference.load` — :func:`load_model` returns a run's model as an
  ``nn.Module`` with its preprocessing (band selection, standardisation), from the seed's
  ``model.json`` (:mod:`geofl.models.spec`) and ``best.pt`` / ``checkpoint.pt``;
* :mod:`geofl.inference.outputs` — network outputs → the prediction columns of each task;
* :mod:`geofl.inference.predict` — image files and folders → a prediction CSV
  (``geofl predict``).
"""

from geofl.inference.load import GeoflModel, load_model
from geofl.inference.outputs import prediction_columns
from geofl.inference.predict import collect_images, predict_to_csv

__all__ = ["GeoflModel", "collect_images", "load_model", "predict_to_csv", "prediction_columns"]
