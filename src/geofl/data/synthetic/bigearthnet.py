"""Synthetic BigEarthNet-like multi-label patches: 19 CORINE classes, 12 bands, 10 countries.

Paper 001 (§6.1.1) trains multi-label scene recognition on BigEarthNet (Sumbul et al.,
2019): Sentinel-2 patches from ten European countries, each annotated with every CORINE
Land Cover class it holds; in the 19-class nomenclature (Sumbul et al., 2021) the labels
are :data:`BIGEARTHNET19_CLASSES`. This generator makes such patches with the physics of
:mod:`geofl.data.synthetic.landcover` through the mosaic engine :mod:`geofl.data.synthetic.mosaic`.

**Nomenclatures.** ``bigearthnet19`` is the official 19-class set. The paper's rare
classes "Burnt areas" and "Permanent Snow" (001 Fig. 2, Table 6) are not in it: burnt areas
is a CORINE level-3 class that BigEarthNet-19 drops, and glaciers / perpetual snow
(CLC 3.3.5) is absent even from BigEarthNet's 43 classes. ``nomenclature: paper001`` adds
both, as "Burnt areas" and "Glaciers and perpetual snow" (21 labels), so that the
rare-class F1 of the paper can be studied; on real data (:mod:`geofl.data.readers.bigearthnet`)
the second never occurs.

Generative model (generators ``(seed, "synthetic_bigearthnet", ...)``):

1. **Country.** ``country ~ Categorical(share)`` over :data:`BIGEARTHNET_COUNTRIES` (a
   stated choice: Finland, Portugal and Lithuania large, Luxembourg and Kosovo small), each
   with a centre, elevation, terrain roughness and haze; ``season ~ U{0..3}`` (BigEarthNet
   spans June 2017 to May 2018).
2. **Label set** (a Gaussian copula). Class ``l`` is present iff ``u_l < Φ⁻¹(f[c, l])``
   with ``u = Λ g + sqrt(1 − |Λ_l|²) ε``, ``g ~ N(0, I_7)`` latent landscape factors
   (forest, farmland, coast, urban, wet, Mediterranean, mountain), so each class has
   *exactly* the per-country frequency ``f[c, l]`` while classes loading on a common factor
   co-occur (forests together, coastal wetlands and beaches with marine waters, arable land
   with complex cultivation, burnt areas with sclerophyllous scrub). ``f[c, l]`` is the
   target frequency :data:`BIGEARTHNET19_TARGET_FREQUENCIES` tilted per country (no marine
   classes in landlocked countries, peat bogs in Ireland and Finland, agro-forestry and
   burnt areas in Portugal, glaciers only in the Alps) and rescaled so that the share-weighted mean
   over countries is the target. A patch with no class gets the one closest to its
   threshold; at most ``max_labels`` are kept (largest margins first); the first ``L``
   patches of each chunk hold class ``l`` each (in a country drawn by ``share · f[c, l]``,
   with latent factors shifted towards ``l``'s landscape), so every label occurs.
3. **Mosaic and sensor.** The class with the largest margin dominates the layout, and
   each of the ``k`` present classes also fills 0.1/k of every pixel as sub-pixel mixture
   (so each label is visible: CORINE's 25 ha mapping unit is 17 % of a 1.2 km patch); every
   class is painted with its texture and materials, then the sensor model (gain, haze,
   vapour, 10/20/60 m grids, noise). BigEarthNet patches are Level-2A (Sen2Cor) surface
   reflectance: B10 (cirrus) is dropped, leaving :data:`BIGEARTHNET_BANDS`, and ``haze``
   defaults to 0.4 of the L1C generators' residual path reflectance.
4. **Targets.** The label set of step 2 (annotations come from the CORINE map, not from
   the pixels), as ``multi_hot`` over the chosen nomenclature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from geofl.data.base import DATASETS, SENTINEL2_BANDS, ArrayDataset, CacheMode
from geofl.data.cached import cached_dataset
from geofl.data.synthetic.landcover import Regions, SyntheticParams
from geofl.data.synthetic.mosaic import (
    MosaicClasses,
    layout,
    paint,
    patch_metadata,
    run_chunks,
)
from geofl.data.synthetic.textures import CLASS_MATERIALS
from geofl.rng import torch_generator

__all__ = [
    "BIGEARTHNET19_CLASSES",
    "BIGEARTHNET19_TARGET_FREQUENCIES",
    "BIGEARTHNET_BANDS",
    "BIGEARTHNET_COUNTRIES",
    "BIGEARTHNET_METADATA_KEYS",
    "PAPER001_CLASSES",
    "BigEarthNetParams",
    "Nomenclature",
    "build_synthetic_bigearthnet",
    "country_frequencies",
    "generate_bigearthnet",
    "nomenclature_classes",
    "target_frequencies",
]

Tensor = torch.Tensor
Nomenclature = Literal["bigearthnet19", "paper001"]

#: The BigEarthNet-19 nomenclature (Sumbul et al., 2021), in its label order.
BIGEARTHNET19_CLASSES: tuple[str, ...] = (
    "Urban fabric",
    "Industrial or commercial units",
    "Arable land",
    "Permanent crops",
    "Pastures",
    "Complex cultivation patterns",
    "Land principally occupied by agriculture, with significant areas of natural vegetation",
    "Agro-forestry areas",
    "Broad-leaved forest",
    "Coniferous forest",
    "Mixed forest",
    "Natural grassland and sparsely vegetated areas",
    "Moors, heathland and sclerophyllous vegetation",
    "Transitional woodland, shrub",
    "Beaches, dunes, sands",
    "Inland wetlands",
    "Coastal wetlands",
    "Inland waters",
    "Marine waters",
)
#: ``nomenclature: paper001``: the 19 classes plus the paper's rare CORINE classes.
PAPER001_CLASSES: tuple[str, ...] = (
    *BIGEARTHNET19_CLASSES,
    "Burnt areas",
    "Glaciers and perpetual snow",
)
#: Target label frequencies over :data:`BIGEARTHNET19_CLASSES`, rounded from the class
#: counts reported for BigEarthNet-19 (Sumbul et al., 2021: 519,284 patches without cloud
#: or seasonal snow); mean 3.4 labels per patch.
BIGEARTHNET19_TARGET_FREQUENCIES: tuple[float, ...] = (
    0.144,
    0.023,
    0.379,
    0.061,
    0.199,
    0.208,
    0.276,
    0.059,
    0.291,
    0.408,
    0.418,
    0.025,
    0.027,
    0.334,
    0.003,
    0.045,
    0.003,
    0.134,
    0.157,
)
#: Target frequency of "Burnt areas" and "Glaciers and perpetual snow" (``paper001``),
#: higher than on real data (burnt areas ≈ 0.06 % of BigEarthNet) so a few hundred
#: patches hold some.
_PAPER001_RARE = (0.005, 0.005)
#: Sentinel-2 bands of BigEarthNet (L2A, no B10), in BigEarthNet order.
BIGEARTHNET_BANDS: tuple[str, ...] = tuple(b for b in SENTINEL2_BANDS if b != "B10")
#: Per-sample metadata arrays next to ``images`` and ``labels``.
BIGEARTHNET_METADATA_KEYS: tuple[str, ...] = (
    "country",
    "region",
    "season",
    "elevation_mean",
    "elevation_std",
    "gsd_m",
    "lat",
    "lon",
)

# Texture and materials per class (PAPER001_CLASSES order).
_CLASSES = MosaicClasses(
    PAPER001_CLASSES,
    (7, 4, 0, 6, 5, 0, 5, 6, 1, 1, 1, 2, 2, 2, 2, 2, 8, 8, 9, 1, 2),
    (
        CLASS_MATERIALS[7],
        CLASS_MATERIALS[4],
        CLASS_MATERIALS[0],
        CLASS_MATERIALS[6],
        CLASS_MATERIALS[5],
        ("crop", "grass", "soil"),  # complex cultivation: small mixed parcels
        ("crop", "shrub", "forest"),  # agriculture with natural vegetation
        ("forest", "herbaceous", "senescent"),  # agro-forestry: oaks over dry pasture
        CLASS_MATERIALS[1],
        ("conifer", "forest_shade", "shrub"),
        ("forest", "conifer", "shrub"),
        ("herbaceous", "shrub", "rock", "grass"),
        ("shrub", "herbaceous", "soil", "senescent"),  # moors, heath, sclerophyll
        ("shrub", "forest", "soil", "herbaceous"),  # transitional woodland
        ("sand", "shrub", "sand", "grass"),
        ("herbaceous", "turbid_water", "soil", "grass"),  # marshes and peat bogs
        ("turbid_water", "water", "herbaceous", "sand", "soil"),  # salt marsh, flats
        CLASS_MATERIALS[8],
        CLASS_MATERIALS[9],
        ("charred", "forest_shade", "senescent"),
        ("snow", "rock", "rock", "snow"),
    ),
    (
        0.8,
        0.7,
        0.6,
        0.9,
        1.0,
        0.8,
        1.0,
        1.0,
        1.5,
        1.7,
        1.6,
        1.6,
        1.3,
        1.3,
        0.4,
        0.4,
        0.3,
        0.5,
        0.3,
        1.5,
        2.2,
    ),
)

# Loadings of each class on the latent factors
# (forest, farm, coast, urban, wet, mediterranean, mountain); unlisted entries are 0.
_LOADINGS: dict[int, tuple[float, ...]] = {
    0: (-0.2, 0.3, 0.2, 0.55, 0, 0, 0),
    1: (0, 0, 0.2, 0.65, 0, 0, 0),
    2: (-0.3, 0.55, 0, 0.2, 0, 0, 0),
    3: (0, 0.3, 0, 0, 0, 0.35, 0),
    4: (0, 0.35, 0, 0, 0, 0, 0.25),
    5: (0, 0.5, 0, 0, 0, 0, 0),
    6: (0, 0.5, 0, 0, 0, 0, 0),
    7: (0, 0, 0, 0, 0, 0.55, 0),
    8: (0.4, 0, 0, 0, 0, 0.2, 0),
    9: (0.55, -0.2, 0, 0, 0.2, 0, 0.25),
    10: (0.6, 0, 0, 0, 0, 0, 0),
    11: (0, 0, 0, 0, 0, 0, 0.55),
    12: (0, 0, 0, 0, 0, 0.5, 0),
    13: (0.45, 0, 0, 0, 0.15, 0, 0),
    14: (0, 0, 0.7, 0, 0, 0, 0),
    15: (0, 0, 0, 0, 0.55, 0, 0),
    16: (0, 0, 0.75, 0, 0, 0, 0),
    17: (0, 0, 0, 0, 0.55, 0, 0.15),
    18: (-0.3, 0, 0.7, 0, 0, 0, 0),
    19: (0, 0, 0, 0, 0, 0.45, 0),
    20: (0, 0, 0, 0, 0, 0, 0.6),
}

#: The ten BigEarthNet countries: name, share of patches, centre lat/lon, mean elevation
#: (m), terrain roughness (m), haze, and class-frequency multipliers (class index: factor).
BIGEARTHNET_COUNTRIES: tuple[
    tuple[str, float, float, float, float, float, float, dict[int, float]], ...
] = (
    (
        "Austria",
        0.10,
        47.5,
        14.5,
        900.0,
        60.0,
        0.010,
        {9: 1.6, 10: 1.2, 4: 1.4, 11: 2.5, 20: 6.0, 2: 0.7, 14: 0, 16: 0, 18: 0},
    ),
    (
        "Belgium",
        0.05,
        50.6,
        4.6,
        150.0,
        8.0,
        0.030,
        {20: 0, 0: 2.5, 1: 2.5, 2: 1.6, 4: 1.6, 5: 1.5, 9: 0.4, 13: 0.3, 18: 0.5, 14: 1.5},
    ),
    (
        "Finland",
        0.25,
        63.0,
        26.0,
        150.0,
        10.0,
        0.010,
        {
            20: 0,
            9: 1.8,
            10: 1.6,
            13: 2.0,
            15: 2.5,
            17: 2.5,
            18: 1.2,
            2: 0.6,
            0: 0.4,
            4: 0.2,
            5: 0.1,
            3: 0,
            7: 0,
            12: 0.2,
            8: 0.3,
            19: 0.2,
        },
    ),
    (
        "Ireland",
        0.07,
        53.2,
        -8.0,
        100.0,
        10.0,
        0.020,
        {20: 0, 4: 3.5, 15: 3.0, 12: 3.0, 18: 1.8, 9: 0.6, 2: 0.4, 7: 0, 3: 0, 10: 0.3},
    ),
    (
        "Kosovo",
        0.02,
        42.6,
        20.9,
        700.0,
        40.0,
        0.025,
        {20: 0, 8: 2.5, 2: 1.4, 5: 2.0, 6: 1.5, 11: 2.0, 9: 0.5, 14: 0, 16: 0, 18: 0},
    ),
    (
        "Lithuania",
        0.13,
        55.3,
        23.9,
        100.0,
        5.0,
        0.015,
        {20: 0, 2: 1.6, 10: 1.5, 4: 1.3, 13: 1.5, 15: 1.5, 18: 0.6, 14: 1.5, 3: 0.2, 7: 0},
    ),
    (
        "Luxembourg",
        0.01,
        49.8,
        6.1,
        350.0,
        15.0,
        0.025,
        {20: 0, 2: 1.4, 4: 1.8, 8: 2.0, 0: 1.8, 1: 1.5, 14: 0, 16: 0, 18: 0},
    ),
    (
        "Portugal",
        0.18,
        39.6,
        -8.0,
        350.0,
        25.0,
        0.025,
        {
            7: 6.0,
            3: 3.5,
            12: 4.0,
            8: 1.6,
            13: 1.3,
            5: 1.8,
            6: 1.8,
            19: 8.0,
            18: 1.6,
            14: 3.0,
            16: 3.0,
            9: 0.5,
            10: 0.6,
            15: 0.2,
            4: 0.3,
            20: 0,
        },
    ),
    (
        "Serbia",
        0.12,
        44.0,
        20.9,
        300.0,
        25.0,
        0.030,
        {20: 0, 2: 2.0, 5: 1.8, 6: 1.6, 8: 2.2, 3: 1.3, 4: 0.7, 9: 0.3, 14: 0, 16: 0, 18: 0},
    ),
    (
        "Switzerland",
        0.07,
        46.8,
        8.2,
        1300.0,
        80.0,
        0.010,
        {9: 1.5, 10: 1.4, 4: 2.0, 11: 4.0, 20: 12.0, 17: 1.5, 0: 1.3, 2: 0.6, 14: 0, 16: 0, 18: 0},
    ),
)


class BigEarthNetParams(SyntheticParams):
    """Parameters of ``synthetic_bigearthnet`` (sensor parameters as ``synthetic``)."""

    num_samples: int = Field(3000, gt=0, description="Number of patches.")
    size: int = Field(32, ge=16, description="Patch side length in pixels (10 m grid).")
    num_regions: int = Field(10, ge=10, le=10, description="The 10 countries (fixed).")
    haze: float = Field(0.4, ge=0, description="Residual haze of L2A surface reflectance.")
    nomenclature: Nomenclature = Field(
        "bigearthnet19", description="bigearthnet19 (19 labels) or paper001 (21, + rare)."
    )
    max_labels: int = Field(8, ge=1, le=21, description="Most labels per patch.")


def nomenclature_classes(nomenclature: Nomenclature) -> tuple[str, ...]:
    """The label names of ``nomenclature`` (19 or 21)."""
    return BIGEARTHNET19_CLASSES if nomenclature == "bigearthnet19" else PAPER001_CLASSES


def target_frequencies(nomenclature: Nomenclature) -> Tensor:
    """``[L]`` target label frequencies of ``nomenclature`` (over all countries)."""
    rare = () if nomenclature == "bigearthnet19" else _PAPER001_RARE
    return torch.tensor((*BIGEARTHNET19_TARGET_FREQUENCIES, *rare))


def country_frequencies(nomenclature: Nomenclature) -> Tensor:
    """``[10, L]`` per-country label frequencies whose share-weighted mean is the target."""
    target = target_frequencies(nomenclature)
    num = target.shape[0]
    tilt = torch.ones(len(BIGEARTHNET_COUNTRIES), num)
    for c, country in enumerate(BIGEARTHNET_COUNTRIES):
        for label, factor in country[7].items():
            if label < num:
                tilt[c, label] = factor
    share = torch.tensor([c[1] for c in BIGEARTHNET_COUNTRIES])
    freq = target * tilt / (share @ tilt)
    return freq.clamp(1e-4, 0.95)


def _countries(params: BigEarthNetParams) -> Regions:
    """Country geography as :class:`~geofl.data.synthetic.landcover.Regions` (``prior``: ``[10, L]``
    label frequencies)."""
    gen = torch_generator(params.seed, "synthetic_bigearthnet", "countries")
    table = BIGEARTHNET_COUNTRIES
    r = len(table)
    return Regions(
        prior=country_frequencies(params.nomenclature),
        elevation=torch.tensor([c[4] for c in table]),
        roughness=torch.tensor([c[5] for c in table]),
        gsd=torch.full((r,), 10.0),
        haze=torch.tensor([c[6] for c in table]),
        lat=torch.tensor([c[2] for c in table]),
        lon=torch.tensor([c[3] for c in table]),
        tint=1.0 + 0.06 * torch.randn(r, 2, generator=gen),
    )


def _label_sets(
    freq: Tensor, n: int, max_labels: int, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Countries ``[n]``, dominant classes ``[n]`` and label sets ``[n, L]`` (step 1-2)."""
    num = freq.shape[1]
    share = torch.tensor([c[1] for c in BIGEARTHNET_COUNTRIES])
    country = torch.multinomial(share, n, replacement=True, generator=gen)
    forced = min(n, num)  # patch l holds class l, in a country where l occurs
    country[:forced] = torch.multinomial((share[:, None] * freq[:, :forced]).T, 1, generator=gen)[
        :, 0
    ]
    load = torch.zeros(num, 7)
    for label, row in _LOADINGS.items():
        if label < num:
            load[label] = torch.tensor(row)
    resid = (1 - load.pow(2).sum(1)).sqrt()
    factors = torch.randn(n, 7, generator=gen)  # forced patches lean to l's landscape
    factors[:forced] -= 2.0 * load[:forced] / load[:forced].norm(dim=1, keepdim=True)
    u = factors @ load.T + resid * torch.randn(n, num, generator=gen)
    threshold = torch.special.ndtri(freq[country])
    margin = threshold - u
    margin[torch.arange(forced), torch.arange(forced)] = margin[:forced].abs().max(1).values
    margin[torch.arange(forced), torch.arange(forced)] += 1.0
    dominant = margin.argmax(dim=1)
    keep = margin.argsort(dim=1, descending=True)[:, :max_labels]
    top = torch.zeros(n, num, dtype=torch.bool).scatter_(1, keep, True)
    present = ((margin > 0) & top) | torch.nn.functional.one_hot(dominant, num).bool()
    return country, dominant, present


