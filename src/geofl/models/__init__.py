"""Model families and the flat-parameter workspace; importing registers them."""

from geofl.models import cnn, detection, mlp, resnet
from geofl.models.base import MODELS, FlatModel, ParamSpec

__all__ = ["MODELS", "FlatModel", "ParamSpec", "cnn", "detection", "mlp", "resnet"]
