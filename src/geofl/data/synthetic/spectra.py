"""Material spectra of the synthetic Sentinel-2-like generators, and their per-patch variation.

Each material has a typical surface reflectance in the 13 Sentinel-2 bands
(:data:`MATERIAL_SPECTRA`). :func:`material_spectra` draws, per patch, the spectra of the
materials a texture mixes: vegetation is blended towards the ``senescent`` spectrum by
season (each material's phenology sensitivity times ``1 - vigour``), tinted by region (soil
brightness, vegetation red-edge/NIR gain), and jittered (brightness level, spectral slope and
a small per-band wiggle, all scaled by ``spectral_jitter``). Used by
:mod:`geofl.data.synthetic.landcover` (one class per patch) and :mod:`geofl.data.synthetic.mosaic`
(mosaics of several classes).
"""

from __future__ import annotations

import torch

__all__ = ["MATERIAL_SPECTRA", "material_spectra"]

Tensor = torch.Tensor

# Typical surface reflectance (0..1) of each material in the 13 Sentinel-2 bands, in
# SENTINEL2_BANDS order, after typical spectral-library reflectance curves (USGS / ECOSTRESS
# style) resampled to Sentinel-2 band centres. B09 sits in a water-vapour absorption band
# (~1/3 of NIR at the surface as seen through the atmosphere) and B10 (1375 nm cirrus) sees
# almost nothing from the ground.
# fmt: off
#                 B01    B02    B03    B04    B05    B06    B07    B08    B8A    B09    B10    B11    B12  # noqa: E501
MATERIAL_SPECTRA: dict[str, tuple[float, ...]] = {
    # clear deep water: absorbs red, NIR and SWIR
    "water":        (0.050, 0.045, 0.040, 0.020, 0.015, 0.010, 0.008, 0.007, 0.006, 0.003, 0.001, 0.003, 0.002),  # noqa: E501
    # sediment-laden river water: brighter green/red, still dark NIR/SWIR
    "turbid_water": (0.060, 0.060, 0.075, 0.060, 0.050, 0.030, 0.025, 0.022, 0.020, 0.008, 0.001, 0.008, 0.005),  # noqa: E501
    # closed mixed canopy: low red, red edge, high NIR
    "forest":       (0.025, 0.025, 0.050, 0.025, 0.075, 0.200, 0.260, 0.280, 0.290, 0.095, 0.001, 0.140, 0.065),  # noqa: E501
    # canopy gaps and crown shadows
    "forest_shade": (0.015, 0.012, 0.025, 0.012, 0.035, 0.090, 0.115, 0.125, 0.130, 0.045, 0.001, 0.065, 0.030),  # noqa: E501
    # lush managed grassland
    "grass":        (0.035, 0.035, 0.080, 0.045, 0.110, 0.280, 0.360, 0.390, 0.400, 0.130, 0.001, 0.210, 0.110),  # noqa: E501
    # natural herbaceous cover: a little drier than pasture (more red and SWIR)
    "herbaceous":   (0.045, 0.045, 0.085, 0.065, 0.125, 0.250, 0.300, 0.320, 0.330, 0.110, 0.001, 0.240, 0.140),  # noqa: E501
    "shrub":        (0.035, 0.035, 0.065, 0.050, 0.095, 0.200, 0.245, 0.265, 0.275, 0.090, 0.001, 0.200, 0.110),  # noqa: E501
    # green cereal / maize at full cover: strongest NIR
    "crop":         (0.035, 0.035, 0.085, 0.040, 0.120, 0.330, 0.430, 0.460, 0.470, 0.150, 0.001, 0.230, 0.110),  # noqa: E501
    # dry vegetation / stubble, also the dormant end-member of the season model
    "senescent":    (0.050, 0.060, 0.090, 0.120, 0.160, 0.200, 0.225, 0.245, 0.255, 0.085, 0.001, 0.300, 0.220),  # noqa: E501
    # bare ploughed soil: reflectance rising with wavelength, high SWIR
    "soil":         (0.075, 0.085, 0.115, 0.155, 0.185, 0.205, 0.225, 0.245, 0.255, 0.090, 0.001, 0.320, 0.260),  # noqa: E501
    "orchard_tree": (0.030, 0.030, 0.065, 0.035, 0.100, 0.260, 0.320, 0.345, 0.355, 0.115, 0.001, 0.180, 0.090),  # noqa: E501
    # asphalt: dark, flat grey
    "asphalt":      (0.080, 0.080, 0.090, 0.100, 0.105, 0.110, 0.115, 0.120, 0.122, 0.045, 0.001, 0.140, 0.130),  # noqa: E501
    # concrete / metal industrial roofs: bright and spectrally flat
    "concrete":     (0.260, 0.270, 0.290, 0.300, 0.305, 0.310, 0.315, 0.320, 0.320, 0.115, 0.001, 0.340, 0.310),  # noqa: E501
    # red clay roof tiles: red-heavy, moderate NIR, high SWIR
    "roof_tile":    (0.090, 0.090, 0.120, 0.210, 0.240, 0.260, 0.270, 0.280, 0.285, 0.100, 0.001, 0.330, 0.280),  # noqa: E501
    "roof_grey":    (0.120, 0.125, 0.135, 0.145, 0.150, 0.155, 0.160, 0.165, 0.168, 0.060, 0.001, 0.190, 0.170),  # noqa: E501
    # dry beach sand
    "sand":         (0.200, 0.220, 0.270, 0.320, 0.350, 0.370, 0.385, 0.400, 0.405, 0.140, 0.001, 0.450, 0.400),  # noqa: E501
    # needleleaf canopy: darker NIR and SWIR than broadleaf (used by synthetic_multilabel)
    "conifer":      (0.020, 0.020, 0.040, 0.020, 0.060, 0.150, 0.190, 0.200, 0.210, 0.070, 0.001, 0.100, 0.045),  # noqa: E501
    # fresh burn scar (char and ash): dark and flat, SWIR above NIR (negative NBR)
    "charred":      (0.040, 0.040, 0.045, 0.050, 0.055, 0.060, 0.065, 0.070, 0.075, 0.030, 0.001, 0.120, 0.110),  # noqa: E501
    # snow and firn: very bright visible, falling NIR, ice absorbs SWIR (high NDSI)
    "snow":         (0.900, 0.900, 0.880, 0.850, 0.830, 0.800, 0.780, 0.750, 0.720, 0.250, 0.001, 0.060, 0.040),  # noqa: E501
    # bare rock and scree: grey, gently rising to the SWIR
    "rock":         (0.100, 0.110, 0.130, 0.150, 0.170, 0.180, 0.190, 0.200, 0.210, 0.075, 0.001, 0.260, 0.220),  # noqa: E501
}
# fmt: on

