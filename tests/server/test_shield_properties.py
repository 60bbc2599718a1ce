"""Properties of the CGF + HRA and FLAME aggregates (hypothesis): permutation invariance of
the kept set and the weights, weights on the simplex, the aggregate in the convex hull."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from geofl.algorithms import dual_shield
from geofl.server import cgf, columns
from geofl.server.cgf import CgfSettings, cgf_scores, cosine_distances
from geofl.server.flame import cosine_distance_matrix, flame
from geofl.server.reputation import reputation_step, reputation_weights

matrices = st.integers(3, 12).flatmap(
    lambda k: arrays(
        "float64",
        (k, 6),
        elements=st.floats(-100, 100, allow_nan=False, allow_infinity=False, width=32),
    )
)


def _hra(u: torch.Tensor, ref: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, ...]:
    res = cgf_scores(u, ref, CgfSettings(lam=1.0))
    r = reputation_step(prev, res.hard, res.soft, beta=0.92, r_min=0.1)
    return res.hard, reputation_weights(r, res.hard)


@settings(deadline=None)
@given(matrices, st.data())
def test_cgf_hra_is_permutation_invariant_and_convex(x: object, data: st.DataObject) -> None:
    u = torch.tensor(x, dtype=torch.float32)
    k = u.shape[0]
    ref = u.median(0).values
    prev = torch.tensor(
        data.draw(st.lists(st.floats(0.1, 1.0), min_size=k, max_size=k)), dtype=torch.float64
    )
    hard, w = _hra(u, ref, prev)
    perm = torch.tensor(data.draw(st.permutations(range(k))))
    hard_p, w_p = _hra(u[perm], ref, prev[perm])
    assert torch.equal(hard_p, hard[perm])
    # BLAS rounds a row's dot product by its position (~1e-7 of s): weights agree to that
    assert torch.allclose(w_p, w[perm], rtol=0, atol=1e-5)
    assert bool((w >= 0).all() and (w <= 1).all()) and float(w.sum()) == pytest.approx(1.0)
    agg = w.to(torch.float32) @ u
    kept = u[hard]
    slack = 1e-4 * (1 + kept.abs().max())
    assert bool((agg >= kept.min(0).values - slack).all())
    assert bool((agg <= kept.max(0).values + slack).all())


@settings(deadline=None)
@given(matrices, st.data())
def test_flame_weights_and_hull(x: object, data: st.DataObject) -> None:
    u = torch.tensor(x, dtype=torch.float32)
    k = u.shape[0]
    assume(bool((torch.linalg.vector_norm(u, dim=1) > 0).all()))
    res = flame(u, torch.ones(k), noise_lambda=0.0, generator=torch.Generator())
    w = res.weights
    assert bool((w >= 0).all() and (w <= 1).all()) and float(w.sum()) == pytest.approx(1.0)
    assert not bool((w[~res.kept] != 0).any())
    # clipping scales rows toward 0, so the aggregate lies in the hull of the kept rows and 0
    pts = torch.cat([u[res.kept], torch.zeros(1, u.shape[1])])
    slack = 1e-4 * (1 + pts.abs().max())
    assert bool((res.delta >= pts.min(0).values - slack).all())
    assert bool((res.delta <= pts.max(0).values + slack).all())


@settings(deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(matrices, st.data())
def test_flame_kept_set_is_permutation_invariant_for_distinct_distances(
    x: object, data: st.DataObject
) -> None:
    u = torch.tensor(x, dtype=torch.float64)
    k = u.shape[0]
    # a fixed irrational perturbation makes equal drawn rows (hence tied distances) rare
    u = u + 1e-3 * torch.sqrt(torch.arange(1.0, u.numel() + 1, dtype=torch.float64)).view_as(u)
    dist, norms = cosine_distance_matrix(u)
    off = dist[torch.triu(torch.ones(k, k, dtype=torch.bool), 1)]
    # HDBSCAN's tie-breaking may follow the row order: only distinct distances are compared
    assume(bool((norms > 0).all()) and torch.unique(off.round(decimals=9)).numel() == off.numel())
    perm = torch.tensor(data.draw(st.permutations(range(k))))
    a = flame(u, torch.ones(k), noise_lambda=0.0, generator=torch.Generator())
    b = flame(u[perm], torch.ones(k), noise_lambda=0.0, generator=torch.Generator())
    assert torch.equal(b.kept, a.kept[perm])
    assert torch.allclose(b.weights, a.weights[perm])


def test_threaded_paths_match_the_plain_products(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(9, 5000, generator=gen)
    ref = torch.randn(5000, generator=gen)
    plain = cosine_distances(u, ref, exact=True)
    monkeypatch.setattr(cgf, "BLOCK_COLUMNS", 64)
    monkeypatch.setattr(columns, "BLOCK_BYTES", 9 * 4 * 300)
    monkeypatch.setattr(columns, "MIN_COLUMNS_PER_WORKER", 700)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert torch.allclose(cosine_distances(u, ref), plain, rtol=1e-6, atol=1e-9)
        w = torch.rand(9, generator=gen, dtype=torch.float64)
        keep = torch.tensor([True, False] * 4 + [True])
        agg, mean = dual_shield.survivor_products(w / w.sum(), keep, u)
    finally:
        torch.set_num_threads(threads)
    assert torch.allclose(agg, (w / w.sum()).float() @ u, atol=1e-5)
    assert torch.allclose(mean, u[keep].mean(0), atol=1e-5)
