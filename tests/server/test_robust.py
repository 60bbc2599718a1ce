"""Robust aggregators: trimmed mean, coordinate median, Krum / Multi-Krum."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from geofl.errors import AggregationError, ConfigError
from geofl.server.aggregators import AGGREGATORS
from geofl.server.robust import (
    coordinate_median,
    coordinate_median_aggregate,
    coordinate_median_weights,
    distances,
    krum,
    krum_scores,
    multi_krum,
    order_stats,
    pairwise_squared_distances,
    trim_count,
    trimmed_mean,
    trimmed_mean_aggregate,
    trimmed_mean_weights,
)

# ----------------------------------------------------------------------------- by hand


def test_trimmed_mean_by_hand() -> None:
    # column 0: 1 2 3 4 100, K=5, β=0.2 → b=⌊0.2·5⌋=1: drop 1 and 100, mean(2,3,4) = 3
    # column 1: 2 5 1 0 -7  → sorted -7 0 1 2 5, drop -7 and 5: mean(0,1,2) = 1
    u = torch.tensor([[1.0, 2.0], [2.0, 5.0], [3.0, 1.0], [4.0, 0.0], [100.0, -7.0]])
    assert trimmed_mean(u, trim_fraction=0.2).tolist() == [3.0, 1.0]
    # β=0.4 → b=2: only the middle value stays: 3 and 1
    assert trimmed_mean(u, trim_fraction=0.4).tolist() == [3.0, 1.0]
    # β=0.1 → b=⌊0.5⌋=0: the plain mean: (1+2+3+4+100)/5 = 22, (2+5+1+0-7)/5 = 0.2
    assert torch.equal(trimmed_mean(u, trim_fraction=0.1), u.mean(0))


def test_trimmed_mean_ties_by_hand() -> None:
    # K=6, β=0.2 → b=1. Column 5 5 5 1 9 5: drop one 1 and the 9, mean(5,5,5,5) = 5.
    # Column 2 2 2 2 2 7: drop one 2 and the 7, mean(2,2,2,2) = 2.
    u = torch.tensor([[5.0, 2.0], [5.0, 2.0], [5.0, 2.0], [1.0, 2.0], [9.0, 2.0], [5.0, 7.0]])
    assert trimmed_mean(u, trim_fraction=0.2).tolist() == [5.0, 2.0]


def test_trim_count_floor_and_slack() -> None:
    assert trim_count(100, 0.1) == 10
    assert trim_count(100, 0.29) == 29  # 0.29·100 = 28.999999999999996 in floating point
    assert trim_count(9, 0.25) == 2  # ⌊2.25⌋
    assert trim_count(3, 0.3) == 0  # ⌊0.9⌋: nothing trimmed


def test_median_by_hand() -> None:
    # odd K=5: sorted 1 2 3 4 100 → 3;  -7 0 1 2 5 → 1
    u = torch.tensor([[1.0, 2.0], [2.0, 5.0], [3.0, 1.0], [4.0, 0.0], [100.0, -7.0]])
    assert coordinate_median(u).tolist() == [3.0, 1.0]
    # even K=4: sorted 1 2 3 4 → (2+3)/2 = 2.5;  0 1 2 5 → (1+2)/2 = 1.5
    assert coordinate_median(u[:4]).tolist() == [2.5, 1.5]
    # K=1: the row itself; K=2: the midpoint
    assert coordinate_median(u[:1]).tolist() == [1.0, 2.0]
    assert coordinate_median(u[:2]).tolist() == [1.5, 3.5]


def test_median_midpoint_does_not_overflow() -> None:
    # float32 max ≈ 3.4e38: the float32 sum 3e38 + 3.2e38 of the middle values overflows
    u = torch.tensor([[3.3e38], [3e38], [-1.0], [3.2e38]])
    assert coordinate_median(u).tolist() == [pytest.approx(3.1e38, rel=1e-6)]


def _w(values: list[float]) -> list[Any]:
    """Expected weights, to float64 rounding."""
    return [pytest.approx(v, abs=1e-15) for v in values]


def test_trimmed_mean_weights_by_hand() -> None:
    # K=5, β=0.2 → b=1, 3 kept order statistics of 1/3 each.
    # column 0: 1 2 3 4 100 → rows 1, 2, 3 kept;  column 1: 2 5 1 0 −7 → rows 3, 2, 0 kept
    # row 0: (0 + ⅓)/2 = ⅙, row 1: (⅓ + 0)/2 = ⅙, rows 2, 3: ⅓, row 4: trimmed twice → 0
    u = torch.tensor([[1.0, 2.0], [2.0, 5.0], [3.0, 1.0], [4.0, 0.0], [100.0, -7.0]])
    agg = trimmed_mean_aggregate(u, trim_fraction=0.2)
    assert agg.delta.tolist() == [3.0, 1.0]
    assert agg.weights.tolist() == _w([1 / 6, 1 / 6, 1 / 3, 1 / 3, 0.0])
    assert torch.equal(trimmed_mean_weights(u, trim_fraction=0.2), agg.weights)
    # β=0.4 → b=2: only the middle value, as the median: row 2 in both columns
    assert trimmed_mean_weights(u, trim_fraction=0.4).tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    # b = ⌊0.1·5⌋ = 0: nothing trimmed, the plain mean: 1/K each
    assert trimmed_mean_weights(u, trim_fraction=0.1).tolist() == [0.2] * 5


def test_trimmed_mean_weights_ties_by_hand() -> None:
    # K=6, β=0.2 → b=1, 4 kept positions (1 … 4) of ¼ each.
    # column 0: 5 5 5 1 9 5 → sorted 1 | 5 5 5 5 | 9: the four 5s fill the kept positions: ¼
    # column 1: 2 2 2 2 2 7 → sorted 2 | 2 2 2 2 | 7: five 2s at positions 0 … 4 straddle the
    #   boundary; 4 of their 5 positions are kept, so each 2 gets 4/5 · ¼ = ⅕, the 7 gets 0
    # row 0–2: (¼ + ⅕)/2 = 0.225, rows 3, 4: (0 + ⅕)/2 = 0.1, row 5: (¼ + 0)/2 = 0.125
    u = torch.tensor([[5.0, 2.0], [5.0, 2.0], [5.0, 2.0], [1.0, 2.0], [9.0, 2.0], [5.0, 7.0]])
    agg = trimmed_mean_aggregate(u, trim_fraction=0.2)
    assert agg.delta.tolist() == [5.0, 2.0]
    assert agg.weights.tolist() == _w([0.225] * 3 + [0.1] * 2 + [0.125])
    # a constant column, K=4, b=1: one tie group holds both kept positions (½ each), so
    # each of its 4 members gets 2 · ½ / 4 = 1/K
    assert trimmed_mean_weights(torch.full((4, 3), 7.0), trim_fraction=0.25).tolist() == _w(
        [0.25] * 4
    )
    # ties at both ends, K=5, b=1: 1 1 4 6 6 → the 1s share position 1 (½ · ⅓ each), the 6s
    # share position 3 (½ · ⅓ each), the 4 holds position 2 (⅓)
    col = torch.tensor([[1.0], [1.0], [4.0], [6.0], [6.0]])
    assert trimmed_mean_weights(col, trim_fraction=0.2).tolist() == _w(
        [1 / 6, 1 / 6, 1 / 3, 1 / 6, 1 / 6]
    )


def test_median_weights_by_hand() -> None:
    u = torch.tensor([[1.0, 2.0], [2.0, 5.0], [3.0, 1.0], [4.0, 0.0], [100.0, -7.0]])
    # odd K=5: the middle value is row 2 in both columns
    agg = coordinate_median_aggregate(u)
    assert agg.delta.tolist() == [3.0, 1.0]
    assert agg.weights.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    # even K=4: column 0 1 2 3 4 → rows 1, 2 hold ½ each; column 1 2 5 1 0 → rows 2, 0
    # row 0: ¼, row 1: ¼, row 2: ½, row 3: 0
    assert coordinate_median_weights(u[:4]).tolist() == [0.25, 0.25, 0.5, 0.0]
    # ties: 1 3 3 3 9 → the three 3s share the middle position: ⅓ each
    tied = torch.tensor([[1.0], [3.0], [3.0], [3.0], [9.0]])
    assert coordinate_median_weights(tied).tolist() == _w([0.0, 1 / 3, 1 / 3, 1 / 3, 0.0])
    # even K, ties: 2 2 2 5 → the 2s fill positions 0–2, of which 1 and 2 (½ each) are the
    # middle ones: each 2 gets (2 · ½)/3 = ⅓
    tied_even = torch.tensor([[2.0], [2.0], [2.0], [5.0]])
    assert coordinate_median_weights(tied_even).tolist() == _w([1 / 3, 1 / 3, 1 / 3, 0.0])
    # K=1: the row itself; K=2: both middle values
    assert coordinate_median_weights(u[:1]).tolist() == [1.0]
    assert coordinate_median_weights(u[:2]).tolist() == [0.5, 0.5]


def test_krum_by_hand() -> None:
    # 1-D points 0 1 2 3 100, K=5, f=1 (K > 2f+2 = 4), K−f−2 = 2 nearest neighbours:
    #   x=0:   1² + 2² = 1 + 4 = 5
    #   x=1:   1² + 1² = 2        (neighbours 0 and 2)
    #   x=2:   1² + 1² = 2        (neighbours 1 and 3)
    #   x=3:   1² + 2² = 5
    #   x=100: 97² + 98² = 9409 + 9604 = 19013
    u = torch.tensor([[0.0], [1.0], [2.0], [3.0], [100.0]])
    assert krum_scores(u, num_byzantine=1).tolist() == [5.0, 2.0, 2.0, 5.0, 19013.0]
    res = krum(u, num_byzantine=1)
    assert res.selected.tolist() == [1]  # tie 1 vs 2: the lower index
    assert res.aggregate.tolist() == [1.0]
    # m=2: rows 1, 2 → (1+2)/2 = 1.5;  m=3: rows 1, 2, then 0 (ties 0/3 → 0) → (1+2+0)/3 = 1
    assert multi_krum(u, num_byzantine=1, num_selected=2).aggregate.tolist() == [1.5]
    res3 = multi_krum(u, num_byzantine=1, num_selected=3)
    assert res3.selected.tolist() == [1, 2, 0]
    assert res3.aggregate.tolist() == [1.0]


def test_pairwise_squared_distances_by_hand() -> None:
    # (0,0), (3,4), (1,0): 25, 1, (3-1)²+4² = 20
    d = pairwise_squared_distances(torch.tensor([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]]))
    assert d.dtype == torch.float64
    assert d.tolist() == [[0.0, 25.0, 1.0], [25.0, 0.0, 20.0], [1.0, 20.0, 0.0]]


def test_krum_picks_the_honest_cluster() -> None:
    gen = torch.Generator().manual_seed(0)
    honest = torch.ones(7, 50) + 0.01 * torch.randn(7, 50, generator=gen)
    attacker = torch.full((1, 50), -30.0)
    u = torch.cat([honest[:3], attacker, honest[3:]])  # outlier at row 3, K=8
    res = krum(u, num_byzantine=2)  # K=8 > 2·2+2 = 6
    assert int(res.selected[0]) != 3
    assert int(torch.argmax(res.scores)) == 3
    multi = multi_krum(u, num_byzantine=2, num_selected=6)  # m = K − f
    assert 3 not in multi.selected.tolist()
    assert torch.allclose(multi.aggregate, u[multi.selected].mean(0), atol=1e-6)
    assert float((multi.aggregate - 1.0).abs().max()) < 0.05


def test_aggregators_do_not_modify_inputs_and_accept_views() -> None:
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(30, 9, generator=gen)
    u = base.T  # [9, 30], non-contiguous
    before = u.clone()
    for out in (
        trimmed_mean(u, trim_fraction=0.2),
        coordinate_median(u),
        multi_krum(u, num_byzantine=1, num_selected=3).aggregate,
    ):
        assert out.shape == (30,)
    assert torch.equal(u, before)
    ref = torch.sort(u.contiguous(), dim=0).values
    assert torch.allclose(coordinate_median(u), ref[4])


# ----------------------------------------------------------------------------- registry


def test_registry_entries_ignore_weights() -> None:
    u = torch.tensor([[1.0], [2.0], [3.0], [4.0], [100.0]])
    w = torch.tensor([100.0, 1.0, 1.0, 1.0, 1.0])
    assert AGGREGATORS.build("trimmed_mean", {"trim_fraction": 0.2})(u, w).delta.tolist() == [3.0]
    assert AGGREGATORS.build("trimmed_mean")(u, w).delta.tolist() == [22.0]  # β=0.1 → b=0
    assert AGGREGATORS.build("median")(u, w).delta.tolist() == [3.0]
    # effective weights: what each row contributed, not the weights passed in
    trimmed = AGGREGATORS.build("trimmed_mean", {"trim_fraction": 0.2})(u, w)
    assert trimmed.weights.tolist() == _w([0, 1 / 3, 1 / 3, 1 / 3, 0])
    assert AGGREGATORS.build("trimmed_mean")(u, w).weights.tolist() == [0.2] * 5
    assert AGGREGATORS.build("median")(u, w).weights.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert AGGREGATORS.build("krum")(u, w).delta.tolist() == [2.0]  # f=1: scores 5 2 2 5 19013
    krum2 = AGGREGATORS.build("krum", {"num_byzantine": 1, "num_selected": 2})
    assert krum2(u, w).delta.tolist() == [2.5]
    assert krum2(u, w).weights.tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]


def test_registry_params_are_validated() -> None:
    with pytest.raises(ConfigError, match="trim_fraction"):
        AGGREGATORS.validate("trimmed_mean", {"trim_fraction": 0.5})
    with pytest.raises(ConfigError, match="unknown field"):
        AGGREGATORS.validate("median", {"k": 1})
    with pytest.raises(ConfigError, match="num_selected"):
        AGGREGATORS.validate("krum", {"num_selected": 0})
    with pytest.raises(ConfigError, match="num_byzantine"):
        AGGREGATORS.validate("krum", {"num_byzantine": -1})


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("beta", [0.5, 0.7, 1.0, -0.1, -1.0, math.nan])
def test_trim_fraction_out_of_range(beta: float) -> None:
    with pytest.raises(ValueError, match=r"trim_fraction must be in \[0, 0\.5\), got"):
        trimmed_mean(torch.ones(4, 2), trim_fraction=beta)


def test_trim_leaving_nothing() -> None:
    # 0.4999999999995·2 + slack ≥ 1 → b = 1 → K − 2b = 0
    with pytest.raises(ValueError, match="leaving none"):
        trimmed_mean(torch.ones(2, 3), trim_fraction=0.4999999999995)


def test_krum_too_few_updates() -> None:
    msg = r"Krum needs more than 2f\+2 = 8 updates, got 6; lower num_byzantine or raise"
    with pytest.raises(AggregationError, match=msg):
        krum(torch.ones(6, 3), num_byzantine=3)
    with pytest.raises(AggregationError, match="2f\\+2 = 2 updates, got 2"):
        krum_scores(torch.ones(2, 3), num_byzantine=0)
    with pytest.raises(AggregationError, match=r"num_selected=5 exceeds K − f = 4"):
        multi_krum(torch.ones(5, 3), num_byzantine=1, num_selected=5)
    with pytest.raises(ValueError, match="num_byzantine must be an integer ≥ 0, got -1"):
        krum(torch.ones(5, 3), num_byzantine=-1)
    with pytest.raises(ValueError, match="num_selected must be an integer ≥ 1, got 0"):
        multi_krum(torch.ones(5, 3), num_byzantine=1, num_selected=0)


@pytest.mark.parametrize("bad", [torch.ones(3), torch.ones(0, 4), torch.ones(2, 2, 2)])
def test_shape_errors(bad: torch.Tensor) -> None:
    for fn in (
        lambda u: trimmed_mean(u, trim_fraction=0.1),
        coordinate_median,
        lambda u: krum(u, num_byzantine=0),
    ):
        with pytest.raises(ValueError, match=r"expected updates \[K, D\]"):
            fn(bad)
    with pytest.raises(ValueError, match="floating"):
        coordinate_median(torch.ones(3, 2, dtype=torch.int64))


# ----------------------------------------------------------------------------- fast vs slow


def _reference(u: torch.Tensor, cols: list[int], beta: float) -> tuple[list[float], list[float]]:
    """Trimmed mean and median of a few columns with Python's sorted()."""
    k = u.shape[0]
    b = math.floor(beta * k + 1e-9)
    tm, med = [], []
    for j in cols:
        v = sorted(float(x) for x in u[:, j])
        kept = v[b : k - b]
        tm.append(sum(kept) / len(kept))
        med.append(v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2)
    return tm, med


