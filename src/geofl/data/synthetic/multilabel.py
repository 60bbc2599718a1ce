"""Synthetic multi-label Sentinel-2-like land-cover mosaics (BigEarthNet-style labels).

Paper 001 (§4.1) trains multi-label scene recognition on BigEarthNet: Sentinel-2 patches
annotated with every CORINE land-cover class present, with frequent classes (urban fabric,
arable land, forests) and rare ones (wetlands, burnt areas) whose F1 suffers most under
federated DP. This generator makes patches of that kind with the physics of
:mod:`geofl.data.synthetic.landcover` (material spectra, phenology, haze, 10/20/60 m band grids,
sensor noise), so that multi-label tasks, metrics and partitioners have data to run on.

Generative model, per patch ``i`` (generators ``(seed, "synthetic_multilabel", ...)``):

1. **Region** ``r ~ U(num_regions)``; the region geography (elevation, haze, tint,
   ground sampling distance, lat/lon) is :mod:`~geofl.data.synthetic.landcover`'s for the same seed,
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
   (:mod:`~geofl.data.synthetic.textures`; coniferous forest and burnt areas use the
   ``conifer`` and ``charred`` spectra) weighted by its cover, then the sensor model of
   :mod:`~geofl.data.synthetic.landcover` (gain, haze, water vapour, band resolutions, noise).
5. **Targets.** A class is labelled when it covers at least ``min_cover`` of the patch (a
   minimum mapping unit, as CORINE's 25 ha); the class with the largest cover always is.
   Every chunk of :data:`~geofl.data.synthetic.landcover.CHUNK` patches has each class dominant at
   least once, so every label is present whenever ``num_samples >= 13``.

Steps 3-4 and the metadata are :mod:`geofl.data.synthetic.mosaic`'s, shared with the
BigEarthNet- and SEN12MS-like generators.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset, CacheMode
from geofl.data.cached import cached_dataset
from geofl.data.synthetic.landcover import Regions, SyntheticParams, draw_regions
from geofl.data.synthetic.mosaic import (
    MosaicClasses,
    affinity_label_sets,
    affinity_matrix,
    cover_fractions,
    layout,
    paint,
    patch_metadata,
    run_chunks,
)
from geofl.data.synthetic.textures import CLASS_MATERIALS
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
    "Urban fabric",
    "Industrial or commercial units",
    "Arable land",
    "Permanent crops",
    "Pastures",
    "Broad-leaved forest",
    "Coniferous forest",
    "Natural grassland and sparsely vegetated areas",
    "Beaches, dunes, sands",
    "Inland wetlands",
    "Inland waters",
    "Marine waters",
    "Burnt areas",
)
#: Per-sample metadata arrays next to ``images`` and ``labels``.
MULTILABEL_METADATA_KEYS: tuple[str, ...] = (
    "region",
    "season",
    "elevation_mean",
    "elevation_std",
    "gsd_m",
    "lat",
    "lon",
)

# Texture (index into synthetic_textures.TEXTURES) and materials per label; materials map
# onto the texture's weight channels in order.
_TEXTURE = (7, 4, 0, 6, 5, 1, 1, 2, 2, 2, 8, 9, 1)
_MATERIALS: tuple[tuple[str, ...], ...] = (
    *CLASS_MATERIALS[7:8],
    *CLASS_MATERIALS[4:5],
    *CLASS_MATERIALS[0:1],
    *CLASS_MATERIALS[6:7],
    *CLASS_MATERIALS[5:6],
    CLASS_MATERIALS[1],
    ("conifer", "forest_shade", "shrub"),
    CLASS_MATERIALS[2],
    ("sand", "shrub", "sand", "grass"),  # dunes: sand with sparse vegetation
    ("herbaceous", "turbid_water", "soil", "grass"),  # wetlands: reeds and open pools
    CLASS_MATERIALS[8],
    CLASS_MATERIALS[9],
    ("charred", "forest_shade", "senescent"),  # burnt stand with scorched gaps
)
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
_CLASSES = MosaicClasses(MULTILABEL_CLASSES, _TEXTURE, _MATERIALS, _ROUGHNESS)


class MultiLabelParams(SyntheticParams):
    """Parameters of ``synthetic_multilabel`` (sensor parameters as ``synthetic``)."""

    num_samples: int = Field(3000, gt=0, description="Number of patches.")
    size: int = Field(32, ge=16, description="Patch side length in pixels (10 m grid).")
    min_cover: float = Field(
        0.05, gt=0, lt=1, description="Cover fraction from which a class is labelled."
    )
    max_labels: int = Field(5, ge=1, le=13, description="Most classes drawn per patch.")


def _generate_chunk(
    params: MultiLabelParams, regions: Regions, prior: Tensor, k: int, out: np.ndarray
) -> dict[str, Tensor]:
    """Fill ``out`` (uint16 ``[n, 13, S, S]``) with chunk ``k``; return targets and metadata."""
    gen = torch_generator(params.seed, "synthetic_multilabel", "chunk", k)
    n = out.shape[0]
    affinity = affinity_matrix(len(MULTILABEL_CLASSES), _GROUPS, _EXTRA_AFFINITY)
    region, dominant, present = affinity_label_sets(prior, affinity, n, params.max_labels, gen)
    order = torch.randperm(n, generator=gen)
    region, dominant, present = region[order], dominant[order], present[order]
    season = torch.randint(0, 4, (n,), generator=gen)
    cover = layout(present, dominant, params.size, params.brightness_texture, gen)
    paint(params, regions, _CLASSES, (region, season, present), cover, out, gen)
    frac = cover_fractions(cover)
    targets = frac >= params.min_cover
    targets[torch.arange(n), frac.argmax(dim=1)] = True
    rough = torch.tensor(_ROUGHNESS)[dominant]
    return {
        "labels": targets,
        "region": region,
        "season": season,
        **patch_metadata(regions, rough, region, gen),
    }


def generate_multilabel(params: MultiLabelParams) -> dict[str, np.ndarray]:
    """Generate the multi-label dataset (see the module docstring).

    Returns:
        ``images`` uint16 ``[N, 13, S, S]`` (reflectance x 10000, ``SENTINEL2_BANDS``
        order), ``labels`` uint8 ``[N, L]`` multi-hot over :data:`MULTILABEL_CLASSES`, and
        metadata ``[N]``: ``region``, ``season`` (int64), ``elevation_mean``,
        ``elevation_std`` (metres), ``gsd_m``, ``lat``, ``lon`` (float32).
    """
    regions = draw_regions(params)
    jitter = torch_generator(params.seed, "synthetic_multilabel", "priors")
    base = torch.tensor([_PRIORS[r % len(_PRIORS)] for r in range(params.num_regions)])
    prior = (base + 2e-3) * torch.exp(0.3 * torch.randn(base.shape, generator=jitter))
    prior = prior / prior.sum(1, keepdim=True)
    return run_chunks(
        params.num_samples,
        params.size,
        lambda k, out: _generate_chunk(params, regions, prior, k, out),
        dtypes={"labels": np.uint8},
    )


@DATASETS.register("synthetic_multilabel", params=MultiLabelParams)
def build_multilabel(
    params: MultiLabelParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """Multi-label 13-band land-cover mosaics, generated once and cached.

    Args:
        params: Dataset parameters.
        cache_dir: Directory of the decode-once array cache.
        cache_mode: ``memory`` (the cache loaded into RAM) or ``mmap`` (an on-disk store,
            ``inputs`` a :class:`~geofl.data.storage.lazy.StoredRows` view read per batch).

    Returns:
        An :class:`ArrayDataset` with ``inputs`` ``[N, 13, S, S]`` float32 reflectance and
        ``multi_hot`` targets ``[N, 13]`` float32.
    """
    return cached_dataset(
        "synthetic_multilabel",
        "synthetic-multilabel-v1",
        params.model_dump(),
        lambda: generate_multilabel(params),
        classes=MULTILABEL_CLASSES,
        bands=SENTINEL2_BANDS,
        metadata_keys=MULTILABEL_METADATA_KEYS,
        target_kind="multi_hot",
        cache_dir=cache_dir,
        cache_mode=cache_mode,
    )
