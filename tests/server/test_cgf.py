"""Cosine-guided filter (004 Eq. 6–7): hand-checked scores, MAD = 0, the soft mask, the
K_min fallback, and cosines that stay exact under a large common offset."""

from __future__ import annotations

import logging
import math
from fractions import Fraction

import pytest
import torch

from geofl.server.cgf import (
    EPS_MAD,
    CgfSettings,
    CosineFilter,
    cgf_scores,
    cosine_distances,
    geometric_median,
    mad_scores,
    soft_mask,
)

E1 = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)


def _s(eps: float) -> float:
    """1 − cos between (1, ε, 0, 0) and (1, 0, 0, 0)."""
    return 1.0 - 1.0 / math.sqrt(1.0 + eps * eps)


def _example() -> torch.Tensor:
    """Six benign (1, ε, 0, 0), ε = ±0.1, ±0.2, ±0.3; a benign large step 5·(1, 0.3); a scaled
    sign-flipped update −10·e1; a rotated one (0, 1) of benign norm."""
    benign = [[1.0, e, 0.0, 0.0] for e in (-0.3, -0.2, -0.1, 0.1, 0.2, 0.3)]
    rows = [*benign, [5.0, 1.5, 0.0, 0.0], [-10.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    return torch.tensor(rows, dtype=torch.float64)


def test_hand_built_example_flags_scaled_and_rotated_keeps_large_step() -> None:
    res = cgf_scores(_example(), E1, CgfSettings(lam=1.0))
    s = [_s(e) for e in (0.3, 0.2, 0.1, 0.1, 0.2, 0.3)] + [_s(0.3), 2.0, 1.0]
    assert res.distances.tolist() == pytest.approx(s, abs=1e-12)
    # sorted s: s.1 s.1 s.2 s.2 s.3 s.3 s.3 1 2 → median s(0.3) = 0.042174
    med = _s(0.3)
    # |s − med| sorted: 0 0 0 .0228 .0228 .0372 .0372 .958 1.958 → MAD = s(.3) − s(.2)
    mad = med - _s(0.2)
    assert res.mad == pytest.approx(mad, abs=1e-12)
    z = [(x - med) / (1.4826 * mad + EPS_MAD) for x in s]
    assert res.z.tolist() == pytest.approx(z, rel=1e-9)
    assert z[7] == pytest.approx(58.03, abs=0.01) and z[8] == pytest.approx(28.39, abs=0.01)
    assert max(z[:7]) == 0.0  # every benign score is at or below the median
    assert res.hard.tolist() == [True] * 7 + [False, False]
    # the large step has exactly the direction of (1, 0.3): same score, kept
    assert float(res.distances[6]) == pytest.approx(float(res.distances[5]), abs=1e-15)
    assert res.soft[7:].tolist() == pytest.approx(
        [1 / (1 + math.exp(z[7] - 1)), 1 / (1 + math.exp(z[8] - 1))], rel=1e-6
    )


def test_filter_from_round_one_uses_a_robust_reference() -> None:
    # No previous round: the coordinate median, not the mean that −10·e1 would drag.
    res = CosineFilter(CgfSettings(lam=2.0, k_min=1)).scores(_example())
    assert res.hard[:7].all() and not res.hard[7:].any()


@pytest.mark.parametrize("reference", ["median", "trimmed_mean", "geometric_median", "history"])
def test_every_reference_flags_the_attackers(reference: str) -> None:
    # λ = 2 (Table 10's range): a robust reference of the round is not exactly e1, so the
    # benign spread around it is wider than around e1.
    # (trimmed mean: 2 of 9 trimmed at each end; β = 0.1 would trim none, the plain mean)
    settings = CgfSettings(lam=2.0, k_min=1, reference=reference, trim_fraction=0.25)  # type: ignore[arg-type]
    f = CosineFilter(settings)
    res = f.scores(_example())
    assert res.hard.tolist() == [True] * 7 + [False, False]


def test_mad_zero_keeps_equal_scores_and_rejects_any_larger() -> None:
    same = torch.tensor([[2.0, 1.0, 0.0]] * 5)
    res = cgf_scores(same, torch.tensor([1.0, 1.0, 1.0]), CgfSettings())
    assert res.mad == 0.0 and res.z.tolist() == [0.0] * 5 and res.hard.all()
    assert res.soft.tolist() == pytest.approx([1.0 / (1.0 + math.exp(-1.0))] * 5)
    odd = torch.cat([same, torch.tensor([[0.0, 0.0, 1.0]])])
    res = cgf_scores(odd, torch.tensor([2.0, 1.0, 0.0]), CgfSettings())
    assert res.mad == 0.0 and res.distances[:5].tolist() == [0.0] * 5
    assert res.z[5] == pytest.approx(1.0 / EPS_MAD)  # (1 − 0) / (0 + ε_MAD)
    assert res.hard.tolist() == [True] * 5 + [False] and float(res.soft[5]) == 0.0


def test_soft_mask_values() -> None:
    z = torch.tensor([1.0, -9.0, 11.0, 1e12, -1e12])
    m = soft_mask(z, lam=1.0, slope=1.0)
    assert float(m[0]) == 0.5  # z = λ
    assert float(m[1]) == pytest.approx(1.0 / (1.0 + math.exp(-10.0)))  # 0.9999546
    assert float(m[2]) == pytest.approx(1.0 / (1.0 + math.exp(10.0)))  # 4.54e-5
    assert m[3:].tolist() == [0.0, 1.0] and not torch.isnan(m).any()
    assert float(soft_mask(torch.tensor([2.0]), lam=1.5, slope=4.0)[0]) == pytest.approx(
        1.0 / (1.0 + math.exp(2.0))
    )


def test_zero_norm_update_and_reference_have_no_direction() -> None:
    u = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.1]])
    s = cosine_distances(u, torch.tensor([1.0, 0.0]))
    assert s[1] == 1.0 and not torch.isnan(s).any()
    assert cosine_distances(u, torch.zeros(2)).tolist() == [1.0, 1.0, 1.0]
    res = cgf_scores(u, torch.zeros(2), CgfSettings())  # all 1: MAD = 0, everything kept
    assert res.hard.all()


