"""Embedded synthetic Sentinel-2-like land-cover dataset (EuroSAT classes, 13 bands).

Generative model, per patch ``i`` (all draws from :func:`geofl.rng.torch_generator`):

1. **Region.** ``region_i ~ Uniform(num_regions)``. Each region is built from an archetype
   (agricultural, coastal, urban, upland; cycled when ``num_regions > 4``) with seeded
   perturbations: a class prior, a centre (lat/lon), an elevation mean/roughness, a ground
   sampling distance (``gsd_m``, 10 m or 20 m for the upland archetype), a mean haze and a
   soil/vegetation tint (a feature shift between regions, as federated clients would see).
2. **Label and context.** ``label_i ~ Categorical(prior[region_i])``; ``season_i ~ U{0..3}``;
   ``elevation_mean_i``, ``elevation_std_i``, ``lat_i``, ``lon_i`` scattered around the
   region's values. Every chunk of :data:`CHUNK` patches holds at least one patch per
   class, so every class is present whenever ``num_samples >= 10``.
3. **Texture.** A class-specific spatial model (:mod:`geofl.data.synthetic.textures`) draws
   per-pixel weights over two to five materials (stripes, orchard grids, roads, meanders,
   roofs, canopy noise...). Classes share materials (asphalt and grass appear in Highway,
   Residential and Industrial), so the mean spectrum alone does not separate them.
4. **Spectra.** Each material has a typical surface reflectance (:data:`MATERIAL_SPECTRA`,
   :mod:`geofl.data.synthetic.spectra`).
   Per patch, vegetation is blended towards a senescent spectrum by season, tinted by
   region, and jittered (brightness and spectral slope, ``spectral_jitter``).
   ``reflectance[b, y, x] = sum_m weight[m, y, x] * spectrum[m, b]`` times a smooth
   within-patch brightness field.
5. **Sensor and atmosphere.** A per-patch illumination gain (season and
   ``illumination_jitter``), a Rayleigh-like haze offset (strongest in B01/B02), water
   vapour absorption in B09 and a near-zero cirrus band B10. 20 m bands (B05-B07, B8A,
   B11, B12) are box-averaged over 2x2 pixels and 60 m bands (B01, B09, B10) over 6x6,
   then resampled nearest-neighbour onto the 10 m grid; band-dependent Gaussian noise
   (``noise_std``) is drawn at each band's native resolution. Stored as uint16
   reflectance x 10000.

Generation runs in fixed chunks of :data:`CHUNK` patches, each with its own generator
derived from ``(seed, "synthetic", "chunk", k)`` and batched per class with torch ops. The
output depends only on the parameters, and the leading full chunks do not depend on
``num_samples`` (a larger dataset extends a smaller one).

The region container and per-patch site metadata (:class:`Regions`,
:func:`patch_metadata`, :mod:`geofl.data.synthetic.regions`) and the material spectra
(:mod:`geofl.data.synthetic.spectra`) are shared with the mosaic generators and re-exported
here; this module keeps the EuroSAT classes, archetypes and the generator itself.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from geofl.data.base import (
    DATASETS,
    EUROSAT_CLASSES,
    SENTINEL2_BANDS,
    ArrayDataset,
    CacheMode,
)
from geofl.data.reflectance import SCALE, reflectance
from geofl.data.storage.cache import cache_key, cached_arrays
from geofl.data.storage.lazy import StoredRows
from geofl.data.storage.store import StoreWriter, cached_store
from geofl.data.synthetic.regions import Regions, patch_metadata
from geofl.data.synthetic.sensor import (
    RESOLUTION_GROUPS,
    band_grid_sides,
    finish_bands,
    mix_materials,
    sensor_state,
)
from geofl.data.synthetic.spectra import MATERIAL_SPECTRA, material_spectra
from geofl.data.synthetic.textures import CLASS_MATERIALS, TEXTURES, smooth_noise
from geofl.rng import torch_generator

__all__ = [
    "CHUNK",
    "MATERIAL_SPECTRA",
    "METADATA_KEYS",
    "SYNTHETIC_CLASSES",
    "Regions",
    "SyntheticParams",
    "build_synthetic",
    "draw_regions",
    "generate_synthetic",
    "material_spectra",
    "patch_metadata",
]

Tensor = torch.Tensor

#: EuroSAT land-cover classes, in EuroSAT label order.
SYNTHETIC_CLASSES: tuple[str, ...] = EUROSAT_CLASSES
#: Per-sample metadata arrays returned next to ``images`` and ``labels``.
METADATA_KEYS: tuple[str, ...] = (
    "region",
    "elevation_mean",
    "elevation_std",
    "season",
    "gsd_m",
    "lat",
    "lon",
)
#: Patches per generation chunk (each chunk has its own derived generator).
CHUNK = 256


class _Archetype(NamedTuple):
    prior: tuple[float, ...]  # over SYNTHETIC_CLASSES
    elevation_m: float
    roughness_m: float
    gsd_m: float
    haze: float


# Class priors over SYNTHETIC_CLASSES:
#   AnnualCrop Forest Herbaceous Highway Industrial Pasture PermanentCrop Residential River SeaLake
_ARCHETYPES: tuple[_Archetype, ...] = (
    _Archetype(  # agricultural lowland
        (0.22, 0.06, 0.09, 0.07, 0.03, 0.14, 0.18, 0.06, 0.09, 0.06), 180.0, 8.0, 10.0, 0.02
    ),
    _Archetype(  # coast: water, ports, towns
        (0.06, 0.06, 0.08, 0.06, 0.07, 0.08, 0.05, 0.10, 0.19, 0.25), 15.0, 3.0, 10.0, 0.035
    ),
    _Archetype(  # urban: built-up and roads
        (0.06, 0.05, 0.07, 0.16, 0.22, 0.05, 0.04, 0.25, 0.06, 0.04), 120.0, 6.0, 10.0, 0.03
    ),
    _Archetype(  # forested upland, coarser 20 m product
        (0.04, 0.30, 0.19, 0.05, 0.03, 0.16, 0.05, 0.05, 0.09, 0.04), 850.0, 40.0, 20.0, 0.01
    ),
)
#: Terrain-roughness factor per class (water and crops flat, forest rugged).
_CLASS_ROUGHNESS = (0.6, 1.6, 1.2, 0.8, 0.7, 1.0, 0.9, 0.8, 0.5, 0.3)


class SyntheticParams(BaseModel):
    """Parameters of the synthetic Sentinel-2-like land-cover dataset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_samples: int = Field(6000, gt=0, description="Number of patches.")
    size: int = Field(64, ge=16, description="Patch side length in pixels (10 m grid).")
    seed: int = Field(0, description="Seed of all random draws.")
    num_regions: int = Field(4, ge=1, description="Geographic regions with distinct priors.")
    noise_std: float = Field(
        0.012, ge=0, description="Sensor noise std (reflectance) of the 10 m bands."
    )
    spectral_jitter: float = Field(
        0.12, ge=0, description="Per-patch relative variability of material spectra."
    )
    illumination_jitter: float = Field(
        0.12, ge=0, description="Std of the per-patch log illumination gain."
    )
    haze: float = Field(
        1.0, ge=0, description="Multiplier of the per-patch atmospheric haze offset."
    )
    brightness_texture: float = Field(
        0.08, ge=0, description="Amplitude of smooth within-patch brightness variation."
    )


