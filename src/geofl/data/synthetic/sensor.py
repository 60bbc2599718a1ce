"""The sensor half of the synthetic Sentinel-2 generators: atmosphere, band grids, noise.

Shared by :mod:`geofl.data.synthetic.landcover` (one land-cover class per patch) and
:mod:`geofl.data.synthetic.multilabel` (mosaics of several classes). Given per-pixel
material weights and per-patch material spectra, these functions mix reflectance on each
band's native grid (10 m: B02-B04, B08; 20 m: B05-B07, B8A, B11, B12; 60 m: B01, B09, B10),
add an illumination gain, a Rayleigh-like haze offset, water-vapour absorption in B09 and
band-dependent sensor noise, and write uint16 reflectance x 10000 resampled
nearest-neighbour onto the 10 m grid (see the generative model in
:mod:`geofl.data.synthetic.landcover`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from geofl.data.reflectance import SCALE

__all__ = [
    "RESOLUTION_GROUPS",
    "band_grid_sides",
    "finish_bands",
    "mix_materials",
    "sensor_state",
]

Tensor = torch.Tensor

#: Illumination gain by season (winter, spring, summer, autumn).
_SEASON_GAIN = (0.8, 0.97, 1.05, 0.9)
_WAVELENGTH_NM = (443, 490, 560, 665, 705, 740, 783, 842, 865, 945, 1375, 1610, 2190)
#: Rayleigh-like path-reflectance shape (lambda^-4, normalised at B01; B10 is above it all).
_HAZE_SHAPE = tuple(0.0 if w == 1375 else (443 / w) ** 4 for w in _WAVELENGTH_NM)
#: Relative sensor noise per band (60 m bands are averages, so quieter; B10 nearly none).
_NOISE_SHAPE = (0.5, 1.0, 1.0, 1.0, 0.8, 0.8, 0.8, 1.0, 0.8, 0.5, 0.05, 0.8, 0.8)
#: Band groups by native resolution: (metres, band indices, box size over the previous grid);
#: a 20 m pixel covers 2x2 10 m pixels, a 60 m pixel 3x3 20 m pixels.
RESOLUTION_GROUPS: tuple[tuple[int, tuple[int, ...], int], ...] = (
    (10, (1, 2, 3, 7), 1),
    (20, (4, 5, 6, 8, 11, 12), 2),
    (60, (0, 9, 10), 3),
)


def sensor_state(
    illumination_jitter: float,
    haze_gain: float,
    region_haze: Tensor,
    season: Tensor,
    gen: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-patch sensor and atmosphere state, in units of reflectance x 10000.

    Args:
        illumination_jitter: Std of the per-patch log illumination gain.
        haze_gain: Multiplier of the haze offset.
        region_haze: ``[n]`` mean haze of each patch's region.
        season: ``[n]`` int64 season indices.
        gen: Random generator (draws gain, vapour, haze and cirrus, in that order).

    Returns:
        ``gain [n]`` illumination gain, ``vapour [n]`` B09 water-vapour factor and
        ``offset [n, 13]`` path-reflectance offset (+ 0.5 as the integer cast truncates).
    """
    n = season.shape[0]
    gain = torch.tensor(_SEASON_GAIN)[season] * torch.exp(
        illumination_jitter * torch.randn(n, generator=gen)
    )
    vapour = torch.exp(0.15 * torch.randn(n, generator=gen))
    haze = haze_gain * (region_haze + 0.04 * torch.rand(n, generator=gen))
    offset = (0.05 + haze).view(n, 1) * torch.tensor(_HAZE_SHAPE)  # [n, 13]
    offset[:, 10] = 0.0008 + 0.002 * torch.rand(n, generator=gen)  # thin cirrus only
    return gain, vapour, offset * SCALE + 0.5


def band_grid_sides(size: int) -> list[int]:
    """Side length of the 10 m, 20 m and 60 m band grids of a ``size``-pixel patch."""
    sides = [size]
    for _, _, pool in RESOLUTION_GROUPS[1:]:
        sides.append(math.ceil(sides[-1] / pool))
    return sides