def _exact_s(u: list[float], r: list[float]) -> float:
    """1 − cos = (‖u‖²‖r‖² − ⟨u, r⟩²) / (‖u‖‖r‖ (‖u‖‖r‖ + ⟨u, r⟩)): the numerator in exact
    rationals (float inputs are rationals), the rest cancels nothing (⟨u, r⟩ > 0 here)."""
    fu, fr = [Fraction(x) for x in u], [Fraction(x) for x in r]
    dot = sum(a * b for a, b in zip(fu, fr, strict=True))
    prod = sum(a * a for a in fu) * sum(b * b for b in fr)
    root = math.sqrt(prod)
    return float(prod - dot * dot) / (root * (root + float(dot)))


def test_cosines_stay_exact_under_a_large_common_offset() -> None:
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(6, 50, generator=gen, dtype=torch.float64)
    u = (base * 1e-3 + 1e3).to(torch.float32)  # every update ≈ 1e3·(1, …, 1)
    ref = torch.full((50,), 1e3) + torch.randn(50, generator=gen) * 1e-3
    s = cosine_distances(u, ref)
    exact = [_exact_s(row, ref.tolist()) for row in u.tolist()]
    assert max(exact) < 1e-8  # the regime where 1 − cos cancels in float32 and float64
    assert s.tolist() == pytest.approx(exact, rel=1e-6)
    naive = 1.0 - torch.nn.functional.cosine_similarity(u, ref[None], dim=1)
    assert not torch.allclose(naive.double(), torch.tensor(exact, dtype=torch.float64), rtol=1e-2)
    # and the MAD score separates a rotated row exactly as without the offset
    rotated = torch.cat([u, (u[0] + torch.linspace(-1e-1, 1e-1, 50))[None]])
    res = cgf_scores(rotated, ref, CgfSettings())
    assert res.hard.tolist() == [True] * 6 + [False]


def test_fallback_without_history_keeps_the_mask_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    f = CosineFilter(CgfSettings(lam=2.0, k_min=8))
    with caplog.at_level(logging.WARNING, logger="geofl"):
        res = f.scores(_example())
    assert not res.fallback and int(res.hard.sum()) == 7
    assert "only 7 of 9 updates survived (K_min = 8)" in res.reason
    assert "no other trusted history" in caplog.text


def test_fallback_scores_against_the_trusted_history() -> None:
    f = CosineFilter(CgfSettings(k_min=8))
    history = torch.tensor([1.0, 0.35, 0.0, 0.0])
    f.observe(history, cgf_scores(_example(), E1, CgfSettings()))  # a clean earlier round
    assert f.history is not None and torch.equal(f.history, history)
    f.previous = E1.clone()  # this round's first reference: 7 survive < K_min = 8
    res = f.scores(_example())
    assert res.fallback and "scored against the trusted history" in res.reason
    expected = cgf_scores(_example(), history, CgfSettings())
    assert torch.equal(res.distances, expected.distances)
    # a fallback round does not move the history; a clean one moves it by (1 − η)
    f.observe(torch.zeros(4), res)
    assert torch.equal(f.history, history)
    f.observe(torch.zeros(4), cgf_scores(_example(), E1, CgfSettings(k_min=1)))
    assert torch.allclose(f.history, 0.9 * history)