def draw_regions(params: SyntheticParams) -> Regions:
    """Draw the per-region parameters from the archetypes (cycled) and seeded jitter."""
    gen = torch_generator(params.seed, "synthetic", "regions")
    r = params.num_regions
    arch = [_ARCHETYPES[i % len(_ARCHETYPES)] for i in range(r)]
    prior = torch.tensor([a.prior for a in arch]) * torch.exp(
        0.3 * torch.randn(r, len(SYNTHETIC_CLASSES), generator=gen)
    )
    return Regions(
        prior=prior / prior.sum(1, keepdim=True),
        elevation=torch.tensor([a.elevation_m for a in arch])
        * torch.exp(0.2 * torch.randn(r, generator=gen)),
        roughness=torch.tensor([a.roughness_m for a in arch]),
        gsd=torch.tensor([a.gsd_m for a in arch]),
        haze=torch.tensor([a.haze for a in arch]),
        lat=36.0 + 22.0 * torch.rand(r, generator=gen),
        lon=-8.0 + 36.0 * torch.rand(r, generator=gen),
        tint=1.0 + 0.08 * torch.randn(r, 2, generator=gen),
    )


def _draw_context(regions: Regions, n: int, gen: torch.Generator) -> dict[str, Tensor]:
    """Labels, regions and per-patch metadata of one chunk (each ``[n]``)."""
    num_classes = len(SYNTHETIC_CLASSES)
    region = torch.randint(0, regions.prior.shape[0], (n,), generator=gen)
    label = torch.multinomial(regions.prior[region], 1, generator=gen)[:, 0]
    forced = min(n, num_classes)  # one patch per class in every chunk
    label[:forced] = torch.arange(forced)
    region[:forced] = torch.multinomial(regions.prior[:, :forced].T, 1, generator=gen)[:, 0]
    order = torch.randperm(n, generator=gen)
    label, region = label[order], region[order]
    return {
        "labels": label,
        "region": region,
        "season": torch.randint(0, 4, (n,), generator=gen),
        **patch_metadata(regions, torch.tensor(_CLASS_ROUGHNESS)[label], region, gen),
    }


