"""Spatial texture models of the synthetic land-cover generator.

Each texture function draws a batch of per-pixel *material weight maps* for one class:
``weights[b, m, y, x] >= 0`` with ``weights.sum(1) == 1``, index-aligned with the class's
material names in :data:`CLASS_MATERIALS`. The generator (:mod:`geofl.data.synthetic.landcover`)
turns them into reflectance with a per-patch spectrum per material. All randomness comes
from the ``torch.Generator`` passed in; all work is vectorised over the batch.

Geometry is in pixel units of a 10 m grid; ``scale`` (``10 / gsd_m``, shape ``[B]``) shrinks
physical feature sizes (field width, roof size, road width) on coarser grids.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

__all__ = ["CLASS_MATERIALS", "TEXTURES", "TextureFn", "smooth_noise"]

Tensor = torch.Tensor
#: ``(batch, size, scale [B], generator) -> weights [B, M, size, size]``.
TextureFn = Callable[[int, int, Tensor, torch.Generator], Tensor]

#: Materials mixed by each class's texture, in weight-map channel order (EuroSAT order).
CLASS_MATERIALS: tuple[tuple[str, ...], ...] = (
    ("crop", "senescent", "soil"),  # AnnualCrop
    ("forest", "forest_shade", "shrub"),  # Forest
    ("herbaceous", "shrub", "soil", "grass"),  # HerbaceousVegetation
    ("asphalt", "grass", "crop", "soil"),  # Highway
    ("concrete", "roof_grey", "asphalt", "soil", "grass"),  # Industrial
    ("grass", "herbaceous", "forest"),  # Pasture
    ("orchard_tree", "grass", "soil"),  # PermanentCrop
    ("roof_tile", "roof_grey", "asphalt", "grass", "orchard_tree"),  # Residential
    ("turbid_water", "water", "grass", "forest", "crop"),  # River
    ("water", "turbid_water", "sand", "grass", "forest"),  # SeaLake
)


def _u(gen: torch.Generator, n: int, lo: float, hi: float) -> Tensor:
    """``[n, 1, 1]`` uniform draws in ``[lo, hi)``, ready to broadcast over pixels."""
    return (lo + (hi - lo) * torch.rand(n, generator=gen)).view(n, 1, 1)


def _bern(gen: torch.Generator, n: int, p: float) -> Tensor:
    """``[n, 1, 1]`` float 0/1 draws with ``P(1) = p``."""
    return (torch.rand(n, generator=gen) < p).float().view(n, 1, 1)


@functools.lru_cache(maxsize=16)
def _coords(size: int) -> Tensor:
    """``[3, S*S]`` rows ``x``, ``y`` (pixels from the patch centre) and ``1`` (read-only)."""
    ax = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    y, x = torch.meshgrid(ax, ax, indexing="ij")
    return torch.stack([x.flatten(), y.flatten(), torch.ones(size * size)])


def _affine(coef: Tensor, size: int) -> Tensor:
    """Affine coordinate maps: ``coef`` ``[n, K, 3]`` → ``[n, K, S, S]`` of ``a*x + b*y + c``."""
    n, k, _ = coef.shape
    return torch.matmul(coef, _coords(size)).view(n, k, size, size)


def _rotated(n: int, size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Coordinates ``u, v`` ``[n, S, S]`` in a frame rotated by a random angle per patch."""
    theta = math.pi * torch.rand(n, generator=gen)
    cos, sin, zero = torch.cos(theta), torch.sin(theta), torch.zeros(n)
    coef = torch.stack([torch.stack([cos, sin, zero], -1), torch.stack([-sin, cos, zero], -1)], 1)
    uv = _affine(coef, size)
    return uv[:, 0], uv[:, 1]


def _line_dist(n: int, size: int, gen: torch.Generator, spread: float = 0.3) -> Tensor:
    """``[n, S, S]`` distance (pixels) to a random straight line near the patch centre."""
    alpha = math.pi * torch.rand(n, generator=gen)
    offset = spread * size * (2 * torch.rand(n, generator=gen) - 1)
    coef = torch.stack([torch.cos(alpha), torch.sin(alpha), -offset], -1).unsqueeze(1)
    return _affine(coef, size)[:, 0].abs()


