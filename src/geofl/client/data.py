"""A client's local data (tensors, or a view of the shared on-disk store), and the seeded
mini-batch schedule over it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from geofl.data.base import Inputs

__all__ = ["ClientData", "batch_indices"]


@dataclass(frozen=True)
class ClientData:
    """Local training data of one client.

    Attributes:
        client_id: The client's id.
        inputs: ``[n_k, C, H, W]`` float32 images or ``[n_k, F]`` float32 features
            (already normalised): a tensor, or with ``data.cache: mmap`` a
            :class:`~geofl.data.storage.lazy.StoredRows` index view of the shared image store;
            ``inputs[idx]`` gives the batch either way.
        targets: Per target kind (:mod:`geofl.data.targets`): ``[n_k]`` int64 class ids or
            0/1 outcomes, ``[n_k, C]`` float32 multi-hot, ``[n_k]`` / ``[n_k, T]`` float32.
        label_histogram: ``[C]`` int64 counts of the discrete label attribute (samples per
            class, positives per multi-hot label, samples per quantile bin).
        classes: Class names, index-aligned with ``label_histogram`` (empty if unknown).
        gsd_m: Mean ground sampling distance of the local images in metres, if the
            dataset records it (a resolution indicator for 000 Eq. 3).
        bands: Band names index-aligned with ``inputs.shape[1]`` (empty if unknown).
        band_mean: ``[1, C, 1, 1]`` per-band mean the inputs were standardised with, or
            None (inputs are raw): ``raw = inputs · band_std + band_mean``.
        band_std: ``[1, C, 1, 1]`` per-band std, or None.
        metadata: The client's own per-sample metadata arrays ``[n_k]`` (e.g.
            ``elevation_mean``, ``season``), as the dataset records them.
    """

    client_id: int
    inputs: Inputs
    targets: torch.Tensor
    label_histogram: np.ndarray
    classes: tuple[str, ...] = ()
    gsd_m: float | None = None
    bands: tuple[str, ...] = ()
    band_mean: torch.Tensor | None = None
    band_std: torch.Tensor | None = None
    metadata: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.targets.shape[0])


def batch_indices(
    n: int, batch_size: int, *, epochs: int, steps: int | None, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """Mini-batch index tensors: a fresh permutation per epoch, partial last batch kept.

    Args:
        n: Number of local samples.
        batch_size: B.
        epochs: Passes over the data (ignored when ``steps`` is given).
        steps: If given, exactly this many batches, cycling through new permutations.
        generator: Source of the permutations.

    Yields:
        ``[≤B]`` int64 index tensors.
    """
    done = 0
    epoch = 0
    while True:
        if steps is None and epoch >= epochs:
            return
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            if steps is not None and done >= steps:
                return
            yield perm[start : start + batch_size]
            done += 1
        epoch += 1
