"""Compiled column kernels (:mod:`geofl.server.kernels`) through :mod:`geofl.server.columns`,
with the size threshold lowered and blocks, worker ranges and chunks made small: float64
references on adversarial rows, the documented operation order to the bit, equal bits for
equal rows, no dependence on the thread count, rows with zero coefficients not read, and
the strategies that use them. The epilogue's coverage is tested for both paths in
``test_columns.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
import torch

from geofl.server import columns
from geofl.server.aggregators import weighted_mean

T = TypeVar("T")


@pytest.fixture
def fused_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columns, "FUSED_MIN_BYTES", 0)
    monkeypatch.setattr(columns, "FUSED_COLUMNS", 256)
    monkeypatch.setattr(columns, "MIN_COLUMNS_PER_WORKER", 700)
    monkeypatch.setattr(columns, "EPILOGUE_COLUMNS", 600)


def _threads(n: int, fn: Callable[[], T]) -> T:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def _adversarial(k: int, d: int, seed: int) -> torch.Tensor:
    """Rows with a large common offset, tiny and huge scales, a zero row and ties."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(k, d, generator=gen)
    x[0] += 1e4  # large common offset
    x[1] *= 1e-20
    x[2] *= 1e15
    x[3] = 0.0
    x[4] = x[0]  # ties, in another lane of the same group of eight …
    x[k - 1] = x[0]  # … and in the last group, which repeats row K−1
    return x


def test_fused_only_for_large_contiguous_float32_cpu_stacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = torch.zeros(4, 1000)
    monkeypatch.setattr(columns, "FUSED_MIN_BYTES", 16_000)
    assert columns.fused(x)
    assert not columns.fused(x[:, :999])  # 15,984 bytes
    assert not columns.fused(x.T.contiguous().T)  # rows not contiguous
    assert not columns.fused(x.double())
    monkeypatch.setattr(columns, "FUSED_MIN_BYTES", 1 << 26)
    assert not columns.fused(x)


@pytest.mark.usefixtures("fused_small")
def test_fused_dots_and_norms_match_float64_on_adversarial_rows() -> None:
    x = _adversarial(13, 5003, seed=1)
    ref = torch.randn(5003, generator=torch.Generator().manual_seed(2)) + 3.0
    dots, sq, ref_sq = columns.dots_and_norms(x, ref)
    x64, r64 = x.double(), ref.double()
    assert ref_sq == pytest.approx(float(r64 @ r64), rel=1e-6)
    exact_sq = x64.square().sum(1)
    bound = (x64.abs() @ r64.abs()) * 1e-6  # float32 sums of |x_c r_c|
    assert dots.dtype == sq.dtype == torch.float64
    assert bool(((dots - x64 @ r64).abs() <= bound).all())
    assert torch.allclose(sq, exact_sq, rtol=1e-6, atol=0.0)
    assert float(sq[3]) == 0.0 and float(dots[3]) == 0.0
    # equal rows give equal bits wherever they stand
    assert float(dots[0]) == float(dots[4]) == float(dots[12])
    assert float(sq[0]) == float(sq[4]) == float(sq[12])


