"""geofl's aggregators against Flower's reference aggregation functions
(``flwr.server.strategy.aggregate``) on random inputs: weighted mean (FedAvg), coordinate
median, β-trimmed mean, Krum and Multi-Krum. Both sides take the same ``[K, D]`` float32
updates; the mean differs only by float32 summation order (Flower sums n_k·Δw_k then
divides, geofl forms α_k = n_k/n first), the order statistics and Krum's choice agree
exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

aggregate = pytest.importorskip("flwr.server.strategy.aggregate")

from geofl import plugins  # noqa: E402
from geofl.server.aggregators import AGGREGATORS  # noqa: E402

plugins.load_all()


def _inputs(seed: int, k: int, d: int) -> tuple[torch.Tensor, list[int]]:
    rng = np.random.default_rng(seed)
    updates = rng.standard_normal((k, d)).astype(np.float32)
    updates[0] *= 20.0  # an outlier the robust rules must handle as Flower does
    return torch.from_numpy(updates), [int(n) for n in rng.integers(5, 200, size=k)]


def _results(updates: torch.Tensor, sizes: list[int]) -> list[tuple[list[np.ndarray], int]]:
    return [([u.numpy()], n) for u, n in zip(updates, sizes, strict=True)]


def _geofl(name: str, updates: torch.Tensor, sizes: list[int], **params: object) -> np.ndarray:
    agg = AGGREGATORS.build(name, params)
    out = agg(updates, torch.tensor(sizes, dtype=torch.float32))
    return out.delta.numpy()


@pytest.mark.parametrize("seed", range(5))
def test_weighted_mean_matches_flower(seed: int) -> None:
    updates, sizes = _inputs(seed, 7, 301)
    (ref,) = aggregate.aggregate(_results(updates, sizes))
    np.testing.assert_allclose(_geofl("mean", updates, sizes), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("seed", "k"), [(0, 7), (1, 8), (2, 9), (3, 10)])
def test_median_matches_flower(seed: int, k: int) -> None:
    updates, sizes = _inputs(seed, k, 257)
    (ref,) = aggregate.aggregate_median(_results(updates, sizes))
    np.testing.assert_array_equal(_geofl("median", updates, sizes), ref)


@pytest.mark.parametrize(("seed", "k", "beta"), [(0, 10, 0.1), (1, 10, 0.2), (2, 9, 0.25)])
def test_trimmed_mean_matches_flower(seed: int, k: int, beta: float) -> None:
    updates, sizes = _inputs(seed, k, 257)
    (ref,) = aggregate.aggregate_trimmed_avg(_results(updates, sizes), beta)
    got = _geofl("trimmed_mean", updates, sizes, trim_fraction=beta)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("seed", "f"), [(0, 1), (1, 2), (2, 3)])
def test_krum_selects_what_flower_selects(seed: int, f: int) -> None:
    updates, sizes = _inputs(seed, 10, 129)
    (ref,) = aggregate.aggregate_krum(_results(updates, sizes), f, 0)
    got = _geofl("krum", updates, sizes, num_byzantine=f, num_selected=1)
    np.testing.assert_array_equal(got, ref)


def test_multi_krum_matches_flower_with_equal_sizes() -> None:
    # Flower's Multi-Krum averages the selected updates by n_k; geofl's uniformly
    # (Blanchard et al.): equal n_k make the two the same rule.
    updates, _ = _inputs(4, 10, 129)
    sizes = [50] * 10
    (ref,) = aggregate.aggregate_krum(_results(updates, sizes), 2, 4)
    got = _geofl("krum", updates, sizes, num_byzantine=2, num_selected=4)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
