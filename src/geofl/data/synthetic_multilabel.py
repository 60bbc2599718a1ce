"""Synthetic multi-label Sentinel-2-like land-cover mosaics (BigEarthNet-style labels).

Paper 001 (§4.1) trains multi-label scene recognition on BigEarthNet: Sentinel-2 patches
annotated with every CORINE land-cover class present, with frequent classes (urban fabric,
arable land, forests) and rare ones (wetlands, burnt areas) whose F1 suffers most under
federated DP. This generator makes patches of that kind with the physics of
:mod:`geofl.data.synthetic` (material spectra, phenology, haze, 10/20/60 m band grids,
sensor noise), so that multi-label tasks, metrics and partitioners have data to run on.

Generative model, per patch ``i`` (generators ``(seed, "synthetic_multilabel", ...)``):

1. **Region** ``r ~ U(num_regions)``; the region geography (elevation, haze, tint,
   ground sampling distance, lat/lon) is :mod:`~geofl.data.synthetic`'s for the same seed,
   and its archetype (agricultural, coastal, urban, upland) sets a prior over the
   :data:`MULTILABEL_CLASSES`.
2. **Label set.** A dominant class ``d ~ Categorical(prior_r)``; every other class ``l``
   joins independently with probability ``min(0.8, 1.2 · prior_r[l] · A[d, l])``, where the
   affinity ``A`` encodes CORINE-style co-occurrence (farmland classes together, urban
   with industry and arable land, marine waters with beaches and towns, burnt areas in
   coniferous upland, wetlands by inland water). At most ``max_labels`` classes are kept
   (the dominant one and a random subset of the rest).
3. **Layout.** Each present class gets a smooth random field (wavelength ``size / 3``)
   plus a bias (+1 for the dominant class, U(−0.5, 0.5) for the others); a softmax with
   sharpness 4 over the present classes gives per-pixel cover fractions with mixed pixels
   at the boundaries.
4. **Texture and spectra.** Each class paints its own texture and materials
   (:mod:`~geofl.data.synthetic_textures`; coniferous forest and burnt areas use the
   ``conifer`` and ``charred`` spectra) weighted by its cover, then the sensor model of
   :mod:`~geofl.data.synthetic` (gain, haze, water vapour, band resolutions, noise).
5. **Targets.** A class is labelled when it covers at least ``min_cover`` of the patch (a
   minimum mapping unit, as CORINE's 25 ha); the class with the largest cover always is.
   Every chunk of :data:`~geofl.data.synthetic.CHUNK` patches has each class dominant at
   least once, so every label is present whenever ``num_samples >= 13``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset, CacheMode, Inputs
from geofl.data.cache import cache_key, cached_arrays
from geofl.data.lazy import StoredRows
from geofl.data.store import cached_store
from geofl.data.synthetic import (
    CHUNK,
    Regions,
    SyntheticParams,
    draw_regions,
    material_spectra,
    reflectance,
)
from geofl.data.synthetic_sensor import (
    RESOLUTION_GROUPS,
    SCALE,
    band_grid_sides,
    finish_bands,
    mix_materials,
    sensor_state,
)
from geofl.data.synthetic_textures import CLASS_MATERIALS, TEXTURES, smooth_noise
from geofl.rng import torch_generator

__all__ = [
    "MULTILABEL_CLASSES",
    "MULTILABEL_METADATA_KEYS",
    "MultiLabelParams",
    "build_multilabel",
    "generate_multilabel",
]

Tensor = torch.Tensor

#: CORINE / BigEarthNet-19 style land-cover labels (Burnt areas from the 43-class set).
MULTILABEL_CLASSES: tuple[str, ...] = (
    "Urban fabric", "Industrial or commercial units", "Arable land", "Permanent crops",
    "Pastures", "Broad-leaved forest", "Coniferous forest",
    "Natural grassland and sparsely vegetated areas", "Beaches, dunes, sands",
    "Inland wetlands", "Inland waters", "Marine waters", "Burnt areas",
)  # fmt: skip
#: Per-sample metadata arrays next to ``images`` and ``labels``.
MULTILABEL_METADATA_KEYS: tuple[str, ...] = (
    "region", "season", "elevation_mean", "elevation_std", "gsd_m", "lat", "lon",
)  # fmt: skip

# Texture (index into synthetic_textures.TEXTURES) and materials per label; materials map
# onto the texture's weight channels in order.
_TEXTURE = (7, 4, 0, 6, 5, 1, 1, 2, 2, 2, 8, 9, 1)
_MATERIALS: tuple[tuple[str, ...], ...] = (
    *CLASS_MATERIALS[7:8], *CLASS_MATERIALS[4:5], *CLASS_MATERIALS[0:1],
    *CLASS_MATERIALS[6:7], *CLASS_MATERIALS[5:6], CLASS_MATERIALS[1],
    ("conifer", "forest_shade", "shrub"), CLASS_MATERIALS[2],
    ("sand", "shrub", "sand", "grass"),  # dunes: sand with sparse vegetation
    ("herbaceous", "turbid_water", "soil", "grass"),  # wetlands: reeds and open pools
    CLASS_MATERIALS[8], CLASS_MATERIALS[9],
    ("charred", "forest_shade", "senescent"),  # burnt stand with scorched gaps
)  # fmt: skip
#: Terrain-roughness factor per label (water and farmland flat, forest rugged).
_ROUGHNESS = (0.8, 0.7, 0.6, 0.9, 1.0, 1.6, 1.8, 1.2, 0.4, 0.4, 0.5, 0.3, 1.6)

# Dominant-class priors per archetype, in MULTILABEL_CLASSES order:
#            urb   ind   ara   per   pas   bro   con   gra   bea   wet   inl   mar   bur
_PRIORS = (
    (0.06, 0.03, 0.38, 0.12, 0.18, 0.07, 0.02, 0.05, 0.00, 0.02, 0.05, 0.00, 0.00),  # agri
    (0.12, 0.08, 0.10, 0.05, 0.08, 0.04, 0.03, 0.06, 0.03, 0.03, 0.04, 0.30, 0.00),  # coast
    (0.38, 0.25, 0.08, 0.03, 0.06, 0.05, 0.01, 0.04, 0.00, 0.01, 0.06, 0.03, 0.00),  # urban
    (0.03, 0.01, 0.05, 0.03, 0.13, 0.22, 0.27, 0.14, 0.00, 0.02, 0.05, 0.00, 0.015),  # upland
)
_GROUPS = ((0, 1), (2, 3, 4), (5, 6, 7, 12), (8, 9, 10, 11))  # built, farm, wild, water
_EXTRA_AFFINITY = {(0, 2): 1.5, (11, 8): 4.0, (11, 0): 1.5, (6, 12): 3.0, (10, 9): 3.0}


def _affinity() -> Tensor:
    """``[L, L]`` co-occurrence multiplier ``A[dominant, other]`` (symmetric)."""
    a = torch.ones(len(MULTILABEL_CLASSES), len(MULTILABEL_CLASSES))
    for group in _GROUPS:
        for i in group:
            a[i, list(group)] = 2.5
    for (i, j), v in _EXTRA_AFFINITY.items():
        a[i, j] = a[j, i] = v
    return a


class MultiLabelParams(SyntheticParams):
    """Parameters of ``synthetic_multilabel`` (sensor parameters as ``synthetic``)."""

    num_samples: int = Field(3000, gt=0, description="Number of patches.")
    size: int = Field(32, ge=16, description="Patch side length in pixels (10 m grid).")
    min_cover: float = Field(
        0.05, gt=0, lt=1, description="Cover fraction from which a class is labelled."
    )
    max_labels: int = Field(5, ge=1, le=13, description="Most classes drawn per patch.")


def _label_sets(
    prior: Tensor, n: int, max_labels: int, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Regions ``[n]``, dominant classes ``[n]`` and label sets ``[n, L]`` bool (step 2)."""
    num = prior.shape[1]
    region = torch.randint(0, prior.shape[0], (n,), generator=gen)
    dominant = torch.multinomial(prior[region], 1, generator=gen)[:, 0]
    forced = min(n, num)  # every class dominant at least once per chunk
    dominant[:forced] = torch.arange(forced)
    region[:forced] = torch.multinomial(prior[:, :forced].T + 1e-3, 1, generator=gen)[:, 0]
    p = (1.2 * prior[region] * _affinity()[dominant]).clamp(max=0.8)
    present = torch.rand(n, num, generator=gen) < p
    present[torch.arange(n), dominant] = True
    # keep the dominant class and a random subset of the others, max_labels in all
    priority = torch.rand(n, num, generator=gen) + present.float()
    priority[torch.arange(n), dominant] = 3.0
    keep = priority.argsort(dim=1, descending=True)[:, :max_labels]
    capped = torch.zeros_like(present).scatter_(1, keep, True)
    return region, dominant, present & capped


