"""Object detectors (torchvision FCOS, RetinaNet, Faster R-CNN) from scratch; importing
registers them. :mod:`~geofl.models.detection.tvops` makes torchvision's operators work on
a CPU-only torch."""

from geofl.models.detection import detectors
from geofl.models.detection.tvops import ensure_torchvision_ops

__all__ = ["detectors", "ensure_torchvision_ops"]
