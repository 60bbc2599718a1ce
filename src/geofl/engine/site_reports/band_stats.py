"""Site-local normalisation (``data.sites``): per-band sufficient statistics, combined.

Each site computes per-band sufficient statistics of its raw train split (:class:`BandStats`:
count, Σx, Σx² in float64, :func:`band_stats`); the server adds them in site order and
releases the global mean and (unbiased) std (:func:`combine_band_stats`), which every site
applies to its splits (:func:`~geofl.engine.sites.normalised`). What a site discloses here
is those 2·C + 1 numbers of its train split (C bands) — aggregate statistics, *not*
differentially private: with one site's count known, they reveal that site's per-band mean
and variance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["STATS_CHUNK", "BandStats", "band_stats", "combine_band_stats"]

#: Samples per chunk when a site sums its band statistics (bounded float64 memory).
STATS_CHUNK = 256


@dataclass(frozen=True)
class BandStats:
    """Per-band sufficient statistics of a site's raw train split (what it releases).

    Attributes:
        count: Values per band (N·H·W for images, N for features).
        sum: ``[C]`` float64 Σx per band.
        sumsq: ``[C]`` float64 Σx² per band.
    """

    count: int
    sum: np.ndarray
    sumsq: np.ndarray


def band_stats(inputs: torch.Tensor) -> BandStats:
    """:class:`BandStats` of ``[N, C, H, W]`` or ``[N, F]`` float32 inputs, summed in
    float64 over chunks of :data:`STATS_CHUNK` samples in order."""
    dims = (0,) if inputs.ndim == 2 else (0, 2, 3)
    c = int(inputs.shape[1])
    s, q = torch.zeros(c, dtype=torch.float64), torch.zeros(c, dtype=torch.float64)
    for start in range(0, int(inputs.shape[0]), STATS_CHUNK):
        x = inputs[start : start + STATS_CHUNK].to(torch.float64)
        s += x.sum(dim=dims)
        q += (x * x).sum(dim=dims)
    count = int(inputs.numel() // c) if c else 0
    return BandStats(count, s.numpy(), q.numpy())


def combine_band_stats(stats: Sequence[BandStats], ndim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global per-band mean and std from every site's :class:`BandStats`, in site order.

    n = Σ count, μ = Σ sum / n, σ = √(max(Σ sumsq − n·μ², 0) / (n − 1)) clamped to ≥ 1e-6
    (the unbiased std the central mode uses, :meth:`~geofl.data.base.ArrayDataset.input_stats`).

    Args:
        stats: One per site, in site order.
        ndim: 4 for images (``[1, C, 1, 1]`` results), 2 for features (``[1, F]``).

    Returns:
        ``(mean, std)`` float32.
    """
    n = sum(int(s.count) for s in stats)
    total = np.zeros_like(stats[0].sum)
    squares = np.zeros_like(stats[0].sumsq)
    for s in stats:
        total = total + s.sum
        squares = squares + s.sumsq
    mean = total / max(n, 1)
    var = np.maximum(squares - n * mean * mean, 0.0) / max(n - 1, 1)
    std = np.maximum(np.sqrt(var), 1e-6)
    shape = (1, -1, 1, 1) if ndim == 4 else (1, -1)
    return (
        torch.from_numpy(mean.astype(np.float32)).reshape(shape),
        torch.from_numpy(std.astype(np.float32)).reshape(shape),
    )
