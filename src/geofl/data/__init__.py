"""Data: the synthetic generator, real-format loaders, split and partitioners."""

from geofl.data.base import DATASETS, GeoDataset

__all__ = ["DATASETS", "GeoDataset"]