def _cover(present: Tensor, dominant: Tensor, size: int, gen: torch.Generator) -> Tensor:
    """``[n, L, S, S]`` per-pixel cover fractions of the present classes (step 3)."""
    n, num = present.shape
    field = smooth_noise(n * num, size, size / 3, gen).view(n, num, size, size)
    bias = torch.rand(n, num, generator=gen) - 0.5
    bias[torch.arange(n), dominant] = 1.0
    score = 4.0 * (field + bias[:, :, None, None])
    score = score.masked_fill(~present[:, :, None, None], float("-inf"))
    return torch.softmax(score, dim=1)


def _generate_chunk(
    params: MultiLabelParams, regions: Regions, prior: Tensor, k: int, out: np.ndarray
) -> dict[str, Tensor]:
    """Fill ``out`` (uint16 ``[n, 13, S, S]``) with chunk ``k``; return targets and metadata."""
    gen = torch_generator(params.seed, "synthetic_multilabel", "chunk", k)
    n, size = out.shape[0], params.size
    region, dominant, present = _label_sets(prior, n, params.max_labels, gen)
    order = torch.randperm(n, generator=gen)
    region, dominant, present = region[order], dominant[order], present[order]
    season = torch.randint(0, 4, (n,), generator=gen)
    cover = _cover(present, dominant, size, gen)
    wobble = smooth_noise(n, size, 12.0, gen).mul_(params.brightness_texture).add_(1.0)
    cover = cover * wobble.unsqueeze(1)
    gain, vapour, offset = sensor_state(
        params.illumination_jitter, params.haze, regions.haze[region], season, gen
    )
    groups = [
        offset[:, list(bands), None, None].expand(n, len(bands), side, side).clone()
        for (_, bands, _), side in zip(RESOLUTION_GROUPS, band_grid_sides(size), strict=True)
    ]
    scale = 10.0 / regions.gsd[region]
    for label, (tex, mats) in enumerate(zip(_TEXTURE, _MATERIALS, strict=True)):
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
    frac = cover.mean(dim=(2, 3)) / cover.mean(dim=(2, 3)).sum(1, keepdim=True)
    targets = frac >= params.min_cover
    targets[torch.arange(n), frac.argmax(dim=1)] = True
    rough = torch.tensor(_ROUGHNESS)[dominant] * regions.roughness[region]
    spread = regions.roughness[region] * 6 + 10
    return {
        "labels": targets,
        "region": region,
        "season": season,
        "elevation_mean": (
            regions.elevation[region] + spread * torch.randn(n, generator=gen)
        ).clamp(min=0.0),
        "elevation_std": rough * torch.exp(0.4 * torch.randn(n, generator=gen)),
        "gsd_m": regions.gsd[region],
        "lat": regions.lat[region] + 0.25 * torch.randn(n, generator=gen),
        "lon": regions.lon[region] + 0.25 * torch.randn(n, generator=gen),
    }