def _generate_chunk(
    params: SyntheticParams, regions: Regions, k: int, out: np.ndarray
) -> dict[str, Tensor]:
    """Fill ``out`` (uint16 ``[n, 13, S, S]``) with chunk ``k``; return its metadata ``[n]``."""
    gen = torch_generator(params.seed, "synthetic", "chunk", k)
    n, size = out.shape[0], params.size
    ctx = _draw_context(regions, n, gen)
    label, region, season = ctx["labels"], ctx["region"], ctx["season"]
    gain, vapour, offset = sensor_state(
        params.illumination_jitter, params.haze, regions.haze[region], season, gen
    )
    sides = band_grid_sides(size)
    groups = [
        torch.empty(n, len(g[1]), s, s) for g, s in zip(RESOLUTION_GROUPS, sides, strict=True)
    ]

    for c in range(len(SYNTHETIC_CLASSES)):
        idx = (label == c).nonzero()[:, 0]
        b = idx.numel()
        if b == 0:
            continue
        weights = TEXTURES[c](b, size, 10.0 / ctx["gsd_m"][idx], gen)  # [b, M, S, S]
        wobble = smooth_noise(b, size, 12.0, gen).mul_(params.brightness_texture).add_(1.0)
        weights = weights.mul_(wobble.unsqueeze(1))
        spec = material_spectra(
            CLASS_MATERIALS[c], season[idx], regions.tint[region[idx]], params.spectral_jitter, gen
        )
        spec = spec * (gain[idx] * SCALE).view(b, 1, 1)
        spec[:, :, 9] *= vapour[idx].view(b, 1)
        spec[:, :, 10] = 0.0
        for dest, refl in zip(groups, mix_materials(weights, spec, offset[idx]), strict=True):
            dest[idx] = refl
    finish_bands(params.noise_std, groups, out, gen)
    return ctx