def _generate_chunk(
    params: BigEarthNetParams, countries: Regions, k: int, out: np.ndarray
) -> dict[str, Tensor]:
    """Fill ``out`` (uint16 ``[n, 13, S, S]``) with chunk ``k``; return labels and metadata."""
    gen = torch_generator(params.seed, "synthetic_bigearthnet", "chunk", k)
    n = out.shape[0]
    num = countries.prior.shape[1]
    country, dominant, present = _label_sets(countries.prior, n, params.max_labels, gen)
    order = torch.randperm(n, generator=gen)
    country, dominant, present = country[order], dominant[order], present[order]
    season = torch.randint(0, 4, (n,), generator=gen)
    classes = _CLASSES.head(num)
    cover = layout(present, dominant, params.size, params.brightness_texture, gen, floor=0.1)
    paint(params, countries, classes, (country, season, present), cover, out, gen)
    rough = torch.tensor(classes.roughness)[dominant]
    return {
        "labels": present,
        "country": country,
        "region": country,
        "season": season,
        **patch_metadata(countries, rough, country, gen),
    }


def generate_bigearthnet(params: BigEarthNetParams) -> dict[str, np.ndarray]:
    """Generate the BigEarthNet-like dataset (see the module docstring).

    Returns:
        ``images`` uint16 ``[N, 12, S, S]`` (reflectance x 10000, :data:`BIGEARTHNET_BANDS`
        order), ``labels`` uint8 ``[N, L]`` multi-hot over the nomenclature's classes, and
        metadata ``[N]``: ``country`` and ``region`` (the same int64 index into
        :data:`BIGEARTHNET_COUNTRIES`), ``season`` (int64), ``elevation_mean``,
        ``elevation_std`` (metres), ``gsd_m``, ``lat``, ``lon`` (float32).
    """
    countries = _countries(params)
    keep = [SENTINEL2_BANDS.index(b) for b in BIGEARTHNET_BANDS]
    return run_chunks(
        params.num_samples,
        params.size,
        lambda k, out: _generate_chunk(params, countries, k, out),
        bands=keep,
        dtypes={"labels": np.uint8, "country": np.int64},
    )