def generate_multilabel(params: MultiLabelParams) -> dict[str, np.ndarray]:
    """Generate the multi-label dataset (see the module docstring).

    Returns:
        ``images`` uint16 ``[N, 13, S, S]`` (reflectance x 10000, ``SENTINEL2_BANDS``
        order), ``labels`` uint8 ``[N, L]`` multi-hot over :data:`MULTILABEL_CLASSES`, and
        metadata ``[N]``: ``region``, ``season`` (int64), ``elevation_mean``,
        ``elevation_std`` (metres), ``gsd_m``, ``lat``, ``lon`` (float32).
    """
    n, size = params.num_samples, params.size
    regions = draw_regions(params)
    jitter = torch_generator(params.seed, "synthetic_multilabel", "priors")
    base = torch.tensor([_PRIORS[r % len(_PRIORS)] for r in range(params.num_regions)])
    prior = (base + 2e-3) * torch.exp(0.3 * torch.randn(base.shape, generator=jitter))
    prior = prior / prior.sum(1, keepdim=True)
    images = np.empty((n, 13, size, size), dtype=np.uint16)
    parts: dict[str, list[np.ndarray]] = {}
    for lo in range(0, n, CHUNK):
        ctx = _generate_chunk(params, regions, prior, lo // CHUNK, images[lo : lo + CHUNK])
        for key, val in ctx.items():
            parts.setdefault(key, []).append(val.numpy())
    out: dict[str, np.ndarray] = {"images": images}
    for key, vals in parts.items():
        arr = np.concatenate(vals)
        kind = {"labels": np.uint8, "region": np.int64, "season": np.int64}
        out[key] = arr.astype(kind.get(key, np.float32))
    return out


@DATASETS.register("synthetic_multilabel", params=MultiLabelParams)
def build_multilabel(
    params: MultiLabelParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """Multi-label 13-band land-cover mosaics, generated once and cached.

    Args:
        params: Dataset parameters.
        cache_dir: Directory of the decode-once array cache.
        cache_mode: ``memory`` (the cache loaded into RAM) or ``mmap`` (an on-disk store,
            ``inputs`` a :class:`~geofl.data.lazy.StoredRows` view read per batch).

    Returns:
        An :class:`ArrayDataset` with ``inputs`` ``[N, 13, S, S]`` float32 reflectance and
        ``multi_hot`` targets ``[N, 13]`` float32.
    """
    key = cache_key("synthetic-multilabel-v1", params.model_dump())
    images: Inputs
    if cache_mode == "mmap":
        source = params.model_dump()
        meta = {"bands": SENTINEL2_BANDS, "classes": MULTILABEL_CLASSES, "source": source}
        arrays, _ = cached_store(
            cache_dir, key, lambda w: w.put_all(generate_multilabel(params)), meta
        )
        images = StoredRows(arrays["images"], scale=SCALE)
    else:
        arrays = cached_arrays(cache_dir, key, lambda: generate_multilabel(params))
        images = reflectance(arrays["images"])
    return ArrayDataset(
        inputs=images,
        targets=torch.from_numpy(np.array(arrays["labels"], dtype=np.float32)),
        classes=MULTILABEL_CLASSES,
        bands=SENTINEL2_BANDS,
        metadata={k: np.array(arrays[k]) for k in MULTILABEL_METADATA_KEYS},
        name="synthetic_multilabel",
        target_kind="multi_hot",
    )
