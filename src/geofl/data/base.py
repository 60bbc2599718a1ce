"""The dataset every geofl loader produces, and the dataset registry.

Datasets that fit in memory (EuroSAT-size data does) live as one input tensor: on 2 cores a
tensor slice per batch beats a DataLoader by a wide margin. Loaders for real on-disk
formats decode once into a cached array file (:mod:`geofl.data.storage.cache`). With
``data.cache: mmap`` the decode cache is an on-disk array store (:mod:`geofl.data.storage.store`)
and ``inputs`` is a :class:`~geofl.data.storage.lazy.StoredRows` view that reads only the rows a
mini-batch needs; subsets and band selections of it are views too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

import numpy as np
import torch

from geofl.data.storage.lazy import StoredRows
from geofl.data.targets import DEFAULT_BINS, TargetKind, check_targets, label_codes, label_counts
from geofl.errors import ConfigError, DataError
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
#: EuroSAT's land-cover classes, sorted (its label order): the real reader and the
#: synthetic generator share them.
EUROSAT_CLASSES: tuple[str, ...] = (
    "AnnualCrop",
    "Forest",
    "HerbaceousVegetation",
    "Highway",
    "Industrial",
    "Pasture",
    "PermanentCrop",
    "Residential",
    "River",
    "SeaLake",
)
#: The RGB view of a Sentinel-2 patch (red, green, blue).
RGB_BANDS: tuple[str, ...] = ("B04", "B03", "B02")


@dataclass(frozen=True)
class ArrayDataset:
    """A collection of samples and their targets held as arrays (not a spatially indexed
    dataset).

    Named so it does not suggest torchgeo's ``GeoDataset``, which indexes rasters by
    bounding box; every geofl loader produces one of these from a standard layout.

    Attributes:
        inputs: ``[N, C, H, W]`` float32 images, reflectance-like scale (roughly 0..1; RGB
            images are divided by 255), or ``[N, F]`` float32 tabular features; a tensor,
            or for images a :class:`StoredRows` view of an on-disk store (``data.cache:
            mmap``) that yields such tensors per batch.
        targets: Per ``target_kind`` (:mod:`geofl.data.targets`): ``[N]`` int64 class ids
            (``class``), ``[N]`` int64 0/1 (``binary``), ``[N, C]`` float32 multi-hot
            (``multi_hot``), ``[N]`` or ``[N, T]`` float32 values (``real``).
        classes: Names index-aligned with the targets: the classes, the two binary outcomes
            (negative first), the multi-hot labels, or the ``T`` real target variables.
        bands: Names index-aligned with ``inputs.shape[1]``: band names (``("R", "G",
            "B")`` for RGB imagery, Sentinel-2 names for multispectral data), or the
            feature names of tabular inputs.
        metadata: Per-sample arrays of length ``N`` (e.g. ``region``, ``elevation_mean``,
            ``season``, ``gsd_m``, ``farm``). Absent keys mean the source does not provide
            them.
        name: Short dataset name used in logs and reports.
        target_kind: What ``targets`` hold. Stated, not derived: ``[N]`` int64 may be class
            ids or 0/1 outcomes and ``[N, C]`` float32 multi-hot labels or real values.

    Raises:
        DataError: at construction when shapes, dtypes or values disagree with the kind.
    """

    inputs: Inputs
    targets: torch.Tensor
    classes: tuple[str, ...]
    bands: tuple[str, ...]
    metadata: Mapping[str, np.ndarray] = field(default_factory=dict)
    name: str = "dataset"
    target_kind: TargetKind = "class"

    def __post_init__(self) -> None:
        n = self.inputs.shape[0]
        if self.inputs.ndim not in (2, 4):
            raise DataError(
                f"inputs must be [N, C, H, W] images or [N, F] features, got shape "
                f"{tuple(self.inputs.shape)}"
            )
        if self.inputs.shape[1] != len(self.bands):
            kind = "features" if self.is_tabular else "channels"
            raise DataError(
                f"inputs have {self.inputs.shape[1]} {kind} but {len(self.bands)} band names"
            )
        check_targets(self.targets, self.target_kind, len(self.classes), n)
        for key, arr in self.metadata.items():
            if len(arr) != n:
                raise DataError(f"metadata[{key!r}] has {len(arr)} entries, expected {n}")

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_classes(self) -> int:
        """Number of classes (labels for multi-hot, target variables for real targets)."""
        return len(self.classes)

    @property
    def is_tabular(self) -> bool:
        """True for ``[N, F]`` feature inputs, False for ``[N, C, H, W]`` images."""
        return self.inputs.ndim == 2

    def subset(self, index: np.ndarray | torch.Tensor) -> ArrayDataset:
        """A new dataset holding the samples at ``index``.

        In-memory inputs are copied; stored inputs become a view holding only the indices
        (clients and splits share the one store).
        """
        idx = torch.as_tensor(np.asarray(index), dtype=torch.long)
        meta = {k: np.asarray(v)[idx.numpy()] for k, v in self.metadata.items()}
        return replace(
            self, inputs=take_rows(self.inputs, idx), targets=self.targets[idx], metadata=meta
        )

    def select_bands(self, bands: Sequence[str] | str) -> ArrayDataset:
        """Keep only ``bands`` ("all", "rgb" or a list of band or feature names), in order.

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
        inputs = (
            self.inputs.select_channels(chan)
            if isinstance(self.inputs, StoredRows)
            else self.inputs[:, chan].contiguous()
        )
        return replace(self, inputs=inputs, bands=tuple(wanted))

    def input_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-band (per-feature) mean and standard deviation for standardisation.

        Stored inputs are reduced in one pass
        (:meth:`~geofl.data.storage.lazy.StoredRows.channel_mean_std`).

        Returns:
            ``(mean, std)``, each ``[1, C, 1, 1]`` for images or ``[1, F]`` for features,
            float32; ``std`` is clamped to at least ``1e-6``.
        """
        if isinstance(self.inputs, StoredRows):
            return self.inputs.channel_mean_std()
        dims = (0,) if self.is_tabular else (0, 2, 3)
        mean = self.inputs.mean(dim=dims, keepdim=True)
        std = self.inputs.std(dim=dims, keepdim=True).clamp_min(1e-6)
        return mean, std

    def label_codes(self, bins: int = DEFAULT_BINS) -> np.ndarray:
        """``[N]`` int64 label attribute per sample (:func:`geofl.data.targets.label_codes`):
        the class id, the rarest present label (``C`` for none) or a quantile bin of the
        first real target. Stratify splits on this."""
        return label_codes(
            self.targets.numpy(), self.target_kind, bins, num_classes=self.num_classes
        )

    def histogram_columns(self) -> tuple[str, ...]:
        """Names of the columns of a label histogram or partition histogram of this data:
        the classes, or ``"<first target> q1"`` … ``q5`` quantile bins for real targets."""
        if self.target_kind == "real":
            return tuple(f"{self.classes[0]} q{i + 1}" for i in range(DEFAULT_BINS))
        return self.classes

    def label_histogram(self) -> np.ndarray:
        """``[num_classes]`` int64: samples per class, or positives per multi-hot label.

        Raises:
            DataError: for ``real`` targets, which have no classes to count; use
                :meth:`label_codes` (quantile bins) instead.
        """
        if self.target_kind == "real":
            raise DataError(
                f"dataset {self.name!r} has real-valued targets; count label_codes() "
                "(quantile bins) instead of a class histogram"
            )
        t = self.targets.numpy()
        return label_counts(t, self.target_kind, self.num_classes)


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