def generate_synthetic(
    params: SyntheticParams, sink: Callable[[int, np.ndarray], None] | None = None
) -> dict[str, np.ndarray]:
    """Generate the synthetic dataset.

    Args:
        params: Dataset parameters.
        sink: If given, called with ``(first_row, images)`` for each generated chunk of
            ``≤ CHUNK`` images (e.g. a store writer, so the images never sit in RAM at
            once), and ``images`` is left out of the result.

    Returns:
        ``images`` uint16 ``[N, 13, H, W]`` (reflectance x 10000, bands in
        ``SENTINEL2_BANDS`` order), ``labels`` int64 ``[N]`` indices into
        :data:`SYNTHETIC_CLASSES`, and per-patch metadata ``[N]``: ``region`` and
        ``season`` (int64), ``elevation_mean``, ``elevation_std`` (metres), ``gsd_m``,
        ``lat``, ``lon`` (float32).
    """
    n, size = params.num_samples, params.size
    regions = draw_regions(params)
    rows = n if sink is None else min(n, CHUNK)  # the whole array, or one chunk's buffer
    images = np.empty((rows, 13, size, size), dtype=np.uint16)
    parts: dict[str, list[np.ndarray]] = {}
    for lo in range(0, n, CHUNK):
        dest = images[lo : lo + CHUNK] if sink is None else images[: min(CHUNK, n - lo)]
        ctx = _generate_chunk(params, regions, lo // CHUNK, dest)
        if sink is not None:
            sink(lo, dest)
        for key, val in ctx.items():
            parts.setdefault(key, []).append(val.numpy())
    out: dict[str, np.ndarray] = {"images": images} if sink is None else {}
    for key, vals in parts.items():
        arr = np.concatenate(vals)
        out[key] = arr.astype(np.int64 if key in ("labels", "region", "season") else np.float32)
    return out


def _stored_synthetic(params: SyntheticParams, cache_dir: Path) -> ArrayDataset:
    """The synthetic dataset as an on-disk store, generated into it chunk by chunk."""
    n, size = params.num_samples, params.size

    def build(writer: StoreWriter) -> None:
        writer.create("images", (n, 13, size, size), np.uint16)
        sink = partial(writer.write_rows, "images")
        writer.put_all(generate_synthetic(params, sink=sink))

    meta = {"bands": SENTINEL2_BANDS, "classes": SYNTHETIC_CLASSES, "source": params.model_dump()}
    key = cache_key("synthetic-v1", params.model_dump())
    arrays, _ = cached_store(cache_dir, key, build, meta)
    return ArrayDataset(
        inputs=StoredRows(arrays["images"], scale=SCALE),
        targets=torch.from_numpy(np.array(arrays["labels"], dtype=np.int64)),
        classes=SYNTHETIC_CLASSES,
        bands=SENTINEL2_BANDS,
        metadata={k: np.array(arrays[k]) for k in METADATA_KEYS},
        name="synthetic",
    )


@DATASETS.register("synthetic", params=SyntheticParams)
def build_synthetic(
    params: SyntheticParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """Synthetic Sentinel-2-like EuroSAT-class patches, generated once and cached.

    Args:
        params: Dataset parameters.
        cache_dir: Directory of the decode-once array cache.
        cache_mode: ``memory`` (the cache loaded into RAM) or ``mmap`` (an on-disk store,
            ``inputs`` a :class:`~geofl.data.storage.lazy.StoredRows` view read per batch).

    Returns:
        A :class:`ArrayDataset` with ``inputs`` ``[N, 13, H, W]`` float32 reflectance.
    """
    if cache_mode == "mmap":
        return _stored_synthetic(params, cache_dir)
    arrays = cached_arrays(
        cache_dir,
        cache_key("synthetic-v1", params.model_dump()),
        lambda: generate_synthetic(params),
    )
    return ArrayDataset(
        inputs=reflectance(arrays["images"]),
        targets=torch.from_numpy(arrays["labels"].astype(np.int64)),
        classes=SYNTHETIC_CLASSES,
        bands=SENTINEL2_BANDS,
        metadata={k: arrays[k] for k in METADATA_KEYS},
        name="synthetic",
    )
