"""Model families and the flat-parameter workspace; importing registers them."""

from geofl.models import cnn, mlp, resnet
from geofl.models.base import MODELS, FlatModel, ParamSpec

__all__ = ["MODELS", "FlatModel", "ParamSpec", "cnn", "mlp", "resnet"]
