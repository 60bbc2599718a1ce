"""003 RobustAvg (§2.2.5 Eq. 1–3): by hand, against trimmed_mean, a slow reference, properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from geofl.errors import ConfigError
from geofl.server.aggregators import AGGREGATORS
from geofl.server.robust import robust_avg, robustavg, trim_count, trimmed_mean

# ----------------------------------------------------------------------------- by hand


def test_clipping_by_hand() -> None:
    # ‖(3, 4)‖ = 5 > C = 1 → (0.6, 0.8); (0.3, 0.4) has norm 0.5 < C and stays (Eq. 2, ε = 0).
    d = torch.tensor([[3.0, 4.0], [0.3, 0.4]], dtype=torch.float64)
    w = torch.tensor([1.0, 1.0], dtype=torch.float64)
    out = robust_avg(d, w, clip=1.0, trim_fraction=0.0, eps=0.0)
    assert torch.allclose(out.delta, torch.tensor([0.45, 0.6], dtype=torch.float64))
    single = robust_avg(d[:1], w[:1], clip=1.0, trim_fraction=0.1, eps=0.0)  # K = 1
    assert torch.allclose(single.delta, torch.tensor([0.6, 0.8], dtype=torch.float64))
    assert single.weights.tolist() == [1.0]


def test_weighted_trimmed_mean_by_hand() -> None:
    # K = 4, β = 0.25 → b = 1 at each end; α = (1, 2, 3, 4)/10; C large: no clipping.
    # column 1: 1 2 3 4 → keep 2, 3 (rows 1, 2): (2·2 + 3·3)/(2 + 3) = 13/5 = 2.6
    # column 0: 1 1 1 5 → the tie group {rows 0, 1, 2} fills sorted positions 0–2, of which
    # 1–2 are kept: each of them keeps 2/3 of its weight: value 1 whatever the split.
    d = torch.tensor([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0], [5.0, 4.0]], dtype=torch.float64)
    out = robust_avg(d, torch.tensor([1.0, 2.0, 3.0, 4.0]), clip=1e9, trim_fraction=0.25)
    assert torch.allclose(out.delta, torch.tensor([1.0, 2.6], dtype=torch.float64))
    # shares: column 0 (1, 2, 3, 0)·(2/3)/4 = (1/6, 1/3, 1/2, 0); column 1 (0, .4, .6, 0)
    expected = torch.tensor([1 / 12, (1 / 3 + 0.4) / 2, (0.5 + 0.6) / 2, 0.0], dtype=torch.float64)
    assert torch.allclose(out.weights, expected)


def test_weights_move_the_kept_mean_and_zero_weight_coordinates_stay() -> None:
    # K = 10, β = 0.1: b = 1; column 0 = 0..9, keep 1..8. Weight only on row 8 → 8.
    d = torch.arange(10, dtype=torch.float64)[:, None]
    w = torch.zeros(10, dtype=torch.float64)
    w[8] = 1.0
    assert robust_avg(d, w, clip=1e9).delta.item() == 8.0
    # all weight on the row trimmed at the top: the kept rows carry no weight → 0 (no move)
    w = torch.zeros(10, dtype=torch.float64)
    w[9] = 1.0
    out = robust_avg(d, w, clip=1e9)
    assert out.delta.item() == 0.0
    assert out.weights.tolist() == w.tolist()  # no coordinate with kept weight: the weights


def test_returns_the_input_dtype_and_leaves_inputs_alone() -> None:
    d = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    w = torch.rand(6, generator=torch.Generator().manual_seed(1))
    d0, w0 = d.clone(), w.clone()
    out = robust_avg(d, w, clip=0.5, trim_fraction=0.2)
    assert out.delta.dtype == torch.float32 and out.weights.dtype == torch.float64
    assert torch.equal(d, d0) and torch.equal(w, w0)


# ----------------------------------------------------------------------------- vs paper 000


@pytest.mark.parametrize("k", [1, 3, 5, 10, 21])
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.2, 0.45])
def test_equals_trimmed_mean_with_large_clip_and_uniform_weights(k: int, beta: float) -> None:
    if k - 2 * math.floor(beta * k + 1e-9) < 1:
        pytest.skip("β trims every value")
    g = torch.Generator().manual_seed(k)
    d = torch.randn(k, 40, generator=g, dtype=torch.float64) * 3.0
    d[:, :5] = torch.round(d[:, :5])  # ties
    out = robust_avg(d, torch.ones(k), clip=1e12, trim_fraction=beta)
    ref = trimmed_mean(d, trim_fraction=beta)
    assert torch.allclose(out.delta, ref, rtol=1e-13, atol=1e-13)
    d32 = d.to(torch.float32)
    out32 = robust_avg(d32, torch.ones(k), clip=1e12, trim_fraction=beta).delta
    assert torch.allclose(out32, trimmed_mean(d32, trim_fraction=beta), rtol=1e-6, atol=1e-6)


def test_chunked_columns_match_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(3)
    d = torch.randn(9, 101, generator=g, dtype=torch.float64)
    w = torch.rand(9, generator=g, dtype=torch.float64)
    whole = robust_avg(d, w, clip=2.0, trim_fraction=0.2)
    monkeypatch.setattr(robustavg, "ROBUST_AVG_CHUNK_ELEMENTS", 9 * 7)  # 7 columns a chunk
    chunked = robust_avg(d, w, clip=2.0, trim_fraction=0.2)
    # same values up to the summation order of the column reductions
    assert torch.allclose(whole.delta, chunked.delta, rtol=1e-14, atol=1e-16)
    assert torch.allclose(whole.weights, chunked.weights, rtol=1e-14, atol=0)
    # chunks on worker threads: the same numbers as the chunks in one thread
    monkeypatch.setattr(robustavg, "_PARALLEL_MIN_ELEMENTS", 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threaded = robust_avg(d, w, clip=2.0, trim_fraction=0.2)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(threaded.delta, chunked.delta)
    assert torch.equal(threaded.weights, chunked.weights)


# ----------------------------------------------------------------------------- slow reference


def _reference(d: np.ndarray, w: np.ndarray, clip: float, beta: float, eps: float) -> np.ndarray:
    """Eq. 1–3 one coordinate and one row at a time (tie groups share kept positions)."""
    k, dim = d.shape
    alpha = [wi / math.fsum(w) for wi in w]
    rows = []
    for row in d:
        norm = math.hypot(*row) if dim else 0.0
        rows.append([v * min(1.0, clip / (norm + eps)) for v in row])
    b = trim_count(k, beta)
    out = np.zeros(dim)
    for j in range(dim):
        col = [rows[i][j] for i in range(k)]
        order = sorted(col)
        num, den = [], []
        for i in range(k):
            first = order.index(col[i])  # tie group of col[i] fills [first, first + size)
            size = order.count(col[i])
            kept = max(0, min(first + size, k - b) - max(first, b))
            share = alpha[i] * kept / size
            num.append(share * (col[i] - order[b]))
            den.append(share)
        total = math.fsum(den)
        out[j] = order[b] + math.fsum(num) / total if total > 0 else 0.0
    return out


ADVERSARIAL = {
    "ties": np.round(np.random.default_rng(0).normal(size=(12, 9)) * 2) / 2,
    "offset_1e6": 1e6 + np.random.default_rng(1).normal(size=(10, 6)),
    "extremes": np.array(
        [[1e300, -1e300, 0.0], [1e-300, 5.0, -5.0], [3.0, 1e-308, 2.0], [-1e299, 7.0, 1.0]]
    ),
    "single": np.array([[2.0, -1.0, 0.5]]),
    "small_k_no_trim": np.array([[1.0, 9.0], [2.0, -4.0], [100.0, 0.0]]),
    "all_equal": np.full((7, 4), 0.3),
    "one_outlier": np.vstack([np.zeros((9, 3)), [[50.0, -50.0, 50.0]]]),
}


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
@pytest.mark.parametrize(("clip", "beta"), [(1e12, 0.1), (1.0, 0.1), (0.3, 0.3)])
def test_matches_slow_reference_on_adversarial_inputs(case: str, clip: float, beta: float) -> None:
    d = ADVERSARIAL[case]
    k = d.shape[0]
    if k - 2 * math.floor(beta * k + 1e-9) < 1:
        pytest.skip("β trims every value")
    w = np.random.default_rng(k).uniform(0.1, 2.0, k)
    out = robust_avg(torch.from_numpy(d), torch.from_numpy(w), clip=clip, trim_fraction=beta)
    ref = _reference(d, w, clip, beta, 1e-12)
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.allclose(out.delta.numpy(), ref, rtol=1e-12, atol=1e-12 * scale), (out.delta, ref)


# ----------------------------------------------------------------------------- properties

_values = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64)
_cases = st.integers(1, 12).flatmap(
    lambda k: st.tuples(
        arrays(np.float64, (k, 4), elements=_values),
        arrays(np.float64, (k,), elements=st.floats(0.01, 10.0)),
        st.permutations(list(range(k))),
    )
)


@settings(deadline=None)
@given(case=_cases, clip=st.floats(0.1, 1e4), beta=st.sampled_from([0.0, 0.1, 0.2, 0.3]))
def test_properties(
    case: tuple[np.ndarray, np.ndarray, list[int]], clip: float, beta: float
) -> None:
    d, w, perm = case
    k = d.shape[0]
    if k - 2 * math.floor(beta * k + 1e-9) < 1:
        return
    out = robust_avg(torch.from_numpy(d), torch.from_numpy(w), clip=clip, trim_fraction=beta)
    # effective weights: non-negative, sum 1
    assert bool((out.weights >= 0).all()) and math.isclose(out.weights.sum().item(), 1.0)
    # within the coordinate-wise range of the clipped deltas
    norms = np.linalg.norm(d, axis=1)
    clipped = d * np.minimum(1.0, clip / (norms + 1e-12))[:, None]
    lo, hi = clipped.min(axis=0), clipped.max(axis=0)
    tol = 1e-12 * np.maximum(1.0, np.abs(clipped).max(axis=0))
    assert (out.delta.numpy() >= lo - tol).all() and (out.delta.numpy() <= hi + tol).all()
    # permutation invariance (rows and weights together), ties included
    p = torch.tensor(perm)
    moved = robust_avg(
        torch.from_numpy(d)[p], torch.from_numpy(w)[p], clip=clip, trim_fraction=beta
    )
    assert torch.allclose(moved.delta, out.delta, rtol=1e-12, atol=1e-12)
    assert torch.allclose(moved.weights, out.weights[p], rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- registry, errors


def test_registered_aggregator_uses_the_weights() -> None:
    agg = AGGREGATORS.build("robust_avg", {"clip": 100.0, "trim_fraction": 0.0})
    d = torch.tensor([[0.0], [10.0]])
    out = agg(d, torch.tensor([0.75, 0.25], dtype=torch.float64))
    assert out.delta.item() == pytest.approx(2.5)
    assert out.weights.tolist() == [0.75, 0.25]
    with pytest.raises(ConfigError, match="clip"):
        AGGREGATORS.build("robust_avg", {"clip": 0.0})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"clip": 0.0}, "clip"),
        ({"clip": math.inf}, "clip"),
        ({"eps": -1.0}, "eps"),
        ({"trim_fraction": 0.5}, "trim_fraction"),
        ({"weights": torch.tensor([1.0, -1.0, 1.0])}, "non-negative"),
        ({"weights": torch.zeros(3)}, "positive sum"),
        ({"weights": torch.ones(2)}, r"\[3\]"),
    ],
)
def test_bad_input_is_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"weights": torch.ones(3), **kwargs}
    weights = args.pop("weights")
    assert isinstance(weights, torch.Tensor)
    with pytest.raises(ValueError, match=match):
        robust_avg(torch.ones(3, 2), weights, **args)  # type: ignore[arg-type]
