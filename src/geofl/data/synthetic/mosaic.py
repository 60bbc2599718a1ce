"""The mosaic engine of the synthetic Sentinel-2 generators: several classes per patch.

Shared by :mod:`geofl.data.synthetic.multilabel` (13 CORINE-style labels),
:mod:`geofl.data.synthetic.bigearthnet` (the BigEarthNet-19 nomenclature, 001 §6.1.1) and
:mod:`geofl.data.synthetic.sen12ms` (simplified IGBP single labels, 001 §6.1.1). A generator
decides *which* classes a patch holds (its label model); this module lays them out and
paints them with the physics of :mod:`geofl.data.synthetic.landcover`:

1. **Layout** (:func:`layout`). Each present class gets a smooth random field (wavelength
   ``size / 3``) plus a bias (``dominant_bias`` for the dominant class, U(−0.5, 0.5) for the
   others); a softmax with sharpness 4 over the present classes gives per-pixel cover
   fractions with mixed pixels at the boundaries, times a smooth brightness field.
2. **Paint** (:func:`paint`). Each class draws its own texture and materials
   (:class:`MosaicClasses`, :mod:`~geofl.data.synthetic.textures`) weighted by its cover,
   with per-patch material spectra (phenology by season, region tint, jitter), then the
   sensor model of :mod:`~geofl.data.synthetic.sensor` (illumination gain, haze, water
   vapour, 10/20/60 m band grids, noise) writes uint16 reflectance x 10000.
3. **Metadata** (:func:`patch_metadata`): elevation, roughness, lat/lon scattered around
   each patch's region.

Every function takes the chunk's ``torch.Generator`` and draws in a fixed order, so a
generator's output depends only on its parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from geofl.data.reflectance import SCALE
from geofl.data.synthetic.landcover import (
    CHUNK,
    Regions,
    SyntheticParams,
    material_spectra,
    patch_metadata,
)
from geofl.data.synthetic.sensor import (
    RESOLUTION_GROUPS,
    band_grid_sides,
    finish_bands,
    mix_materials,
    sensor_state,
)
from geofl.data.synthetic.textures import TEXTURES, smooth_noise

__all__ = [
    "MosaicClasses",
    "affinity_label_sets",
    "affinity_matrix",
    "balanced_priors",
    "cover_fractions",
    "layout",
    "paint",
    "patch_metadata",
    "run_chunks",
]

Tensor = torch.Tensor
#: ``(chunk index, uint16 [n, 13, S, S] buffer to fill) -> per-patch arrays [n, ...]``.
ChunkFn = Callable[[int, np.ndarray], dict[str, Tensor]]


class MosaicClasses(NamedTuple):
    """How each of ``L`` classes looks: texture, materials, terrain roughness.

    Attributes:
        names: ``L`` class names, in label order.
        textures: Index into :data:`~geofl.data.synthetic.textures.TEXTURES` per class.
        materials: Per class, material names
            (:data:`~geofl.data.synthetic.landcover.MATERIAL_SPECTRA` keys) mapped onto the
            texture's weight channels in order.
        roughness: Terrain-roughness factor per class (water flat, forest rugged).
    """

    names: tuple[str, ...]
    textures: tuple[int, ...]
    materials: tuple[tuple[str, ...], ...]
    roughness: tuple[float, ...]

    def head(self, num: int) -> MosaicClasses:
        """The first ``num`` classes."""
        return MosaicClasses(
            self.names[:num], self.textures[:num], self.materials[:num], self.roughness[:num]
        )


def affinity_matrix(
    num: int, groups: Sequence[Sequence[int]], extra: dict[tuple[int, int], float]
) -> Tensor:
    """``[L, L]`` symmetric co-occurrence multiplier: 2.5 within a group, ``extra`` pairs."""
    a = torch.ones(num, num)
    for group in groups:
        for i in group:
            a[i, list(group)] = 2.5
    for (i, j), v in extra.items():
        a[i, j] = a[j, i] = v
    return a


def affinity_label_sets(
    prior: Tensor, affinity: Tensor, n: int, max_labels: int, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Dominant-class label model: regions ``[n]``, dominant ``[n]``, present ``[n, L]`` bool.

    ``region ~ U(R)``, ``dominant ~ Categorical(prior[region])``; every other class ``l``
    joins with probability ``min(0.8, 1.2 · prior[region, l] · affinity[dominant, l])``; at
    most ``max_labels`` are kept (the dominant one and a random subset of the rest). The
    first ``min(n, L)`` patches are forced to have each class dominant once.
    """
    num = prior.shape[1]
    region = torch.randint(0, prior.shape[0], (n,), generator=gen)
    dominant = torch.multinomial(prior[region], 1, generator=gen)[:, 0]
    forced = min(n, num)
    dominant[:forced] = torch.arange(forced)
    region[:forced] = torch.multinomial(prior[:, :forced].T + 1e-3, 1, generator=gen)[:, 0]
    p = (1.2 * prior[region] * affinity[dominant]).clamp(max=0.8)
    present = torch.rand(n, num, generator=gen) < p
    present[torch.arange(n), dominant] = True
    priority = torch.rand(n, num, generator=gen) + present.float()
    priority[torch.arange(n), dominant] = 3.0
    keep = priority.argsort(dim=1, descending=True)[:, :max_labels]
    capped = torch.zeros_like(present).scatter_(1, keep, True)
    return region, dominant, present & capped


