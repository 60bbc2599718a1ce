"""The dataset every geofl loader produces, and the dataset registry.

Datasets that fit in memory (EuroSAT-size data does) live as one image tensor: on 2 cores a
tensor slice per batch beats a DataLoader by a wide margin. Loaders for real on-disk
formats decode once into a cached array file (:mod:`geofl.data.cache`). With
``data.cache: mmap`` the decode cache is an on-disk array store (:mod:`geofl.data.store`)
and ``inputs`` is a :class:`~geofl.data.lazy.StoredRows` view that reads only the rows a
mini-batch needs; subsets and band selections of it are views too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

import numpy as np
import torch

from geofl.data.lazy import StoredRows
from geofl.errors import ConfigError
from geofl.registry import Registry

__all__ = [
    "DATASETS",
    "RGB_BANDS",
    "SENTINEL2_BANDS",
    "ArrayDataset",
    "CacheMode",
    "DatasetBuilder",
    "Inputs",
    "standardized_view",
    "take_rows",
]

#: Samples as an in-memory float32 tensor or a lazily read view of an on-disk store; both
#: have ``shape``, ``len`` and return a float32 tensor for ``inputs[index_tensor]`` / slices.
Inputs: TypeAlias = torch.Tensor | StoredRows


def take_rows(inputs: Inputs, index: torch.Tensor) -> Inputs:
    """The rows at ``index`` (``[m]`` int64): a copy of a tensor, a view of stored rows."""
    if isinstance(inputs, StoredRows):
        return inputs.take(index.numpy())
    return inputs[index]


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
            images are divided by 255): a tensor, or a :class:`StoredRows` view of an
            on-disk store (``data.cache: mmap``) that yields such tensors per batch.
        targets: ``[N]`` int64 class indices into ``classes``.
        classes: Class names, index-aligned with label values.
        bands: Band names, index-aligned with the channel axis (``("R", "G", "B")`` for
            RGB imagery, Sentinel-2 band names for multispectral data).
        metadata: Per-sample arrays of length ``N`` (e.g. ``region``, ``elevation_mean``,
            ``season``, ``gsd_m``). Absent keys mean the source does not provide them.
        name: Short dataset name used in logs and reports.
    """

    inputs: Inputs
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
        """A new dataset holding the samples at ``index``.

        In-memory inputs are copied; stored inputs become a view holding only the indices
        (clients and splits share the one store).
        """
        idx = torch.as_tensor(np.asarray(index), dtype=torch.long)
        meta = {k: np.asarray(v)[idx.numpy()] for k, v in self.metadata.items()}
        return ArrayDataset(
            take_rows(self.inputs, idx),
            self.targets[idx],
            self.classes,
            self.bands,
            meta,
            self.name,
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
            self.inputs.select_channels(chan)
            if isinstance(self.inputs, StoredRows)
            else self.inputs[:, chan].contiguous(),
            self.targets,
            self.classes,
            tuple(wanted),
            self.metadata,
            self.name,
        )

    def label_histogram(self) -> np.ndarray:
        """``[num_classes]`` int64 count of samples per class."""
        return np.bincount(self.targets.numpy(), minlength=self.num_classes).astype(np.int64)


def standardized_view(ds: ArrayDataset, mean: torch.Tensor, std: torch.Tensor) -> ArrayDataset:
    """``ds`` whose stored inputs yield ``(x − mean) / std`` (``[1, C, 1, 1]`` each).

    Raises:
        TypeError: if ``ds.inputs`` is an in-memory tensor (standardise it in place).
    """
    if not isinstance(ds.inputs, StoredRows):
        raise TypeError("standardized_view is for stored inputs; standardise tensors in place")
    return replace(ds, inputs=ds.inputs.standardized(mean, std))


class DatasetBuilder(Protocol):
    """Factory registered in :data:`DATASETS`: validated params → :class:`ArrayDataset`."""

    def __call__(self, params: object, *, cache_dir: Path) -> ArrayDataset: ...


#: Decode-cache modes: ``memory`` (arrays in RAM) or ``mmap`` (an on-disk store read per
#: batch). Builders that support ``mmap`` take a ``cache_mode`` keyword argument.
CacheMode: TypeAlias = Literal["memory", "mmap"]


#: Dataset registry: ``synthetic``, ``eurosat_rgb``, ``eurosat_ms``, ``ucmerced``, ...
DATASETS: Registry[ArrayDataset] = Registry("dataset")
