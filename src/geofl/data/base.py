"""The in-memory dataset every geofl loader produces, and the dataset registry.

Datasets that fit in memory (EuroSAT-size data does) live as one image tensor: on 2 cores a
tensor slice per batch beats a DataLoader by a wide margin. Loaders for real on-disk
formats decode once into a cached array file (:mod:`geofl.data.cache`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from geofl.errors import ConfigError
from geofl.registry import Registry

__all__ = [
    "DATASETS",
    "RGB_BANDS",
    "SENTINEL2_BANDS",
    "ArrayDataset",
    "DatasetBuilder",
]

#: Sentinel-2 L1C band names in EuroSAT-MS order (13 bands).
SENTINEL2_BANDS: tuple[str, ...] = (
    "B01",
    "B02",
    "B03",
    "B04",
    "B05",
    "B06",
    "B07",
    "B08",
    "B8A",
    "B09",
    "B10",
    "B11",
    "B12",
)
#: The RGB view of a Sentinel-2 patch (red, green, blue).
RGB_BANDS: tuple[str, ...] = ("B04", "B03", "B02")


@dataclass(frozen=True)
class ArrayDataset:
    """A labelled collection of samples held as arrays (not a spatially indexed dataset).

    Named so it does not suggest torchgeo's ``GeoDataset``, which indexes rasters by
    bounding box; every geofl loader produces one of these from a standard layout.

    Attributes:
        inputs: ``[N, C, H, W]`` float32 images, reflectance-like scale (roughly 0..1; RGB
            images are divided by 255).
        targets: ``[N]`` int64 class indices into ``classes``.
        classes: Class names, index-aligned with label values.
        bands: Band names, index-aligned with the channel axis (``("R", "G", "B")`` for
            RGB imagery, Sentinel-2 band names for multispectral data).
        metadata: Per-sample arrays of length ``N`` (e.g. ``region``, ``elevation_mean``,
            ``season``, ``gsd_m``). Absent keys mean the source does not provide them.
        name: Short dataset name used in logs and reports.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    classes: tuple[str, ...]
    bands: tuple[str, ...]
    metadata: Mapping[str, np.ndarray] = field(default_factory=dict)
    name: str = "dataset"

    def __post_init__(self) -> None:
        n = self.inputs.shape[0]
        if self.inputs.ndim != 4:
            raise ValueError(f"inputs must be [N, C, H, W], got shape {tuple(self.inputs.shape)}")
        if self.targets.shape != (n,):
            raise ValueError(f"targets must be [{n}], got shape {tuple(self.targets.shape)}")
        if self.inputs.shape[1] != len(self.bands):
            raise ValueError(
                f"inputs have {self.inputs.shape[1]} channels but {len(self.bands)} band names"
            )
        for key, arr in self.metadata.items():
            if len(arr) != n:
                raise ValueError(f"metadata[{key!r}] has {len(arr)} entries, expected {n}")

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.classes)

    def subset(self, index: np.ndarray | torch.Tensor) -> ArrayDataset:
        """A new dataset holding the samples at ``index`` (copies the selected rows)."""
        idx = torch.as_tensor(np.asarray(index), dtype=torch.long)
        meta = {k: np.asarray(v)[idx.numpy()] for k, v in self.metadata.items()}
        return ArrayDataset(
            self.inputs[idx], self.targets[idx], self.classes, self.bands, meta, self.name
        )

    def select_bands(self, bands: Sequence[str] | str) -> ArrayDataset:
        """Keep only ``bands`` ("all", "rgb" or a list of band names), in that order.

        Raises:
            ConfigError: naming ``data.bands`` when a band is not in the dataset.
        """
        if bands == "all":
            return self
        wanted: Sequence[str]
        if bands == "rgb":
            wanted = RGB_BANDS if set(RGB_BANDS) <= set(self.bands) else ("R", "G", "B")
        elif isinstance(bands, str):
            raise ConfigError("data.bands", f"expected 'all', 'rgb' or a list, got {bands!r}")
        else:
            wanted = bands
        missing = [b for b in wanted if b not in self.bands]
        if missing:
            raise ConfigError(
                "data.bands",
                f"bands {missing} not in dataset {self.name!r}; available: {list(self.bands)}",
            )
        chan = [self.bands.index(b) for b in wanted]
        return ArrayDataset(
            self.inputs[:, chan].contiguous(),
            self.targets,
            self.classes,
            tuple(wanted),
            self.metadata,
            self.name,
        )

    def label_histogram(self) -> np.ndarray:
        """``[num_classes]`` int64 count of samples per class."""
        return np.bincount(self.targets.numpy(), minlength=self.num_classes).astype(np.int64)


class DatasetBuilder(Protocol):
    """Factory registered in :data:`DATASETS`: validated params → :class:`ArrayDataset`."""

    def __call__(self, params: object, *, cache_dir: Path) -> ArrayDataset: ...


#: Dataset registry: ``synthetic``, ``eurosat_rgb``, ``eurosat_ms``, ``ucmerced``, ...
DATASETS: Registry[ArrayDataset] = Registry("dataset")