def balanced_priors(base: Tensor, target: Tensor, iters: int = 200) -> Tensor:
    """``[R, L]`` region priors near ``base`` whose mean over regions is ``target``.

    Sinkhorn scaling of ``base`` (``[R, L]``, positive): rows are scaled to sum to 1 and
    columns to sum to ``R · target[l]`` in turn, so that drawing the region uniformly and
    then the class from its prior gives class frequencies ``target`` (``[L]``, sums to 1).
    """
    p = base.double().clone()
    col = target.double() * base.shape[0]
    for _ in range(iters):
        p = p / p.sum(1, keepdim=True)
        p = p * (col / p.sum(0)).unsqueeze(0)
    return (p / p.sum(1, keepdim=True)).float()


def layout(
    present: Tensor,
    dominant: Tensor,
    size: int,
    brightness_texture: float,
    gen: torch.Generator,
    dominant_bias: float = 1.0,
    other_bias: float = -0.5,
    floor: float = 0.0,
) -> Tensor:
    """``[n, L, S, S]`` per-pixel cover of the present classes times a brightness field.

    The dominant class's field is raised by ``dominant_bias``, the others' by
    ``U(other_bias, 0.5)``. With ``floor`` > 0 each of the ``k`` present classes also takes
    ``floor / k`` of every pixel (sub-pixel mixing: hedgerows, parcels below 10 m), so
    that each covers at least that share of the patch.
    """
    n, num = present.shape
    field = smooth_noise(n * num, size, size / 3, gen).view(n, num, size, size)
    bias = other_bias + (0.5 - other_bias) * torch.rand(n, num, generator=gen)
    bias[torch.arange(n), dominant] = dominant_bias
    score = 4.0 * (field + bias[:, :, None, None])
    score = score.masked_fill(~present[:, :, None, None], float("-inf"))
    cover = torch.softmax(score, dim=1)
    if floor > 0:
        share = present.float() / present.sum(1, keepdim=True)
        cover = (1 - floor) * cover + floor * share[:, :, None, None]
    wobble = smooth_noise(n, size, 12.0, gen).mul_(brightness_texture).add_(1.0)
    return cover * wobble.unsqueeze(1)


def cover_fractions(cover: Tensor) -> Tensor:
    """``[n, L]`` share of each class in the patch (rows sum to 1)."""
    mean = cover.mean(dim=(2, 3))
    return mean / mean.sum(1, keepdim=True)


