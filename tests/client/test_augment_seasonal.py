"""The seasonal swap of 001 §6.1.2 on stacked multi-temporal acquisitions, checked by hand."""

from __future__ import annotations

import pytest
import torch

from geofl.client.augment import AUGMENTATIONS, build_pipeline, seasonal_swap
from geofl.rng import torch_generator


def _stack(batch: int, seasons: int, bands: int) -> torch.Tensor:
    """Sample i, season s, band k holds the constant 100·i + 10·s + k: blocks are readable."""
    i = torch.arange(batch).view(batch, 1, 1, 1, 1) * 100.0
    s = torch.arange(seasons).view(1, seasons, 1, 1, 1) * 10.0
    k = torch.arange(bands).view(1, 1, bands, 1, 1) * 1.0
    return (i + s + k).expand(batch, seasons, bands, 2, 2).reshape(batch, seasons * bands, 2, 2)


def _season_order(y: torch.Tensor, seasons: int, bands: int) -> list[list[int]]:
    blocks = y.reshape(y.shape[0], seasons, bands, 2, 2)[:, :, 0, 0, 0]
    return [[int(v % 100) // 10 for v in row] for row in blocks]


def test_swap_exchanges_whole_season_blocks_of_the_same_sample() -> None:
    x = _stack(64, 4, 3)
    y = seasonal_swap(x, torch_generator(0, "augment"), seasons=4, p=0.5)
    assert y.shape == x.shape and not torch.equal(x, y)
    blocks = y.reshape(64, 4, 3, 2, 2)
    assert torch.equal(blocks // 100, x.reshape(64, 4, 3, 2, 2) // 100)  # same location
    assert torch.equal(blocks % 10, x.reshape(64, 4, 3, 2, 2) % 10)  # bands kept in order
    for order in _season_order(y, 4, 3):
        moved = [s for s, v in enumerate(order) if v != s]
        assert sorted(order) == [0, 1, 2, 3]
        assert moved == [] or (len(moved) == 2 and order[moved[0]] == moved[1])


def test_swap_rate_is_p_and_every_pair_appears() -> None:
    n = 4000
    y = seasonal_swap(_stack(n, 3, 1), torch_generator(1, "augment"), seasons=3, p=0.5)
    orders = _season_order(y, 3, 1)
    swapped = [o for o in orders if o != [0, 1, 2]]
    # Binomial(4000, 0.5): sd ≈ 32; ±5 sd
    assert abs(len(swapped) - n / 2) < 160
    pairs = {tuple(s for s, v in enumerate(o) if v != s) for o in swapped}
    assert pairs == {(0, 1), (0, 2), (1, 2)}
    block0 = [o[0] for o in orders]  # season in block 0: 0 w.p. ½ + ½·⅓ = ⅔, others ⅙
    assert abs(block0.count(0) / n - 2 / 3) < 0.04


def test_p_zero_and_one_and_purity() -> None:
    x = _stack(8, 2, 2)
    keep = x.clone()
    assert torch.equal(seasonal_swap(x, torch_generator(2), seasons=2, p=0.0), x)
    y = seasonal_swap(x, torch_generator(2), seasons=2, p=1.0)  # S = 2: the only pair
    assert _season_order(y, 2, 2) == [[1, 0]] * 8
    assert torch.equal(x, keep)  # input untouched
    a = seasonal_swap(x, torch_generator(3), seasons=2, p=0.5)
    b = seasonal_swap(x, torch_generator(3), seasons=2, p=0.5)
    assert torch.equal(a, b)


def test_refuses_bands_that_do_not_split_into_seasons() -> None:
    with pytest.raises(ValueError, match=r"5 bands do not split into seasons=2"):
        seasonal_swap(torch.zeros(2, 5, 2, 2), torch_generator(0), seasons=2, p=0.5)


def test_registered_for_train_augment() -> None:
    assert "seasonal_swap" in AUGMENTATIONS
    pipe = build_pipeline([("seasonal_swap", {"seasons": 2, "p": 1.0})])
    y = pipe(_stack(3, 2, 1), torch_generator(0))
    assert _season_order(y, 2, 1) == [[1, 0]] * 3
