"""Region geography of the synthetic generators and the per-patch site metadata it implies.

A generator draws (or builds) one :class:`Regions` per dataset: per region a class prior,
an elevation mean and terrain roughness, a ground sampling distance, a mean haze, a centre
(lat/lon) and a soil/vegetation tint. :func:`patch_metadata` scatters each patch's
elevation, roughness and position around its region's values. Shared by
:mod:`geofl.data.synthetic.landcover` (EuroSAT archetypes,
:func:`~geofl.data.synthetic.landcover.draw_regions`)
and the mosaic generators (:mod:`geofl.data.synthetic.multilabel`,
:mod:`geofl.data.synthetic.sen12ms`, :mod:`geofl.data.synthetic.bigearthnet`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Regions", "patch_metadata"]

Tensor = torch.Tensor


class Regions(NamedTuple):
    """Per-region parameters (``R`` regions).

    Drawn by :func:`~geofl.data.synthetic.landcover.draw_regions`.
    """

    prior: Tensor  # [R, 10]
    elevation: Tensor  # [R]
    roughness: Tensor  # [R]
    gsd: Tensor  # [R]
    haze: Tensor  # [R]
    lat: Tensor  # [R]
    lon: Tensor  # [R]
    tint: Tensor  # [R, 2] soil brightness, vegetation NIR gain


def patch_metadata(
    regions: Regions, roughness: Tensor, region: Tensor, gen: torch.Generator
) -> dict[str, Tensor]:
    """Per-patch ``elevation_mean``, ``elevation_std``, ``gsd_m``, ``lat``, ``lon`` ``[n]``.

    Args:
        regions: Per-region geography.
        roughness: ``[n]`` terrain-roughness factor of each patch's dominant class.
        region: ``[n]`` int64 region of each patch.
        gen: The chunk's random generator.
    """
    n = region.shape[0]
    rough = roughness * regions.roughness[region]
    spread = regions.roughness[region] * 6 + 10
    return {
        "elevation_mean": (
            regions.elevation[region] + spread * torch.randn(n, generator=gen)
        ).clamp(min=0.0),
        "elevation_std": rough * torch.exp(0.4 * torch.randn(n, generator=gen)),
        "gsd_m": regions.gsd[region],
        "lat": regions.lat[region] + 0.25 * torch.randn(n, generator=gen),
        "lon": regions.lon[region] + 0.25 * torch.randn(n, generator=gen),
    }