#: How strongly the season drives each vegetation material towards ``senescent`` (0..1).
_PHENOLOGY: dict[str, float] = {
    "crop": 1.0,
    "grass": 0.6,
    "herbaceous": 0.8,
    "shrub": 0.5,
    "orchard_tree": 0.8,
    "forest": 0.35,
    "forest_shade": 0.35,
    "conifer": 0.1,
}
_VEGETATION = frozenset(_PHENOLOGY)
#: Vegetation vigour by season (winter, spring, summer, autumn).
_SEASON_VIGOUR = (0.45, 0.85, 1.0, 0.7)


def material_spectra(
    materials: tuple[str, ...],
    season: Tensor,
    tint: Tensor,
    jitter: float,
    gen: torch.Generator,
) -> Tensor:
    """Per-patch material spectra.

    Args:
        materials: ``M`` material names.
        season: ``[B]`` int64 season indices.
        tint: ``[B, 2]`` region soil-brightness and vegetation-NIR factors.
        jitter: Relative spectral variability.
        gen: Random generator.

    Returns:
        ``[B, M, 13]`` float32 reflectance.
    """
    n, m = season.shape[0], len(materials)
    base = torch.tensor([MATERIAL_SPECTRA[k] for k in materials])  # [M, 13]
    senescent = torch.tensor(MATERIAL_SPECTRA["senescent"])
    pheno = torch.tensor([_PHENOLOGY.get(k, 0.0) for k in materials])  # [M]
    vigour = torch.tensor(_SEASON_VIGOUR)[season].view(n, 1)
    vigour = (vigour + 0.1 * torch.randn(n, m, generator=gen)).clamp(0.0, 1.0)
    dormancy = (pheno * (1 - vigour)).unsqueeze(-1)  # [B, M, 1]
    spec = base * (1 - dormancy) + senescent * dormancy
    veg = torch.tensor([k in _VEGETATION for k in materials], dtype=torch.float32)
    soil_like = torch.tensor([k in ("soil", "senescent", "sand") for k in materials]).float()
    red_edge_up = torch.zeros(13)
    red_edge_up[4:10] = 1.0
    nir_gain = 1 + (tint[:, 1:2] - 1).unsqueeze(-1) * veg.view(1, m, 1) * red_edge_up
    soil_gain = 1 + (tint[:, 0:1] - 1).unsqueeze(-1) * soil_like.view(1, m, 1)
    wl = torch.linspace(-0.5, 0.5, 13)
    level = jitter * torch.randn(n, m, 1, generator=gen)
    slope = 0.5 * jitter * torch.randn(n, m, 1, generator=gen)
    wiggle = 0.15 * jitter * torch.randn(n, m, 13, generator=gen)
    return spec * nir_gain * soil_gain * torch.exp(level + slope * wl + wiggle)
