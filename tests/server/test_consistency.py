"""Consistency weighting of 000 Eq. 9–16: label distributions, JS divergence, S_k, α_k."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from geofl.errors import AggregationError, ConfigError
from geofl.server.aggregators import AGGREGATORS
from geofl.server.consistency import (
    consistency_scores,
    consistency_weights,
    global_distribution,
    histograms_from_metas,
    js_divergence,
    label_distributions,
)
from geofl.server.tier import FlatTier
from geofl.server.weighting import WEIGHTINGS
from geofl.update import UpdateMeta

LN_4_3 = math.log(4.0 / 3.0)  # 0.28768207245178085


def _meta(k: int, hist: list[float] | None, n: int = 10) -> UpdateMeta:
    h = None if hist is None else np.array(hist)
    return UpdateMeta(client_id=k, num_samples=n, round=1, label_histogram=h)


# ----------------------------------------------------------------------------- by hand


def test_js_by_hand() -> None:
    # p = [1, 0] (from counts [1, 0]), q = [½, ½] (from [1, 1]), m = ½(p + q) = [¾, ¼]
    # KL(p‖m) = 1·ln(1/¾) + 0 = ln(4/3)
    # KL(q‖m) = ½ ln(½/¾) + ½ ln(½/¼) = ½ ln(2/3) + ½ ln 2 = ½ ln(4/3)
    # JS = ½ ln(4/3) + ¼ ln(4/3) = ¾ ln(4/3) ≈ 0.2157615543
    p = label_distributions(torch.tensor([[1.0, 0.0]]), eps=0.0)
    q = label_distributions(torch.tensor([[1.0, 1.0]]), eps=0.0)[0]
    assert js_divergence(p, q).tolist() == pytest.approx([0.75 * LN_4_3], abs=1e-15)
    # symmetric, and ε = 1e-12 moves it by ~1e-11 only
    assert js_divergence(q[None], p[0]).tolist() == pytest.approx([0.75 * LN_4_3], abs=1e-15)
    p_eps = label_distributions(torch.tensor([[1.0, 0.0]]))
    assert float(js_divergence(p_eps, q)[0]) == pytest.approx(0.75 * LN_4_3, abs=1e-9)
    # disjoint supports: the maximum, ln 2
    far = js_divergence(torch.tensor([[1.0, 0.0]]), torch.tensor([0.0, 1.0]))
    assert float(far[0]) == pytest.approx(math.log(2.0), abs=1e-15)


def test_label_distribution_smoothing_by_hand() -> None:
    # counts [3, 1, 0], ε = 0.1, C = 3: (h/Σh + ε)/(1 + Cε) = ([¾, ¼, 0] + 0.1) / 1.3
    p = label_distributions(torch.tensor([[3, 1, 0]]), eps=0.1)
    assert p.dtype == torch.float64
    assert p[0].tolist() == pytest.approx([0.85 / 1.3, 0.35 / 1.3, 0.1 / 1.3], abs=1e-15)
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-15)


def test_global_distribution_pools_counts() -> None:
    # Σ_k h_k = [2, 0] + [1, 3] = [3, 3] → [½, ½] (Eq. 12); the mean of the p_k would be
    # ([1, 0] + [¼, ¾]) / 2 = [⅝, ⅜]: the pooled histogram weights clients by their counts.
    g = global_distribution(torch.tensor([[2.0, 0.0], [1.0, 3.0]]), eps=0.0)
    assert g.tolist() == [0.5, 0.5]


def test_three_client_scores_and_weights_by_hand() -> None:
    # h = [2, 0], [0, 2], [1, 1] → p_global = [3, 3]/6 = [½, ½]
    # JS_1 = JS_2 = ¾ ln(4/3) (test_js_by_hand), JS_3 = 0
    # S = exp(−5·¾·ln(4/3)) = (4/3)^(−15/4) = 0.75^3.75 ≈ 0.3400006425; S_3 = 1
    # α = S / ΣS = [s, s, 1] / (2s + 1) = [s, s, 1] / 1.680001285
    #   ≈ [0.2023812, 0.2023812, 0.5952376]
    h = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    s = 0.75**3.75
    assert consistency_scores(h, beta=5.0).tolist() == pytest.approx([s, s, 1.0], abs=1e-10)
    alpha = consistency_weights(h, beta=5.0)
    assert alpha.dtype == torch.float64
    want = [s / (2 * s + 1), s / (2 * s + 1), 1 / (2 * s + 1)]
    assert alpha.tolist() == pytest.approx(want, abs=1e-10)
    assert want == pytest.approx([0.2023812, 0.2023812, 0.5952376], abs=1e-7)
    # with n = [10, 10, 5]: α ∝ [10s, 10s, 5] → [10s, 10s, 5] / (20s + 5)
    n = torch.tensor([10.0, 10.0, 5.0])
    a_n = consistency_weights(h, beta=5.0, num_samples=n)
    z = 20 * s + 5
    assert a_n.tolist() == pytest.approx([10 * s / z, 10 * s / z, 5 / z], abs=1e-10)


def test_huge_beta_does_not_divide_zero_by_zero() -> None:
    # S_1 = S_2 = exp(−1e6·0.2158) underflows to 0; α is still [0, 0, 1]
    h = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    assert consistency_scores(h, beta=1e6).tolist()[:2] == [0.0, 0.0]
    assert consistency_weights(h, beta=1e6).tolist() == [0.0, 0.0, 1.0]


# ----------------------------------------------------------------------------- registry


def test_registered_weighting_and_flat_tier() -> None:
    metas = [_meta(0, [2, 0], n=10), _meta(1, [0, 2], n=10), _meta(2, [1, 1], n=5)]
    s = 0.75**3.75
    w = WEIGHTINGS.build("consistency")(metas, 1)  # β = 5 by default
    assert w.tolist() == pytest.approx([s / (2 * s + 1), s / (2 * s + 1), 1 / (2 * s + 1)])
    w_n = WEIGHTINGS.build("consistency", {"times_data_size": True})(metas, 1)
    assert w_n.tolist() == pytest.approx(
        [10 * s / (20 * s + 5), 10 * s / (20 * s + 5), 5 / (20 * s + 5)]
    )
    # the full server step of Alg. 2: Σ α_k Δw_k
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0], [4.0, 4.0]])
    res = FlatTier(WEIGHTINGS.build("consistency"), AGGREGATORS.build("mean"))(u, metas, 1)
    want = (w[:, None] * u.double()).sum(0)
    assert res.delta.double().tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert res.weights.tolist() == pytest.approx(w.tolist())


def test_registered_params_are_validated() -> None:
    for bad in ({"beta": 0.0}, {"beta": -1.0}, {"beta": float("inf")}, {"eps": -1e-3}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            WEIGHTINGS.validate("consistency", bad)
    with pytest.raises(ConfigError, match="unknown field"):
        WEIGHTINGS.validate("consistency", {"gamma": 1.0})


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("beta", [0.0, -1.0, math.nan, math.inf])
def test_bad_beta(beta: float) -> None:
    h = torch.tensor([[1.0, 1.0]])
    with pytest.raises(ValueError, match="beta must be finite and > 0"):
        consistency_scores(h, beta=beta)
    with pytest.raises(ValueError, match="beta must be finite and > 0"):
        consistency_weights(h, beta=beta)


def test_bad_histograms() -> None:
    with pytest.raises(AggregationError, match="row 1 is all zeros"):
        consistency_scores(torch.tensor([[1.0, 2.0], [0.0, 0.0]]), beta=5.0)
    with pytest.raises(AggregationError, match="row 0 has negative counts"):
        label_distributions(torch.tensor([[1.0, -2.0], [1.0, 0.0]]))
    with pytest.raises(AggregationError, match="row 0 has non-finite counts"):
        global_distribution(torch.tensor([[math.nan, 1.0]]))
    for shape in ((0, 3), (2, 0), (3,), (1, 2, 2)):
        with pytest.raises(ValueError, match=r"expected label histograms \[K, C\]"):
            consistency_weights(torch.ones(shape), beta=5.0)
    with pytest.raises(ValueError, match="eps must be finite and ≥ 0"):
        label_distributions(torch.ones(1, 2), eps=-1.0)
    with pytest.raises(ValueError, match=r"expected p \[K, C\] and q \[C\]"):
        js_divergence(torch.ones(2, 3) / 3, torch.ones(2) / 2)
    with pytest.raises(ValueError, match=r"expected num_samples \[K\]"):
        consistency_weights(torch.ones(2, 2), beta=1.0, num_samples=torch.ones(3))
    with pytest.raises(AggregationError, match="num_samples must be positive"):
        consistency_weights(torch.ones(2, 2), beta=1.0, num_samples=torch.tensor([1.0, 0.0]))


def test_bad_metas() -> None:
    weighting = WEIGHTINGS.build("consistency")
    with pytest.raises(AggregationError, match=r"client 7 sent no label_histogram.*must share"):
        weighting([_meta(3, [1, 2]), _meta(7, None)], 1)
    with pytest.raises(AggregationError, match="client 4 label_histogram is all zeros"):
        weighting([_meta(3, [1, 2]), _meta(4, [0, 0])], 1)
    with pytest.raises(AggregationError, match="client 4 label_histogram has 3 classes"):
        weighting([_meta(3, [1, 2]), _meta(4, [0, 1, 1])], 1)
    with pytest.raises(AggregationError, match="client 3 label_histogram has negative"):
        weighting([_meta(3, [1, -2])], 1)
    with pytest.raises(AggregationError, match="K = 0"):
        histograms_from_metas([])


# ----------------------------------------------------------------------------- properties

counts = arrays(
    np.int64,
    st.tuples(st.integers(1, 6), st.integers(1, 5)),
    elements=st.integers(0, 50),
).filter(lambda h: bool((h.sum(axis=1) > 0).all()))


@settings(deadline=None)
@given(counts, st.floats(0.1, 20.0), st.integers(2, 9), st.data())
def test_consistency_properties(
    hist: np.ndarray, beta: float, scale: int, data: st.DataObject
) -> None:
    h = torch.from_numpy(hist)
    k = h.shape[0]
    p, g = label_distributions(h), global_distribution(h)
    js = js_divergence(p, g)
    assert bool(((js >= 0) & (js <= math.log(2.0))).all())
    assert torch.allclose(p.sum(1), torch.ones(k, dtype=torch.float64))
    s = consistency_scores(h, beta=beta)
    assert bool(((s > 0) & (s <= 1)).all())
    a = consistency_weights(h, beta=beta)
    assert float(a.sum()) == pytest.approx(1.0) and bool((a > 0).all())
    assert torch.allclose(a, s / s.sum())
    # only the class proportions matter: scaling every histogram changes nothing
    assert torch.allclose(consistency_weights(h * scale, beta=beta), a)
    # permutation-equivariant
    perm = torch.tensor(data.draw(st.permutations(list(range(k)))), dtype=torch.long)
    assert torch.allclose(consistency_weights(h[perm], beta=beta), a[perm])
    # a smaller divergence never gets a smaller weight
    order = torch.argsort(js)
    assert bool((a[order][1:] <= a[order][:-1] + 1e-12).all())
    # identical histograms: JS = 0, S = 1, uniform weights
    same = h[:1].repeat(k, 1)
    assert consistency_scores(same, beta=beta).tolist() == [1.0] * k
