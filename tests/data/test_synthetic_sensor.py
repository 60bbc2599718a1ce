"""The shared sensor model: band grids and linear material mixing, by hand."""

from __future__ import annotations

import torch

from geofl.data.synthetic.sensor import RESOLUTION_GROUPS, band_grid_sides, mix_materials


def test_band_grids_are_10_20_and_60_m() -> None:
    assert band_grid_sides(64) == [64, 32, 11]  # 60 m: ceil(32 / 3)
    assert band_grid_sides(16) == [16, 8, 3]
    assert [res for res, _, _ in RESOLUTION_GROUPS] == [10, 20, 60]
    assert sorted(b for _, bands, _ in RESOLUTION_GROUPS for b in bands) == list(range(13))


def test_mixing_is_linear_and_box_averaged() -> None:
    # One 6x6 patch: left half material 0 (reflectance 100 in every band), right half
    # material 1 (reflectance 300); offset 5 everywhere.
    weights = torch.zeros(1, 2, 6, 6)
    weights[0, 0, :, :3] = 1.0
    weights[0, 1, :, 3:] = 1.0
    spec = torch.stack([torch.full((13,), 100.0), torch.full((13,), 300.0)])[None]
    ten, twenty, sixty = mix_materials(weights, spec, torch.full((1, 13), 5.0))
    assert (
        ten.shape == (1, 4, 6, 6) and twenty.shape == (1, 6, 3, 3) and sixty.shape == (1, 3, 1, 1)
    )
    assert ten[0, 0, 0].tolist() == [105.0] * 3 + [305.0] * 3
    # the middle 20 m pixel straddles the boundary: half of each material
    assert twenty[0, 0, 0].tolist() == [105.0, 205.0, 305.0]
    assert sixty.flatten().tolist() == [205.0] * 3
    plain = mix_materials(weights, spec, None)[0]
    assert torch.equal(plain + 5.0, ten)
