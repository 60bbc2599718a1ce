"""FLAME (Nguyen et al. 2022): the majority cluster, median-norm clipping, noise from an
explicit generator."""

from __future__ import annotations

import pytest
import torch

from geofl.rng import torch_generator
from geofl.server.flame import FLAME_LAMBDA_IC, cosine_distance_matrix, flame, flame_mask


def _cluster() -> torch.Tensor:
    """7 benign updates e1 + 0.1·e_(2+i) and 3 malicious 4·(e2 + 0.1·e_(9+i)), D = 12.

    Cosine distances: 1 − 1/1.01 = 0.0099 within each group (all pairs alike), 1 between
    the groups; norms √1.01 (benign) and 4√1.01 (malicious).
    """
    u = torch.zeros(10, 12, dtype=torch.float64)
    u[:7, 0] = 1.0
    u[7:, 1] = 1.0
    u[torch.arange(10), torch.arange(2, 12)] = 0.1
    u[7:] *= 4.0
    return u


def _noisy_cluster(seed: int, d: int = 20) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.zeros(d), torch.zeros(d)
    a[0], b[1] = 1.0, 1.0
    benign = a + 0.05 * torch.randn(7, d, generator=gen)
    return torch.cat([benign, 4.0 * (b + 0.05 * torch.randn(3, d, generator=gen))])


def test_cosine_distance_matrix_by_hand() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [0.0, 0.0]])
    dist, norms = cosine_distance_matrix(u)
    assert norms.tolist() == [1.0, 2.0, 3.0, 0.0]
    assert dist[0].tolist() == [0.0, 1.0, 2.0, 1.0]  # orthogonal 1, opposite 2, zero row 1
    assert torch.equal(dist, dist.T)


def test_the_three_malicious_updates_are_excluded() -> None:
    dist, _ = cosine_distance_matrix(_cluster())
    assert dist[0, 1] == pytest.approx(1.0 - 1.0 / 1.01) and dist[0, 9] == pytest.approx(1.0)
    assert flame_mask(dist).tolist() == [True] * 7 + [False] * 3


@pytest.mark.parametrize("seed", range(5))
def test_noisy_majority_keeps_most_benign_and_no_malicious(seed: int) -> None:
    mask = flame_mask(cosine_distance_matrix(_noisy_cluster(seed))[0])
    assert not mask[7:].any() and int(mask[:7].sum()) >= 5


def test_clipping_to_the_median_norm_without_noise() -> None:
    u = _cluster()
    res = flame(u, torch.ones(10), noise_lambda=0.0, generator=torch.Generator())
    norms = torch.linalg.vector_norm(u.double(), dim=1)
    # median of 7 × √1.01 and 3 × 4√1.01: √1.01; nothing benign is clipped
    assert res.clip_bound == pytest.approx(1.01**0.5)
    assert float(norms.median()) == pytest.approx(1.01**0.5)
    assert res.delta.tolist() == pytest.approx([1.0, 0.0] + [0.1 / 7] * 7 + [0.0] * 3)
    assert res.kept.tolist() == [True] * 7 + [False] * 3
    assert res.weights.tolist() == pytest.approx([1 / 7] * 7 + [0.0] * 3)
    assert res.noise_std == 0.0 and res.clipped == 0
    # benign steps of 1 1 1 1 2 3 5 (× √1.01), malicious 4 4 4: median (2 + 3)/2 = 2.5,
    # so a kept 3 or 5 is clipped to 2.5. (The seven directions tie exactly; HDBSCAN's
    # single-cluster labelling keeps the points that leave the cluster last, so rounding may
    # drop one of them: the expected mean is taken over what was kept.)
    c = torch.tensor([1.0, 1, 1, 1, 2, 3, 5, 1, 1, 1], dtype=torch.float64)
    res = flame(u * c[:, None], torch.ones(10), noise_lambda=0.0, generator=torch.Generator())
    assert res.clip_bound == pytest.approx(2.5 * 1.01**0.5)
    assert not res.kept[7:].any() and int(res.kept.sum()) >= 6
    steps = torch.where(res.kept, c.clamp(max=2.5), 0.0)
    expected = (steps[:, None] * u).sum(0) / int(res.kept.sum())
    assert torch.allclose(res.delta, expected, atol=1e-12)
    assert res.clipped == int((res.kept & (c > 2.5)).sum())


def test_noise_is_lambda_times_the_median_norm_from_the_given_generator() -> None:
    gen = torch.Generator().manual_seed(5)
    u = torch.randn(8, 200_000, generator=gen) + 1.0
    a = flame(u, torch.ones(8), noise_lambda=0.01, generator=torch_generator(1, "flame", 3))
    b = flame(u, torch.ones(8), noise_lambda=0.01, generator=torch_generator(1, "flame", 3))
    c = flame(u, torch.ones(8), noise_lambda=0.01, generator=torch_generator(1, "flame", 4))
    assert torch.equal(a.delta, b.delta) and not torch.equal(a.delta, c.delta)
    clean = flame(u, torch.ones(8), noise_lambda=0.0, generator=torch.Generator())
    noise = (a.delta - clean.delta).double()
    assert a.noise_std == pytest.approx(0.01 * a.clip_bound)
    assert float(noise.std()) == pytest.approx(a.noise_std, rel=0.01)
    assert FLAME_LAMBDA_IC == 0.001


def test_small_rounds_keep_everything() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert flame_mask(cosine_distance_matrix(u)[0]).tolist() == [True, True]
