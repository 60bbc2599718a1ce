"""Data: the synthetic generator, real-format loaders, split and partitioners."""

from geofl.data.base import DATASETS, ArrayDataset

__all__ = ["DATASETS", "ArrayDataset"]