@functools.lru_cache(maxsize=64)
def _interp_matrix(size: int, wavelength: float) -> Tensor:
    """``[S, c]`` Gaussian-kernel interpolation from control points ``wavelength`` apart.

    Rows are scaled so that white noise on the control points maps to unit variance at
    every pixel.
    """
    cells = math.ceil(size / wavelength) + 3
    centres = (torch.arange(cells, dtype=torch.float32) - (cells - 1) / 2) * wavelength
    ax = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    kern = torch.exp(-0.5 * ((ax[:, None] - centres[None]) / (0.7 * wavelength)) ** 2)
    return kern / kern.pow(2).sum(1, keepdim=True).sqrt()


def smooth_noise(n: int, size: int, wavelength: float, gen: torch.Generator) -> Tensor:
    """Smooth Gaussian random field: white noise on a coarse grid, interpolated separably.

    Args:
        n: Batch size.
        size: Output side length in pixels.
        wavelength: Feature size in pixels (control-point spacing).
        gen: Random generator.

    Returns:
        ``[n, size, size]`` float32 with zero mean and unit variance at every pixel.
    """
    interp = _interp_matrix(size, float(wavelength))
    cells = interp.shape[1]
    coarse = torch.randn(n, cells, cells, generator=gen)
    return torch.matmul(torch.matmul(interp, coarse), interp.T)


def _layers(masks: list[Tensor]) -> Tensor:
    """Stack painter's-order masks (top first) into weights ``[n, len(masks) + 1, S, S]``.

    Material ``i`` gets ``masks[i] * prod_{j<i}(1 - masks[j])``; the last one the rest.
    """
    out = []
    rest = torch.ones_like(masks[0])
    for m in masks:
        out.append(rest * m)
        rest = rest - out[-1]
    out.append(rest)
    return torch.stack(out, dim=1)


def _periodic(coord: Tensor, period: Tensor, phase: Tensor) -> Tensor:
    """Signed distance (pixels) to the nearest multiple of ``period`` after ``phase``."""
    return torch.remainder(coord + phase, period) - period / 2