def mix_materials(weights: Tensor, spec: Tensor, offset: Tensor | None) -> list[Tensor]:
    """Linear mixing of material spectra on each band group's native grid.

    Args:
        weights: ``[b, M, S, S]`` material weights on the 10 m grid.
        spec: ``[b, M, 13]`` material spectra (reflectance x 10000, gain applied).
        offset: ``[b, 13]`` path-reflectance offset added to every pixel, or None.

    Returns:
        One ``[b, bands, side, side]`` tensor per :data:`RESOLUTION_GROUPS` entry:
        ``offset + sum_m weight_m * spectrum_m`` with weights box-averaged to the grid.
    """
    b, m = weights.shape[:2]
    out = []
    for _, bands, pool in RESOLUTION_GROUPS:
        if pool > 1:  # box-average the weights onto the band's coarser grid
            weights = _box_mean(weights, pool)
        sel, side = list(bands), weights.shape[-1]
        mats, flat = spec[:, :, sel].transpose(1, 2), weights.reshape(b, m, -1)
        refl = (
            torch.bmm(mats, flat)
            if offset is None
            else torch.baddbmm(offset[:, sel].unsqueeze(-1), mats, flat)
        )
        out.append(refl.view(b, len(bands), side, side))
    return out


def finish_bands(
    noise_std: float, groups: list[Tensor], out: np.ndarray, gen: torch.Generator
) -> None:
    """Add band-dependent sensor noise at native resolution and write ``out``.

    Args:
        noise_std: Sensor noise std (reflectance) of the 10 m bands.
        groups: Per band group ``[n, bands, side, side]`` reflectance x 10000 (modified).
        out: uint16 ``[n, 13, S, S]`` destination, resampled nearest-neighbour to 10 m.
        gen: Random generator.
    """
    out_t = torch.from_numpy(out)
    for (res, bands, _), dest in zip(RESOLUTION_GROUPS, groups, strict=True):
        std = noise_std * SCALE * torch.tensor([_NOISE_SHAPE[i] for i in bands])
        dest.addcmul_(torch.randn(dest.shape, generator=gen), std.view(1, -1, 1, 1))
        _write_blocks(out_t, bands, dest.clamp_(0.5, SCALE + 0.5), res // 10)


def _box_mean(x: Tensor, k: int) -> Tensor:
    """Average ``x`` ``[..., h, w]`` over ``k x k`` blocks (partial blocks at the far edges)."""
    if k == 2 and x.shape[-1] % 2 == 0 and x.shape[-2] % 2 == 0:  # fast path, no pooling op
        return (x[..., ::2, ::2] + x[..., 1::2, ::2] + x[..., ::2, 1::2] + x[..., 1::2, 1::2]) / 4
    return F.avg_pool2d(x, k, ceil_mode=True)


def _write_blocks(out: Tensor, bands: tuple[int, ...], src: Tensor, factor: int) -> None:
    """Nearest-neighbour upsample ``src`` ``[n, len(bands), h, h]`` into ``out[:, bands]``.

    Each source pixel fills a ``factor x factor`` block of ``out`` (uint16 ``[n, 13, S, S]``),
    as a coarse band resampled onto the 10 m grid; the last block row/column is cut at the
    patch edge. Writes go through strided views, without a full-size temporary.
    """
    n, size = out.shape[0], out.shape[-1]
    if factor == 1:
        for j, band in enumerate(bands):
            out[:, band].copy_(src[:, j])
        return
    full = size // factor
    edge = full * factor
    for j, band in enumerate(bands):
        dst, low = out[:, band], src[:, j]
        if factor == 2 and edge == size:
            for dy in range(2):
                for dx in range(2):
                    dst[:, dy::2, dx::2].copy_(low)
            continue
        blocks = dst[:, :edge, :edge].view(n, full, factor, full, factor)
        blocks.copy_(low[:, :full, None, :full, None].expand(n, full, factor, full, factor))
        if edge < size:  # partial blocks along the right and bottom edges, and the corner
            rem = size - edge
            right = dst[:, :edge, edge:].view(n, full, factor, rem)
            right.copy_(low[:, :full, None, full : full + 1].expand(n, full, factor, rem))
            bottom = dst[:, edge:, :edge].view(n, rem, full, factor)
            bottom.copy_(low[:, full : full + 1, :full, None].expand(n, rem, full, factor))
            dst[:, edge:, edge:].copy_(low[:, full : full + 1, full : full + 1].expand(n, rem, rem))