def test_the_first_round_seeds_the_history_even_when_degenerate() -> None:
    f = CosineFilter(CgfSettings(lam=2.0, k_min=8))
    first = f.scores(_example())
    assert first.reason and not first.fallback
    f.observe(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64), first)
    assert f.history is not None
    assert f.scores(_example()).fallback  # the next degenerate round can fall back


def test_state_round_trips() -> None:
    f = CosineFilter(CgfSettings())
    f.observe(torch.arange(4.0), cgf_scores(_example(), E1, CgfSettings()))
    g = CosineFilter(CgfSettings())
    g.load_state_dict(f.state_dict())
    assert g.previous is not None and torch.equal(g.previous, f.previous)
    assert torch.equal(g.scores(_example()).z, f.scores(_example()).z)


def test_mad_scores_use_the_midpoint_median_for_even_k() -> None:
    z, mad = mad_scores(torch.tensor([0.0, 1.0, 2.0, 10.0]))
    # median 1.5; |d − 1.5| = 1.5 .5 .5 8.5 → MAD 1.0
    assert mad == 1.0
    assert z.tolist() == pytest.approx([-1.5 / 1.4826, -0.5 / 1.4826, 0.5 / 1.4826, 8.5 / 1.4826])


def test_geometric_median_resists_an_outlier() -> None:
    u = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [100.0, 100.0]])
    gm = geometric_median(u)
    # on the diagonal where the unit vectors balance: 6t² − 6t + 1 = 0, t = (3 + √3)/6
    t = (3.0 + math.sqrt(3.0)) / 6.0
    assert gm.tolist() == pytest.approx([t, t], abs=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_blocked_fast_path_matches_the_exact_reference_on_adversarial_inputs(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """The one-read blocked path (dots and norms per cache block, float64 across blocks)
    against the float64 difference form, with blocks and worker threads forced: a large
    common offset, exact ties, a zero-norm row, a sign-flipped row and a zero column tail."""
    from geofl.server import columns

    gen = torch.Generator().manual_seed(11)
    d = 3000
    base = torch.randn(d, generator=gen)
    rows = [
        base * 1e-3 + 1e3,  # large common offset: near-parallel to the reference
        base * 1e-3 + 1e3,  # an exact tie with the row above
        torch.zeros(d),  # zero norm: no direction
        -5.0 * (base + 1e3),  # sign-flipped and scaled
        torch.randn(d, generator=gen),  # unrelated direction
        torch.cat([torch.randn(d // 2, generator=gen), torch.zeros(d - d // 2)]),
    ]
    u = torch.stack(rows).to(torch.float32)
    ref = (torch.full((d,), 1e3) + torch.randn(d, generator=gen) * 1e-3).to(torch.float32)
    monkeypatch.setattr(columns, "BLOCK_BYTES", 6 * 4 * 256)  # 256-column blocks
    monkeypatch.setattr(columns, "MIN_COLUMNS_PER_WORKER", 500)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fast = cosine_distances(u, ref)
        dots, sq, _ = columns.dots_and_norms(u, ref)
    finally:
        torch.set_num_threads(before)
    exact = cosine_distances(u, ref, exact=True)
    assert fast[2] == 1.0 and exact[2] == 1.0
    assert fast[0] == fast[1]  # ties stay ties
    assert torch.allclose(fast, exact, rtol=1e-6, atol=1e-9)
    x64 = u.to(torch.float64)
    assert torch.allclose(dots, x64 @ ref.to(torch.float64), rtol=1e-6)
    assert torch.allclose(sq, x64.square().sum(1), rtol=1e-6)
    assert torch.get_num_threads() == before


def test_scoring_rows_by_index_equals_scoring_their_copy() -> None:
    """``rows`` scores a subset of the stack without copying it: same distances (fast and
    exact paths) and the same mask as on ``updates[rows]``."""
    u = torch.cat([_example(), torch.tensor([[-3.0, 0.2, 0.0, 0.0], [0.9, 0.05, 0.0, 0.0]])])
    rows = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 10])  # row 9 dropped by a defense
    sub = u[rows]
    assert torch.equal(cosine_distances(u, E1, rows=rows), cosine_distances(sub, E1))
    assert torch.equal(
        cosine_distances(u, E1, rows=rows, exact=True), cosine_distances(sub, E1, exact=True)
    )
    f = CosineFilter(CgfSettings(reference="median"))
    a, b = f.scores(u, rows), f.scores(sub)
    assert torch.equal(a.hard, b.hard) and torch.equal(a.z, b.z)
    assert a.hard[7:].tolist() == [False, False, True]  # the attackers, a benign row 10