@pytest.mark.parametrize(
    ("k", "d", "threads", "block", "dtype"),
    [
        (7, 50, 1, order_stats.SORT_BLOCK_ELEMENTS, torch.float32),  # one block, serial
        (20, 60_001, 2, 20 * 1000, torch.float32),  # threaded, many blocks, ragged tail
        (16, 3_000, 1, 16 * 64, torch.float64),
        (9, 500, 1, 9 * 100, torch.float16),  # torch.sort fallback path
    ],
)
def test_fast_path_matches_sorted_reference(
    k: int, d: int, threads: int, block: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(order_stats, "SORT_BLOCK_ELEMENTS", block)
    gen = torch.Generator().manual_seed(k * d)
    u = torch.randint(-3, 4, (k, d), generator=gen).to(dtype)  # small integers: many ties
    u[:, 1::2] = torch.randn(k, d // 2, generator=gen).to(dtype)
    cols = [0, 1, 2, d // 2, d // 2 + 1, d - 2, d - 1]
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tm = trimmed_mean(u, trim_fraction=0.2)
        med = coordinate_median(u)
    finally:
        torch.set_num_threads(prev)
    ref_tm, ref_med = _reference(u, cols, 0.2)
    tol = 1e-3 if dtype == torch.float16 else 1e-6
    assert tm.dtype == dtype and med.dtype == dtype
    assert tm[cols].double().tolist() == pytest.approx(ref_tm, abs=tol)
    assert med[cols].double().tolist() == pytest.approx(ref_med, abs=tol)
    # every column, against torch.sort
    srt = torch.sort(u.double(), dim=0).values
    b = trim_count(k, 0.2)
    assert torch.allclose(tm.double(), srt[b : k - b].mean(0), atol=tol)


def _slow_weights(u: torch.Tensor, lo: int, hi: int) -> list[float]:
    """Effective weights from the definition, one column and one row at a time.

    Column d: sorted positions lo … hi − 1 carry 1/(hi − lo) each; a row's share is the
    kept positions its value's tie group occupies, split equally within the group.
    """
    k, d = u.shape
    n = hi - lo
    totals = [0.0] * k
    for j in range(d):
        col = [float(v) for v in u[:, j]]
        for r in range(k):
            first = sum(v < col[r] for v in col)  # the group fills positions first … last − 1
            last = first + col.count(col[r])
            kept = max(0, min(last, hi) - max(first, lo))
            totals[r] += kept / (last - first) / n
    return [t / d for t in totals]


@pytest.mark.parametrize(
    ("k", "d", "threads", "block", "dtype"),
    [
        (7, 40, 1, order_stats.SORT_BLOCK_ELEMENTS, torch.float32),  # one block, serial
        (10, 900, 2, 10 * 37, torch.float32),  # threaded, many blocks, ragged tail
        (8, 300, 1, 8 * 16, torch.float64),
        (9, 200, 1, 9 * 50, torch.float16),  # converted to float64 on the CPU
    ],
)
def test_weights_match_slow_per_column_reference(
    k: int, d: int, threads: int, block: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(order_stats, "SORT_BLOCK_ELEMENTS", block)
    monkeypatch.setattr(order_stats, "_PARALLEL_MIN_ELEMENTS", 1)
    gen = torch.Generator().manual_seed(k + d)
    u = torch.randint(-2, 3, (k, d), generator=gen).to(dtype)  # tiny range: ties everywhere
    u[:, 1::3] = torch.randn(k, len(range(1, d, 3)), generator=gen).to(dtype)
    u[:, 2] = 4.0  # a constant column
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tm = trimmed_mean_aggregate(u, trim_fraction=0.25)
        med = coordinate_median_aggregate(u)
    finally:
        torch.set_num_threads(prev)
    b = trim_count(k, 0.25)
    half = k // 2
    mid = (half, half + 1) if k % 2 else (half - 1, half + 1)
    assert tm.weights.tolist() == pytest.approx(_slow_weights(u, b, k - b), abs=1e-12)
    assert med.weights.tolist() == pytest.approx(_slow_weights(u, *mid), abs=1e-12)
    assert torch.equal(tm.delta, trimmed_mean(u, trim_fraction=0.25))
    assert torch.equal(med.delta, coordinate_median(u))


def test_krum_scores_match_float64_reference() -> None:
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(12, 700_000, generator=gen)  # > one block of columns
    scores = krum_scores(u, num_byzantine=2)
    u64 = u.double()
    d = torch.cdist(u64, u64) ** 2 + torch.diag(torch.full((12,), math.inf))
    ref = torch.sort(d, dim=1).values[:, : 12 - 2 - 2].sum(1)
    assert torch.allclose(scores, ref, rtol=1e-12)


# ----------------------------------------------------------------------------- exact Krum


def _slow_distances(u: torch.Tensor) -> torch.Tensor:
    """Σ_d (u_i − u_j)² in float64, one pair at a time (Flower's reference computes the same)."""
    k = u.shape[0]
    u64 = u.double()
    out = torch.zeros(k, k, dtype=torch.float64)
    for i in range(k):
        for j in range(k):
            out[i, j] = ((u64[i] - u64[j]) ** 2).sum()
    return out


def _slow_krum(u: torch.Tensor, f: int, m: int) -> tuple[torch.Tensor, list[int]]:
    """Scores and the m selected rows (lowest score, then lowest index) from the slow path."""
    k = u.shape[0]
    d = _slow_distances(u) + torch.diag(torch.full((k,), math.inf))
    scores = torch.sort(d, dim=1).values[:, : k - f - 2].sum(1)
    order = sorted(range(k), key=lambda i: (float(scores[i]), i))
    return scores, order[:m]


def test_krum_exact_when_updates_share_a_large_component() -> None:
    # Project issue 9 item 5: the float32 Gram matrix cancelled and chose row 0. float64:
    #   scores (2 nearest): row 0: 1e-4 + 9e-4, row 1: 1e-4 + 4e-4 (lowest), row 2: 4e-4 + 9e-4
    u = torch.tensor([[1000.00], [1000.01], [1000.03], [1000.06], [1001.0]])
    res = krum(u, num_byzantine=1)
    assert res.selected.tolist() == [1]
    assert torch.equal(res.aggregate, u[1])
    ref_scores, _ = _slow_krum(u, 1, 1)
    assert torch.allclose(res.scores, ref_scores, rtol=1e-12, atol=0.0)


def test_krum_is_translation_invariant() -> None:
    # Issue 9 item 5: +100 on every coordinate moved the float32-Gram choice from 7 to 6.
    u = torch.randn(10, 100_000, generator=torch.Generator().manual_seed(3))
    for shifted in (u, u + 100.0, u + 1e4):
        _, ref = _slow_krum(shifted, 2, 1)
        assert ref == [7]
        assert krum(shifted, num_byzantine=2).selected.tolist() == [7]


def _adversarial(name: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    if name == "offset":  # a common component 1e6 × the spread
        return 1e4 + 1e-2 * torch.randn(9, 300, generator=gen)
    if name == "near_tie":  # mirror images ±1, ±3 tie exactly; nudge one by 8 ulps of 1024
        u = torch.tensor([-3.0, -1.0, 1.0, 3.0, 20.0, -20.0])[:, None].repeat(1, 16)
        u[2, 5] += 2.0**-10
        return u + 1000.0
    if name == "outlier":  # one update 1e30 away: the others' distances must survive
        u = torch.randn(9, 300, generator=gen)
        u[4] = 1e30
        return u
    if name == "float32_max":  # squared differences ~1e77: fine in float64
        u = torch.randn(8, 50, generator=gen)
        u[0], u[1] = 3.0e38, -3.0e38
        return u
    if name == "tiny":  # squared differences ~1e-60
        return 1e-30 * torch.randn(8, 50, generator=gen)
    if name == "near_duplicates":  # a tight cluster (e.g. colluding clients) far away
        u = torch.randn(10, 300, generator=gen)
        u[:4] = 50.0 + 1e-5 * torch.randn(4, 300, generator=gen)
        u[5] = u[6]  # and an exact duplicate
        return u
    raise ValueError(name)


@pytest.mark.parametrize(
    "name", ["offset", "near_tie", "outlier", "float32_max", "tiny", "near_duplicates"]
)
def test_krum_matches_slow_float64_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distances, "GRAM_BLOCK_COLUMNS", 7)  # many blocks, a ragged last one
    u = _adversarial(name)
    k = u.shape[0]
    ref_d = _slow_distances(u)
    dist = pairwise_squared_distances(u)
    assert torch.equal(dist, dist.T) and bool((dist.diagonal() == 0).all())
    assert torch.equal(dist == 0, ref_d == 0)  # identical rows: exactly 0
    assert torch.allclose(dist, ref_d, rtol=1e-12, atol=0.0)
    f = (k - 3) // 2
    for m in (1, 2, k - f):
        ref_scores, ref_sel = _slow_krum(u, f, m)
        res = multi_krum(u, num_byzantine=f, num_selected=m)
        assert res.selected.tolist() == ref_sel
        assert torch.allclose(res.scores, ref_scores, rtol=1e-12, atol=0.0)


def test_krum_distances_do_not_depend_on_the_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 13-column blocks, 2 per span: 500 columns make 20 spans for the worker threads; the
    # spans' sums add in column order whatever the number of threads
    monkeypatch.setattr(distances, "GRAM_BLOCK_COLUMNS", 13)
    monkeypatch.setattr(distances, "_BLOCKS_PER_SPAN", 2)
    u = 1e3 + torch.randn(12, 500, generator=torch.Generator().manual_seed(9))
    u[3] = u[4]  # a duplicate: the difference-based refinement runs too
    prev = torch.get_num_threads()
    try:
        out = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            out.append(pairwise_squared_distances(u))
    finally:
        torch.set_num_threads(prev)
    assert torch.equal(out[0], out[1]) and torch.equal(out[0], out[2])
    assert torch.allclose(out[0], _slow_distances(u), rtol=1e-12, atol=0.0)
    assert float(out[0][3, 4]) == 0.0


def test_near_tie_is_resolved_as_float64_does() -> None:
    # K=6, f=1: 3 nearest. Rows 1 (−1) and 2 (+1) both score 16·(4 + 4 + 16) = 384; the
    # nudge δ = 2⁻¹⁰ of row 2 adds 8δ + 3δ² to its score and 4δ + δ² to row 1's: row 1 wins
    # by 4δ + 2δ² ≈ 3.9e-3, while the common offset 1000 puts ‖u_i‖² at 1.6e7.
    u = _adversarial("near_tie")
    ref_scores, ref_sel = _slow_krum(u, 1, 1)
    assert ref_sel == [1] and 0 < float(ref_scores[2] - ref_scores[1]) < 1e-2
    assert krum(u, num_byzantine=1).selected.tolist() == [1]


# ----------------------------------------------------------------------------- properties

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)
matrices = arrays(np.float32, st.tuples(st.integers(1, 9), st.integers(1, 6)), elements=finite)


def _within_bounds(out: torch.Tensor, u: torch.Tensor) -> bool:
    tol = 1e-3 + 1e-5 * float(u.abs().max())
    return bool((out >= u.min(0).values - tol).all() and (out <= u.max(0).values + tol).all())


@settings(deadline=None)
@given(matrices, st.floats(0.0, 0.49), st.data())
def test_trimmed_mean_and_median_properties(
    arr: np.ndarray, beta: float, data: st.DataObject
) -> None:
    u = torch.from_numpy(arr)
    k = u.shape[0]
    perm = torch.tensor(data.draw(st.permutations(list(range(k)))), dtype=torch.long)
    tm, med = trimmed_mean(u, trim_fraction=beta), coordinate_median(u)
    # sorting makes both bit-identical under a row permutation (b = 0 is mean(0): rounding)
    tm_p = trimmed_mean(u[perm], trim_fraction=beta)
    assert torch.equal(tm_p, tm) if trim_count(k, beta) else torch.allclose(tm_p, tm, atol=1e-3)
    assert torch.equal(coordinate_median(u[perm]), med)
    assert _within_bounds(tm, u) and _within_bounds(med, u)
    # nothing trimmed (β·K < 1): the plain mean, exactly
    small = min(0.99 / k, 0.49)
    assert torch.equal(trimmed_mean(u, trim_fraction=small), u.mean(0))
    assert torch.equal(trimmed_mean(u, trim_fraction=0.0), u.mean(0))
    # effective weights: non-negative, sum 1, permutation-equivariant (tied rows share
    # equally, so no tie order leaks in)
    pairs = [
        (
            trimmed_mean_aggregate(u, trim_fraction=beta),
            trimmed_mean_aggregate(u[perm], trim_fraction=beta),
        ),
        (coordinate_median_aggregate(u), coordinate_median_aggregate(u[perm])),
    ]
    for agg, agg_p in pairs:
        assert agg.weights.dtype == torch.float64 and bool((agg.weights >= 0).all())
        assert float(agg.weights.sum()) == pytest.approx(1.0, abs=1e-12)
        assert torch.allclose(agg_p.weights, agg.weights[perm], rtol=0, atol=1e-12)
    # with D = 1 they are the coordinate's own weights, which reproduce the aggregate
    col = u[:, :1]
    for agg in (trimmed_mean_aggregate(col, trim_fraction=beta), coordinate_median_aggregate(col)):
        recombined = float(agg.weights @ col[:, 0].double())
        assert recombined == pytest.approx(float(agg.delta[0]), rel=1e-6, abs=1e-3)
    # median of K copies of one row is that row
    assert torch.equal(coordinate_median(u[:1].expand(k, -1)), u[0])
    same = trimmed_mean(u[:1].repeat(k, 1), trim_fraction=beta)
    if trim_count(k, beta) > 0:  # float64 sum of equal values: exact
        assert torch.equal(same, u[0])
    else:  # updates.mean(0) in float32
        assert torch.allclose(same, u[0], rtol=1e-6, atol=1e-30)


@settings(deadline=None)
@given(
    arrays(np.float32, st.tuples(st.integers(4, 9), st.integers(1, 6)), elements=finite),
    st.data(),
)
def test_krum_properties(arr: np.ndarray, data: st.DataObject) -> None:
    u = torch.from_numpy(arr)
    k = u.shape[0]
    f = data.draw(st.integers(0, (k - 3) // 2))  # K > 2f + 2
    m = data.draw(st.integers(1, k - f))
    perm = torch.tensor(data.draw(st.permutations(list(range(k)))), dtype=torch.long)
    res = multi_krum(u, num_byzantine=f, num_selected=m)
    assert _within_bounds(res.aggregate, u)
    assert res.selected.shape == (m,) and len(set(res.selected.tolist())) == m
    # scores are permutation-equivariant (exact distances: float64 rounding only) …
    res_p = multi_krum(u[perm], num_byzantine=f, num_selected=m)
    assert torch.allclose(res_p.scores, res.scores[perm], rtol=1e-12, atol=1e-300)
    # … so the aggregate is permutation-invariant unless a tie sits at the m-th place
    srt = torch.sort(res.scores).values
    assume(m == k or float(srt[m] - srt[m - 1]) > 1e-9 * float(srt[m]))
    assert torch.allclose(res_p.aggregate, res.aggregate, atol=1e-3)
    # the selected rows are the m lowest scores
    assert float(res.scores[res.selected].max()) <= float(srt[m - 1])


int_matrices = arrays(
    np.float32,
    st.tuples(st.integers(4, 10), st.integers(1, 8)),
    elements=st.integers(-20, 20).map(float),
)


@settings(deadline=None)
@given(int_matrices, st.integers(1_000, 10_000), st.data())
def test_krum_selection_invariant_to_a_common_offset(
    arr: np.ndarray, offset: int, data: st.DataObject
) -> None:
    # Integer-valued rows: adding an integer offset ≤ 1e4 is exact in float32, so the
    # distances are the same real numbers and must come out bit-identical (ties included).
    u = torch.from_numpy(arr)
    k = u.shape[0]
    f = data.draw(st.integers(0, (k - 3) // 2))
    m = data.draw(st.integers(1, k - f))
    res = multi_krum(u, num_byzantine=f, num_selected=m)
    for shifted in (u + offset, u - offset):
        res_s = multi_krum(shifted, num_byzantine=f, num_selected=m)
        assert torch.equal(res_s.scores, res.scores)
        assert torch.equal(res_s.selected, res.selected)
        # the mean of the m selected rows (float32) moves with them, up to rounding
        assert torch.allclose(res_s.aggregate, res.aggregate + (shifted[0] - u[0]), atol=5e-3)
    # integer data: the scores are exact integers
    _, ref_sel = _slow_krum(u, f, m)
    assert res.selected.tolist() == ref_sel