@DATASETS.register("synthetic_bigearthnet", params=BigEarthNetParams)
def build_synthetic_bigearthnet(
    params: BigEarthNetParams, *, cache_dir: Path, cache_mode: CacheMode = "memory"
) -> ArrayDataset:
    """BigEarthNet-like multi-label 12-band patches, generated once and cached (001 §6.1.1).

    Args:
        params: Dataset parameters (``nomenclature``: ``bigearthnet19`` or ``paper001``).
        cache_dir: Directory of the decode-once array cache.
        cache_mode: ``memory`` (the cache loaded into RAM) or ``mmap`` (an on-disk store,
            ``inputs`` a :class:`~geofl.data.storage.lazy.StoredRows` view read per batch).

    Returns:
        An :class:`ArrayDataset` with ``inputs`` ``[N, 12, S, S]`` float32 reflectance,
        ``multi_hot`` targets ``[N, L]`` float32 and the metadata of
        :func:`generate_bigearthnet` (``by: country`` / ``by: region`` partitions).
    """
    return cached_dataset(
        "synthetic_bigearthnet",
        "synthetic-bigearthnet-v1",
        params.model_dump(),
        lambda: generate_bigearthnet(params),
        classes=nomenclature_classes(params.nomenclature),
        bands=BIGEARTHNET_BANDS,
        metadata_keys=BIGEARTHNET_METADATA_KEYS,
        target_kind="multi_hot",
        cache_dir=cache_dir,
        cache_mode=cache_mode,
    )
