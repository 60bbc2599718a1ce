"""Synthetic SEN12MS-like single-label patches: simplified IGBP classes, 13 Sentinel-2 bands.

Paper 001 (§6.1.1) trains single-label land-cover recognition on SEN12MS (Schmitt et al.,
2019): Sentinel-2 L1C patches from 252 regions of interest (ROIs) spread over the land
masses of the Earth, each ROI acquired in one of four meteorological seasons (the
``ROIs1158_spring``, ``ROIs1868_summer``, ``ROIs1970_fall`` and ``ROIs2017_winter``
sets), labelled with the simplified 10-class IGBP scheme of the SEN12MS / DFC2020
baselines (:data:`SEN12MS_CLASSES`). The majority class of a patch is its single label.
This generator makes such patches with the physics of :mod:`geofl.data.synthetic.landcover` through
the mosaic engine :mod:`geofl.data.synthetic.mosaic`.

Generative model (generators ``(seed, "synthetic_sen12ms", ...)``):

1. **Regions (ROIs).** ``num_regions`` regions cycle through four biomes (temperate,
   tropical, arid, boreal/mountain; :data:`BIOMES`), each with its latitude band, elevation,
   terrain roughness and haze (humid tropics hazier, boreal air clearest). Region ``r``'s
   season is ``(r + r // 4) mod 4`` (every biome seen in two seasons once there are 8
   regions), as each SEN12MS ROI belongs to one seasonal set; seasons drive vegetation
   phenology and the illumination gain. Region tint (soil brightness, vegetation NIR) and
   the class prior are jittered per seed.
2. **Class priors.** Biome affinities times the target frequencies
   :data:`SEN12MS_TARGET_FREQUENCIES`, Sinkhorn-balanced
   (:func:`~geofl.data.synthetic.mosaic.balanced_priors`) so that a uniformly drawn region
   and then a dominant class gives exactly the target frequencies on average. The targets
   are a stated choice with SEN12MS's kind of imbalance (savanna, croplands, forest and
   grassland common; urban, water, barren, shrubland less so; wetlands and snow/ice rare),
   not SEN12MS's own counts.
3. **Mosaic.** The dominant class plus co-occurring ones (vegetation classes together,
   water with wetlands, croplands with urban land, snow with barren rock; at most
   ``max_labels`` classes) laid out as smooth regions with the dominant class favoured,
   each painted with its texture and materials (snow: high visible and low SWIR; water:
   dark NIR; vegetation: red edge and high NIR, browning out of season).
4. **Label.** The class with the largest cover, as SEN12MS's single label is the majority
   of its (IGBP) land-cover map.
5. **Sensor.** Illumination gain by season and jitter, a per-region haze offset
   (Rayleigh-like, strongest in B01/B02), water vapour in B09, a near-zero cirrus B10, 20 m
   and 60 m bands at native resolution resampled onto the 10 m grid (SEN12MS distributes all
   13 bands at 10 m), noise; stored as uint16 reflectance x 10000 like S2 L1C digital
   numbers and read back as float reflectance (÷ 10000).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset, CacheMode
from geofl.data.cached import cached_dataset
from geofl.data.synthetic.landcover import Regions, SyntheticParams
from geofl.data.synthetic.mosaic import (
    MosaicClasses,
    affinity_label_sets,
    affinity_matrix,
    balanced_priors,
    cover_fractions,
    layout,
    paint,
    patch_metadata,
    run_chunks,
)
from geofl.data.synthetic.textures import CLASS_MATERIALS
from geofl.rng import torch_generator

__all__ = [
    "BIOMES",
    "SEN12MS_CLASSES",
    "SEN12MS_METADATA_KEYS",
    "SEN12MS_SEASONS",
    "SEN12MS_TARGET_FREQUENCIES",
    "SEN12MSParams",
    "build_synthetic_sen12ms",
    "generate_sen12ms",
    "sen12ms_regions",
]

Tensor = torch.Tensor

#: The simplified IGBP scheme of SEN12MS / DFC2020, in label order.
SEN12MS_CLASSES: tuple[str, ...] = (
    "Forest",
    "Shrubland",
    "Savanna",
    "Grassland",
    "Wetlands",
    "Croplands",
    "Urban/Built-up",
    "Snow/Ice",
    "Barren",
    "Water",
)
#: Season names by ``season`` code (the code convention of :mod:`geofl.data.synthetic.landcover`).
SEN12MS_SEASONS: tuple[str, ...] = ("winter", "spring", "summer", "fall")
#: Per-sample metadata arrays next to ``images`` and ``labels``.
SEN12MS_METADATA_KEYS: tuple[str, ...] = (
    "region",
    "season",
    "elevation_mean",
    "elevation_std",
    "gsd_m",
    "lat",
    "lon",
)
#: Target single-label frequencies over :data:`SEN12MS_CLASSES` (sum 1).
SEN12MS_TARGET_FREQUENCIES: tuple[float, ...] = (
    0.16,
    0.06,
    0.20,
    0.15,
    0.02,
    0.18,
    0.08,
    0.01,
    0.06,
    0.08,
)

_CLASSES = MosaicClasses(
    SEN12MS_CLASSES,
    (1, 2, 5, 5, 2, 0, 7, 2, 2, 9),
    (
        CLASS_MATERIALS[1],  # forest canopy, shade, clearings
        ("shrub", "senescent", "soil", "herbaceous"),  # shrubland
        ("herbaceous", "senescent", "forest"),  # savanna: dry grass, scattered trees
        ("grass", "herbaceous", "shrub"),  # grassland
        ("herbaceous", "turbid_water", "soil", "grass"),  # wetlands: reeds and pools
        CLASS_MATERIALS[0],  # croplands: crop / stubble / soil stripes
        CLASS_MATERIALS[7],  # urban: roofs, asphalt, gardens
        ("snow", "rock", "rock", "snow"),  # snow/ice with rock outcrops
        ("rock", "sand", "soil", "shrub"),  # barren: rock, sand, sparse shrubs
        CLASS_MATERIALS[9],  # water with shores
    ),
    (1.6, 1.3, 1.0, 1.0, 0.4, 0.6, 0.8, 2.0, 1.5, 0.3),
)
# Co-occurrence groups: vegetation, wet, human, cold/bare; plus (snow, water) and
# (croplands, grassland) pairs.
_GROUPS = ((0, 1, 2, 3), (4, 9), (5, 6), (7, 8))
_EXTRA_AFFINITY = {(7, 9): 1.5, (5, 3): 2.0}

#: Biomes: name, (lat lo, lat hi), (lon lo, lon hi), elevation m, roughness m, haze, and
#: class affinity (multiplies the target frequency before balancing).
BIOMES: tuple[
    tuple[str, tuple[float, float], tuple[float, float], float, float, float, tuple[float, ...]],
    ...,
] = (
    # Forest Shrub Savanna Grass Wet Crop Urban Snow Barren Water
    (
        "temperate",
        (35.0, 55.0),
        (-120.0, 40.0),
        300.0,
        15.0,
        0.020,
        (1.2, 0.4, 0.5, 1.2, 0.5, 1.7, 1.8, 0.2, 0.3, 1.0),
    ),
    (
        "tropical",
        (-15.0, 15.0),
        (-70.0, 120.0),
        200.0,
        10.0,
        0.045,
        (1.6, 0.5, 2.0, 0.7, 2.0, 1.0, 0.8, 0.01, 0.2, 1.0),
    ),
    (
        "arid",
        (15.0, 35.0),
        (-110.0, 70.0),
        600.0,
        20.0,
        0.030,
        (0.2, 2.2, 1.2, 1.0, 0.2, 0.6, 0.8, 0.05, 3.0, 0.5),
    ),
    (
        "boreal/mountain",
        (50.0, 68.0),
        (-130.0, 140.0),
        900.0,
        40.0,
        0.010,
        (1.5, 0.8, 0.4, 1.0, 1.5, 0.3, 0.3, 5.0, 1.2, 1.6),
    ),
)


class SEN12MSParams(SyntheticParams):
    """Parameters of ``synthetic_sen12ms`` (sensor parameters as ``synthetic``)."""

    num_samples: int = Field(4000, gt=0, description="Number of patches.")
    size: int = Field(32, ge=16, description="Patch side length in pixels (10 m grid).")
    num_regions: int = Field(8, ge=1, description="Regions (ROIs); biomes cycle over them.")
    max_labels: int = Field(3, ge=1, le=10, description="Most classes mixed in one patch.")


def sen12ms_regions(params: SEN12MSParams) -> tuple[Regions, Tensor]:
    """Per-region geography and priors, and ``[R]`` int64 region seasons (step 1-2).

    Returns:
        :class:`~geofl.data.synthetic.landcover.Regions` (``prior`` ``[R, 10]``, balanced to the
        target frequencies) and the season code of each region.
    """
    gen = torch_generator(params.seed, "synthetic_sen12ms", "regions")
    r = params.num_regions
    biome = [BIOMES[i % len(BIOMES)] for i in range(r)]
    lat_lo, lat_hi = (torch.tensor([b[1][j] for b in biome]) for j in (0, 1))
    lon_lo, lon_hi = (torch.tensor([b[2][j] for b in biome]) for j in (0, 1))
    target = torch.tensor(SEN12MS_TARGET_FREQUENCIES)
    base = target * torch.tensor([b[6] for b in biome])
    base = base * torch.exp(0.3 * torch.randn(r, len(SEN12MS_CLASSES), generator=gen))
    regions = Regions(
        prior=balanced_priors(base, target),
        elevation=torch.tensor([b[3] for b in biome])
        * torch.exp(0.3 * torch.randn(r, generator=gen)),
        roughness=torch.tensor([b[4] for b in biome]),
        gsd=torch.full((r,), 10.0),
        haze=torch.tensor([b[5] for b in biome]),
        lat=lat_lo + (lat_hi - lat_lo) * torch.rand(r, generator=gen),
        lon=lon_lo + (lon_hi - lon_lo) * torch.rand(r, generator=gen),
        tint=1.0 + 0.08 * torch.randn(r, 2, generator=gen),
    )
    idx = torch.arange(r)
    return regions, (idx + idx // 4) % 4


def _generate_chunk(
    params: SEN12MSParams, regions: Regions, seasons: Tensor, k: int, out: np.ndarray
) -> dict[str, Tensor]:
    """Fill ``out`` (uint16 ``[n, 13, S, S]``) with chunk ``k``; return labels and metadata."""
    gen = torch_generator(params.seed, "synthetic_sen12ms", "chunk", k)
    n = out.shape[0]
    affinity = affinity_matrix(len(SEN12MS_CLASSES), _GROUPS, _EXTRA_AFFINITY)
    region, dominant, present = affinity_label_sets(
        regions.prior, affinity, n, params.max_labels, gen
    )
    order = torch.randperm(n, generator=gen)
    region, dominant, present = region[order], dominant[order], present[order]
    season = seasons[region]
    cover = layout(present, dominant, params.size, params.brightness_texture, gen)
    paint(params, regions, _CLASSES, (region, season, present), cover, out, gen)
    rough = torch.tensor(_CLASSES.roughness)[dominant]
    return {
        "labels": cover_fractions(cover).argmax(dim=1),
        "region": region,
        "season": season,
        **patch_metadata(regions, rough, region, gen),
    }


def generate_sen12ms(params: SEN12MSParams) -> dict[str, np.ndarray]:
    """Generate the SEN12MS-like dataset (see the module docstring).

    Returns:
        ``images`` uint16 ``[N, 13, S, S]`` (reflectance x 10000, ``SENTINEL2_BANDS``
        order B01..B12 with B8A and B10, as SEN12MS's S2 patches), ``labels`` int64 ``[N]``
        indices into :data:`SEN12MS_CLASSES`, and metadata ``[N]``: ``region``, ``season``
        (int64, :data:`SEN12MS_SEASONS` codes), ``elevation_mean``, ``elevation_std``
        (metres), ``gsd_m``, ``lat``, ``lon`` (float32).
    """
    regions, seasons = sen12ms_regions(params)
    return run_chunks(
        params.num_samples,
        params.size,
        lambda k, out: _generate_chunk(params, regions, seasons, k, out),
        dtypes={"labels": np.int64},
    )


@DATASETS.register("synthetic_sen12ms", params=SEN12MSParams)
def build_synthetic_sen12ms(
    params: SEN12MSParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """SEN12MS-like single-label 13-band patches, generated once and cached (001 §6.1.1).

    Args:
        params: Dataset parameters.
        cache_dir: Directory of the decode-once array cache.
        cache_mode: ``memory`` (the cache loaded into RAM) or ``mmap`` (an on-disk store,
            ``inputs`` a :class:`~geofl.data.storage.lazy.StoredRows` view read per batch).

    Returns:
        An :class:`ArrayDataset` with ``inputs`` ``[N, 13, S, S]`` float32 reflectance,
        ``class`` targets ``[N]`` int64 over :data:`SEN12MS_CLASSES` and the metadata of
        :func:`generate_sen12ms` (``by: region`` / ``by: season`` partitions).
    """
    return cached_dataset(
        "synthetic_sen12ms",
        "synthetic-sen12ms-v1",
        params.model_dump(),
        lambda: generate_sen12ms(params),
        classes=SEN12MS_CLASSES,
        bands=SENTINEL2_BANDS,
        metadata_keys=SEN12MS_METADATA_KEYS,
        target_kind="class",
        cache_dir=cache_dir,
        cache_mode=cache_mode,
    )