def annual_crop(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Parallel crop/soil stripes; often a second field with other stripes and stubble."""
    s = scale.view(n, 1, 1)
    u, v = _rotated(n, size, gen)
    period = _u(gen, n, 4.0, 9.0) * s
    phase = _u(gen, n, 0.0, 2 * math.pi)
    stripes_a = torch.sigmoid(
        4 * (torch.cos(2 * math.pi * u / period + phase) - _u(gen, n, -0.5, 0.5))
    )
    # A second field with a rotated stripe direction, split along a straight boundary.
    turn = _u(gen, n, math.pi / 5, math.pi / 2)
    u2 = u * torch.cos(turn) + v * torch.sin(turn)
    period2 = _u(gen, n, 3.0, 8.0) * s
    stripes_b = torch.sigmoid(4 * (torch.cos(2 * math.pi * u2 / period2) - _u(gen, n, -0.5, 0.5)))
    side = _affine(
        torch.cat(
            [torch.randn(n, 2, generator=gen), size * _u(gen, n, -0.2, 0.2).view(n, 1)], 1
        ).unsqueeze(1),
        size,
    )[:, 0]
    field_a = torch.maximum(torch.sigmoid(side), 1 - _bern(gen, n, 0.6))
    b_green = _bern(gen, n, 0.5)
    crop = field_a * stripes_a + (1 - field_a) * stripes_b * b_green
    senescent = (1 - field_a) * stripes_b * (1 - b_green)
    return torch.stack([crop, senescent, 1 - crop - senescent], dim=1)


def forest(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """High-frequency canopy noise (crowns 2–3 px) with shade gaps and rare clearings."""
    crowns = smooth_noise(n, size, 2.0, gen)
    canopy = torch.sigmoid(2.5 * (crowns + _u(gen, n, 0.3, 1.3)))
    clearing = torch.sigmoid(3 * (smooth_noise(n, size, 14.0, gen) - 1.6)) * _bern(gen, n, 0.3)
    shade = (1 - clearing) * (1 - canopy)
    return torch.stack([(1 - clearing) * canopy, shade, clearing], dim=1)


def herbaceous(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Patchy mid-frequency mix of herbs, shrubs, bare patches and some grass."""
    shrub = torch.sigmoid(2.5 * (smooth_noise(n, size, 5.0, gen) - _u(gen, n, -0.2, 1.0)))
    soil = torch.sigmoid(3 * (smooth_noise(n, size, 4.0, gen) - _u(gen, n, 0.8, 2.2)))
    grass = torch.sigmoid(2 * (smooth_noise(n, size, 12.0, gen) - _u(gen, n, 0.3, 1.5)))
    w = _layers([soil, shrub, grass])  # soil, shrub, grass, herbs
    return w[:, [3, 1, 0, 2]]


def _background(n: int, size: int, gen: torch.Generator) -> Tensor:
    """``[n, 3, S, S]`` smooth grass/crop/soil rural background weights."""
    crop = torch.sigmoid(2 * (smooth_noise(n, size, 16.0, gen) - _u(gen, n, -1.0, 1.5)))
    soil = torch.sigmoid(2 * (smooth_noise(n, size, 12.0, gen) - _u(gen, n, -0.5, 2.0)))
    return _layers([crop, soil])[:, [2, 0, 1]]  # grass, crop, soil


def highway(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """One or two straight asphalt roads (15–40 m wide) over a rural background."""
    s = scale.view(n, 1, 1)
    road = torch.sigmoid(3 * (_u(gen, n, 0.8, 2.0) * s - _line_dist(n, size, gen)))
    second = torch.sigmoid(3 * (_u(gen, n, 0.6, 1.5) * s - _line_dist(n, size, gen)))
    road = torch.maximum(road, second * _bern(gen, n, 0.35))
    return torch.cat([road.unsqueeze(1), (1 - road).unsqueeze(1) * _background(n, size, gen)], 1)


def industrial(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Large bright roof blocks (40–200 m) on paved ground with some grass and soil."""
    k = 5
    s = scale.view(n, 1, 1, 1)
    u, v = _rotated(n, size, gen)
    centre_u = (torch.rand(n, k, 1, 1, generator=gen) - 0.5) * size
    centre_v = (torch.rand(n, k, 1, 1, generator=gen) - 0.5) * size
    half_u = (2.5 + 7.5 * torch.rand(n, k, 1, 1, generator=gen)) * s
    half_v = (2.5 + 7.5 * torch.rand(n, k, 1, 1, generator=gen)) * s
    in_u = torch.sigmoid(3 * (half_u - (u.unsqueeze(1) - centre_u).abs()))
    in_v = torch.sigmoid(3 * (half_v - (v.unsqueeze(1) - centre_v).abs()))
    blocks = (in_u * in_v).amax(1)
    dark = torch.sigmoid(3 * (smooth_noise(n, size, 20.0, gen) - _u(gen, n, 0.0, 2.0)))
    green = torch.sigmoid(2 * (smooth_noise(n, size, 10.0, gen) - _u(gen, n, 0.5, 2.0)))
    soil = torch.sigmoid(2 * (smooth_noise(n, size, 10.0, gen) - _u(gen, n, 0.8, 2.5)))
    paved_bright = torch.sigmoid(2 * (smooth_noise(n, size, 6.0, gen) - 0.5)) * 0.35
    ground = _layers([green, soil, paved_bright]) * (1 - blocks).unsqueeze(1)
    # materials: concrete, roof_grey, asphalt, soil, grass
    return torch.stack(
        [
            blocks * (1 - dark) + ground[:, 2],
            blocks * dark,
            ground[:, 3],
            ground[:, 1],
            ground[:, 0],
        ],
        1,
    )


def pasture(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Smooth low-frequency grass/herb mix, sometimes crossed by a tree hedge."""
    s = scale.view(n, 1, 1)
    herbs = torch.sigmoid(2 * (smooth_noise(n, size, 20.0, gen) - _u(gen, n, 0.2, 2.0)))
    hedge = torch.sigmoid(3 * (_u(gen, n, 0.5, 1.2) * s - _line_dist(n, size, gen)))
    hedge = hedge * _bern(gen, n, 0.35)
    return _layers([hedge, herbs])[:, [2, 1, 0]]


def permanent_crop(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Orchard/vineyard tree-dot grid over a grass/soil floor.

    Dense rows (along-row spacing down to half the row spacing) mimic vineyards. On coarse
    grids the pattern is kept at >= 3 px rows and 0.75 px crowns, as mixed pixels still show it.
    """
    s = scale.view(n, 1, 1)
    u, v = _rotated(n, size, gen)
    du_period = (_u(gen, n, 4.0, 7.0) * s).clamp(min=3.0)
    dv_period = (du_period * _u(gen, n, 0.5, 1.3)).clamp(min=2.5)
    du = _periodic(u, du_period, _u(gen, n, 0, 7))
    dv = _periodic(v, dv_period, _u(gen, n, 0, 7))
    radius = (_u(gen, n, 0.8, 1.4) * s).clamp(min=0.75)
    trees = (1.6 * torch.exp(-(du.square() + dv.square()) / (2 * radius.square()))).clamp(max=1.0)
    soil = torch.sigmoid(2 * (smooth_noise(n, size, 16.0, gen) - _u(gen, n, -1.5, 1.5)))
    return _layers([trees, soil])[:, [0, 2, 1]]


def residential(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Grid of small roofs (20–40 m) with streets, gardens and garden trees between."""
    s = scale.view(n, 1, 1)
    u, v = _rotated(n, size, gen)
    pu = (_u(gen, n, 5.0, 8.0) * s).clamp(min=4.0)
    pv = pu * _u(gen, n, 0.8, 1.3)
    du = _periodic(u, pu, _u(gen, n, 0, 8))
    dv = _periodic(v, pv, _u(gen, n, 0, 8))
    half = (_u(gen, n, 1.0, 1.8) * s).clamp(min=0.8)
    roofs = torch.sigmoid(3 * (half - du.abs())) * torch.sigmoid(3 * (half * 0.9 - dv.abs()))
    roofs = roofs * torch.sigmoid(3 * (smooth_noise(n, size, 10.0, gen) + 1.0))  # gaps
    street_dv = _periodic(v, pv * 2, pv / 2 + _u(gen, n, 0, 1)).abs()
    street = torch.sigmoid(3 * (0.7 * s - street_dv)) * _bern(gen, n, 0.7)
    tile = _u(gen, n, 0.0, 1.0)
    trees = torch.sigmoid(2.5 * (smooth_noise(n, size, 4.0, gen) - _u(gen, n, 0.3, 1.5)))
    w = _layers([roofs, street, trees])  # roofs, asphalt, trees, grass
    return torch.stack([w[:, 0] * tile, w[:, 0] * (1 - tile), w[:, 1], w[:, 3], w[:, 2]], 1)


def river(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """A meandering water band (30–100 m wide) through riparian vegetation and fields."""
    s = scale.view(n, 1, 1)
    u, v = _rotated(n, size, gen)
    amp = _u(gen, n, 0.0, 0.25 * size)
    wavelength = _u(gen, n, 0.8 * size, 2.0 * size)
    centre = amp * torch.sin(2 * math.pi * u / wavelength + _u(gen, n, 0, 6.3))
    dist = (v - centre - _u(gen, n, -0.2 * size, 0.2 * size)).abs()
    width = _u(gen, n, 1.5, 5.0) * s
    water = torch.sigmoid(2 * (width - dist))
    riparian = torch.sigmoid(2 * (width + _u(gen, n, 1.0, 4.0) - dist)) * _bern(gen, n, 0.5)
    forest_m = torch.maximum(riparian, torch.sigmoid(2 * (smooth_noise(n, size, 12.0, gen) - 1.0)))
    crop = torch.sigmoid(2 * (smooth_noise(n, size, 16.0, gen) - _u(gen, n, 0.0, 2.0)))
    turbid = _u(gen, n, 0.2, 1.0)
    w = _layers([water, forest_m, crop])  # water, forest, crop, grass
    return torch.stack([w[:, 0] * turbid, w[:, 0] * (1 - turbid), w[:, 3], w[:, 1], w[:, 2]], 1)


def sea_lake(n: int, size: int, scale: Tensor, gen: torch.Generator) -> Tensor:
    """Mostly open water; half the patches show a shoreline with a beach and vegetation."""
    alpha = 2 * math.pi * torch.rand(n, generator=gen)
    coef = torch.stack([torch.cos(alpha), torch.sin(alpha), torch.zeros(n)], -1) / size
    field = _affine(coef.unsqueeze(1), size)[:, 0]
    field = field + 0.12 * smooth_noise(n, size, 20.0, gen) - _u(gen, n, 0.15, 0.5)
    shore = _bern(gen, n, 0.5)
    land = torch.sigmoid(40 * field) * shore
    inland = torch.sigmoid(40 * (field - _u(gen, n, 0.0, 0.08))) * shore
    sand = land - inland
    forest_m = torch.sigmoid(2 * smooth_noise(n, size, 8.0, gen))
    turbid = 0.35 * torch.sigmoid(3 * (smooth_noise(n, size, 24.0, gen) - 1.0))
    water = 1 - land
    return torch.stack(
        [water * (1 - turbid), water * turbid, sand, inland * (1 - forest_m), inland * forest_m], 1
    )


#: Texture function per class, index-aligned with :data:`CLASS_MATERIALS`.
TEXTURES: tuple[TextureFn, ...] = (
    annual_crop,
    forest,
    herbaceous,
    highway,
    industrial,
    pasture,
    permanent_crop,
    residential,
    river,
    sea_lake,
)