def paint(
    params: SyntheticParams,
    regions: Regions,
    classes: MosaicClasses,
    ctx: tuple[Tensor, Tensor, Tensor],
    cover: Tensor,
    out: np.ndarray,
    gen: torch.Generator,
) -> None:
    """Paint the classes' textures and spectra by ``cover`` and write ``out``.

    Args:
        params: Sensor parameters (noise, jitter, haze, illumination).
        regions: Per-region geography (haze, tint, ground sampling distance).
        classes: Texture and materials of each of the ``L`` classes.
        ctx: ``region [n]``, ``season [n]`` (int64) and ``present [n, L]`` bool.
        cover: ``[n, L, S, S]`` cover from :func:`layout`.
        out: uint16 ``[n, 13, S, S]`` destination (reflectance x 10000,
            :data:`~geofl.data.base.SENTINEL2_BANDS` order).
        gen: The chunk's random generator.
    """
    region, season, present = ctx
    n, size = out.shape[0], out.shape[-1]
    gain, vapour, offset = sensor_state(
        params.illumination_jitter, params.haze, regions.haze[region], season, gen
    )
    groups = [
        offset[:, list(bands), None, None].expand(n, len(bands), side, side).clone()
        for (_, bands, _), side in zip(RESOLUTION_GROUPS, band_grid_sides(size), strict=True)
    ]
    scale = 10.0 / regions.gsd[region]
    for label, (tex, mats) in enumerate(zip(classes.textures, classes.materials, strict=True)):
        idx = present[:, label].nonzero()[:, 0]
        b = idx.numel()
        if b == 0:
            continue
        weights = TEXTURES[tex](b, size, scale[idx], gen) * cover[idx, label].unsqueeze(1)
        spec = material_spectra(
            mats, season[idx], regions.tint[region[idx]], params.spectral_jitter, gen
        )
        spec = spec * (gain[idx] * SCALE).view(b, 1, 1)
        spec[:, :, 9] *= vapour[idx].view(b, 1)
        spec[:, :, 10] = 0.0
        for dest, refl in zip(groups, mix_materials(weights, spec, None), strict=True):
            dest[idx] += refl
    finish_bands(params.noise_std, groups, out, gen)


def run_chunks(
    n: int,
    size: int,
    chunk: ChunkFn,
    bands: Sequence[int] = tuple(range(13)),
    dtypes: dict[str, type[np.generic]] | None = None,
) -> dict[str, np.ndarray]:
    """Generate ``n`` patches in chunks of :data:`~geofl.data.synthetic.landcover.CHUNK`.

    Args:
        n: Number of patches.
        size: Patch side in pixels.
        chunk: Fills a uint16 ``[m, 13, S, S]`` buffer with chunk ``k`` and returns its
            per-patch arrays.
        bands: Indices of the 13 Sentinel-2 bands to keep, in output order.
        dtypes: Output dtype per per-patch key (int64 for ``region`` and ``season``, float32
            for the rest unless stated).

    Returns:
        ``images`` uint16 ``[n, len(bands), S, S]`` and each per-patch key concatenated.
    """
    kinds: dict[str, type[np.generic]] = {"region": np.int64, "season": np.int64}
    kinds.update(dtypes or {})
    keep = list(bands)
    images = np.empty((n, len(keep), size, size), dtype=np.uint16)
    buffer = None if len(keep) == 13 else np.empty((min(n, CHUNK), 13, size, size), np.uint16)
    parts: dict[str, list[np.ndarray]] = {}
    for lo in range(0, n, CHUNK):
        m = min(CHUNK, n - lo)
        dest = images[lo : lo + m] if buffer is None else buffer[:m]
        for key, val in chunk(lo // CHUNK, dest).items():
            parts.setdefault(key, []).append(val.numpy())
        if buffer is not None:
            images[lo : lo + m] = dest[:, keep]
    out: dict[str, np.ndarray] = {"images": images}
    for key, vals in parts.items():
        out[key] = np.concatenate(vals).astype(kinds.get(key, np.float32))
    return out