@pytest.mark.usefixtures("fused_small")
def test_fused_results_do_not_depend_on_the_thread_count() -> None:
    x = _adversarial(11, 70_001, seed=3)
    ref = torch.randn(70_001, generator=torch.Generator().manual_seed(4))
    coeffs = torch.rand(2, 11, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    one = _threads(
        1, lambda: (columns.dots_and_norms(x, ref), columns.linear_combinations(coeffs, x))
    )
    two = _threads(
        2, lambda: (columns.dots_and_norms(x, ref), columns.linear_combinations(coeffs, x))
    )
    assert torch.equal(one[0][0], two[0][0]) and torch.equal(one[0][1], two[0][1])
    assert all(torch.equal(a, b) for a, b in zip(one[1], two[1], strict=True))


def _documented_order(coeffs: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The kernels' operation order in float32 numpy: groups of eight of the rows with a
    nonzero coefficient, o + ((((c₀x₀ + c₁x₁) + …) + c₇x₇), then one row at a time."""
    rows = np.flatnonzero((coeffs != 0).any(axis=0))
    out = np.zeros((coeffs.shape[0], x.shape[1]), dtype=np.float32)
    n8 = rows.size // 8 * 8
    for i in range(coeffs.shape[0]):
        for g in range(0, n8, 8):
            group = rows[g : g + 8]
            acc = coeffs[i, group[0]] * x[group[0]]
            for j in group[1:]:
                acc = acc + coeffs[i, j] * x[j]
            out[i] = out[i] + acc
        for j in rows[n8:]:
            out[i] = out[i] + coeffs[i, j] * x[j]
    return out


@pytest.mark.parametrize("m", [1, 2, 3])
@pytest.mark.usefixtures("fused_small")
def test_fused_combinations_follow_the_documented_order_to_the_bit(m: int) -> None:
    gen = torch.Generator().manual_seed(6)
    x = _adversarial(21, 3001, seed=7)
    x[9, 5] = float("nan")  # row 9 has zero coefficients: not read, so no NaN out
    coeffs = torch.rand(m, 21, generator=gen, dtype=torch.float64)
    coeffs[:, 9] = 0.0
    rows = columns.linear_combinations(coeffs, x)
    expected = _documented_order(coeffs.float().numpy(), x.numpy())
    got = np.stack([r.numpy() for r in rows])
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got, expected)
    exact = coeffs @ torch.nan_to_num(x.double())
    assert torch.allclose(torch.from_numpy(got).double(), exact, rtol=1e-5, atol=1e-2)


@pytest.mark.usefixtures("fused_small")
def test_fused_weighted_mean_and_nan_rows() -> None:
    x = torch.randn(10, 2000, generator=torch.Generator().manual_seed(10)) + 50.0
    w = torch.arange(1, 11, dtype=torch.float32)
    expected = (w.double() / w.double().sum()) @ x.double()
    assert torch.allclose(weighted_mean(x, w).double(), expected, rtol=1e-6)
    x[2, 7] = float("nan")
    assert bool(weighted_mean(x, w)[7].isnan()) and not bool(weighted_mean(x, w)[8].isnan())
    dots, sq, _ = columns.dots_and_norms(x, torch.ones(2000))
    assert bool(dots[2].isnan() and sq[2].isnan())
    assert not bool(dots[[0, 1, 3]].isnan().any() or sq[[0, 1, 3]].isnan().any())


def test_dual_shield_round_agrees_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    from geofl.algorithms.dual_shield import DualShieldParams, DualShieldStrategy
    from geofl.server.aggregators import build_mean
    from geofl.server.strategy import UpdateBatch
    from geofl.server.tier import FlatTier
    from geofl.server.weighting import uniform_weights
    from geofl.update import UpdateMeta

    gen = torch.Generator().manual_seed(11)
    k, d = 20, 4000
    common = torch.randn(d, generator=gen)
    rounds = [common + 0.5 * torch.randn(k, d, generator=gen) for _ in range(3)]
    for u in rounds:
        u[:3] *= -5.0  # three sign-flipped, scaled attackers
    metas = [UpdateMeta(client_id=i, num_samples=10, round=1) for i in range(k)]

    def run() -> list[tuple[torch.Tensor, torch.Tensor]]:
        tier = FlatTier(uniform_weights, build_mean(None), ())  # type: ignore[arg-type]
        strategy = DualShieldStrategy(tier, 1.0, DualShieldParams(), k)
        params, out = torch.zeros(d), []
        for t, u in enumerate(rounds, start=1):
            res = strategy.aggregate(t, params, UpdateBatch(u, metas, num_clients=k))
            params = res.params
            out.append((res.kept, res.params))
        return out

    torch_path = run()
    monkeypatch.setattr(columns, "FUSED_MIN_BYTES", 0)
    monkeypatch.setattr(columns, "FUSED_COLUMNS", 256)
    fused_path = run()
    for (kept_a, params_a), (kept_b, params_b) in zip(torch_path, fused_path, strict=True):
        assert torch.equal(kept_a, kept_b) and not bool(kept_a[:3].any())
        # float32 rounding of sums over 17 survivors, parameters up to ≈ 11
        assert torch.allclose(params_a, params_b, rtol=1e-6, atol=1e-5)
