"""σ̂ = 1.4826·MAD of an update: hand numbers, noise levels, and independence from the norm."""

from __future__ import annotations

import math

import pytest
import torch

from geofl.update import noise_scale


def test_hand_example() -> None:
    # median 2; |x − 2| = [2, 1, 0, 1, 8], median 1 → σ̂ = 1.4826
    x = torch.tensor([[0.0, 1.0, 2.0, 3.0, 10.0], [5.0, 5.0, 5.0, 5.0, 5.0]])
    assert noise_scale(x).tolist() == pytest.approx([1.4826, 0.0])
    assert float(noise_scale(x[0])) == pytest.approx(1.4826)


def test_blind_to_common_offset_and_empty() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 20_001, generator=g, dtype=torch.float64)
    base = noise_scale(x)
    assert torch.allclose(noise_scale(x + 1e6), base, rtol=1e-6)
    assert noise_scale(torch.zeros(2, 0)).tolist() == [0.0, 0.0]


def _trained_like(d: int, g: torch.Generator) -> torch.Tensor:
    """A trained update's shape: most coordinates tiny, 5 % carry large heavy-tailed steps."""
    signal = 1e-4 * torch.randn(d, generator=g)
    big = torch.rand(d, generator=g) < 0.05
    # ratio of normals (Cauchy-like tails), capped: heavy-tailed large steps
    heavy = 0.01 * torch.randn(d, generator=g) / torch.randn(d, generator=g).abs().clamp_min(0.05)
    return torch.where(big, heavy, signal)


def test_separates_noise_levels_on_noised_updates() -> None:
    g = torch.Generator().manual_seed(1)
    d = 200_000
    signal = _trained_like(d, g)
    levels = [0.0, 1e-3, 3e-3, 1e-2, 3e-2]
    stack = torch.stack([signal + s * torch.randn(d, generator=g) for s in levels])
    est = noise_scale(stack).tolist()
    rms = (torch.linalg.vector_norm(stack, dim=1) / math.sqrt(d)).tolist()
    assert est == sorted(est)  # monotone in σ
    for s, e in zip(levels[1:], est[1:], strict=True):
        assert e == pytest.approx(s, rel=0.1)  # σ̂ ≈ σ once noise exceeds the signal bulk
    # the norm-based estimate is swamped by the signal's large coordinates at small σ
    assert rms[1] > 5 * levels[1]


def test_not_a_function_of_the_norm() -> None:
    g = torch.Generator().manual_seed(2)
    d = 100_000
    noise = torch.randn(d, generator=g)
    sparse = torch.zeros(d)
    sparse[:100] = float(torch.linalg.vector_norm(noise)) / 10.0  # same norm, 100 coordinates
    stack = torch.stack([noise, sparse])
    norms = torch.linalg.vector_norm(stack, dim=1)
    assert float(norms[0]) == pytest.approx(float(norms[1]), rel=1e-5)
    est = noise_scale(stack)
    assert float(est[0]) == pytest.approx(1.0, rel=0.02)
    assert float(est[1]) == 0.0


def test_strided_subset_bounds_cost_and_agrees() -> None:
    g = torch.Generator().manual_seed(3)
    x = 0.5 * torch.randn(2, 1_000_003, generator=g)
    full = noise_scale(x, max_coords=2_000_000)
    sub = noise_scale(x, max_coords=1 << 16)
    assert torch.allclose(sub, full, rtol=0.02)
