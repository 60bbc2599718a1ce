"""Vectorised RDP of the Poisson-subsampled Gaussian (Mironov et al. 2019 §3.3) against
dp_accounting's per-order loops, closed forms and a hand-computed value."""

from __future__ import annotations

import itertools
import logging
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from geofl.plugins import ACCOUNTANTS, load_all
from geofl.privacy.accounting import TF_PRIVACY_ORDERS, dp_event_from_spec
from geofl.privacy.rdp_sampled_gaussian import (
    _add_terms,
    _fold,
    _stop_index,
    rdp_poisson_gaussian,
)

load_all()

QS = (1e-6, 1e-3, 0.0625, 0.1, 0.5, 0.99, 1.0)
SIGMAS = (0.3, 0.5, 0.8, 1.0, 2.0, 10.0, 100.0)
EXTRA = (1.05, 1.5, 2.5, 200.0)
BASES = {
    "dp_accounting": tuple(rdp_privacy_accountant.DEFAULT_RDP_ORDERS),
    "tf_privacy": TF_PRIVACY_ORDERS,
}
#: TF Privacy's orders are a subset of dp_accounting's, so one reference curve per (q, σ)
#: on the union serves both order sets.
UNION = tuple(sorted(set(BASES["dp_accounting"]) | set(EXTRA)))
#: dp_accounting's own sum cancels to ~1e-21 absolute at q = 1e-6 (log A ≈ 0): its value
#: there carries ~1e-5 relative rounding, so tiny curves are compared absolutely.
ATOL = 1e-16


@pytest.fixture(scope="module")
def reference() -> dict[tuple[float, float], np.ndarray]:
    """dp_accounting's per-order RDP on the union of the orders, for every (q, σ)."""
    logging.getLogger("absl").setLevel(logging.ERROR)  # its "failed to converge" lines
    out = {}
    for q, sigma in itertools.product(QS, SIGMAS):
        acc = rdp_privacy_accountant.RdpAccountant(list(UNION))
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)))
        out[q, sigma] = acc.rdp
    return out


@pytest.mark.parametrize("base", sorted(BASES))
def test_curve_equals_dp_accounting_on_the_grid(
    base: str, reference: dict[tuple[float, float], np.ndarray]
) -> None:
    orders = tuple(sorted(set(BASES[base]) | set(EXTRA)))
    pick = np.searchsorted(UNION, orders)
    worst, n_inf = 0.0, 0
    for (q, sigma), ref_all in reference.items():
        ref = ref_all[pick]
        got = rdp_poisson_gaussian(q=q, noise_multiplier=sigma, orders=orders)
        # Orders whose series dp_accounting gives up on (1,000 terms) are ∞ in both.
        assert np.array_equal(np.isinf(got), np.isinf(ref)), (q, sigma)
        n_inf += int(np.isinf(ref).sum())
        fin = np.isfinite(ref)
        np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-9, atol=ATOL, err_msg=f"{q, sigma}")
        big = fin & (ref > 1e-6)
        worst = max(worst, float(np.max(np.abs(got[big] / ref[big] - 1), initial=0.0)))
    assert n_inf > 0  # the non-convergent path is exercised (q = 0.5, 0.99 at small σ)
    assert worst < 1e-10  # where RDP is not ~0 the two agree to rounding (seen: 2.4e-11)


def test_q1_q0_and_sigma0_are_dp_accountings_closed_forms() -> None:
    orders = (1.05, 1.5, 2.0, 3.0, 10.5, 64.0, 1024.0, math.inf)
    gauss = rdp_poisson_gaussian(q=1.0, noise_multiplier=2.0, orders=orders)
    # The Gaussian mechanism: α / (2σ²) = α / 8 (Mironov 2017, Prop. 7).
    assert gauss.tolist() == [1.05 / 8, 1.5 / 8, 0.25, 0.375, 10.5 / 8, 8.0, 128.0, math.inf]
    # Bit for bit dp_accounting's: update-level releases (q = 1) keep their ε exactly.
    ref = rdp_privacy_accountant.RdpAccountant(list(UNION))
    ref.compose(dpa.GaussianDpEvent(0.7))
    assert rdp_poisson_gaussian(q=1.0, noise_multiplier=0.7, orders=UNION).tolist() == (
        ref.rdp.tolist()
    )
    assert rdp_poisson_gaussian(q=0.0, noise_multiplier=1.0, orders=orders).tolist() == [0.0] * 8
    assert np.isinf(rdp_poisson_gaussian(q=0.1, noise_multiplier=0.0, orders=orders)).all()
    sub = rdp_poisson_gaussian(q=0.01, noise_multiplier=1.0, orders=orders)
    assert np.isinf(sub[-1]) and np.isfinite(sub[:-1]).all()
    # At q = 0.1 the series of orders 1.05 and 1.5 runs past 1,000 terms: ∞, as in dp_accounting.
    sub = rdp_poisson_gaussian(q=0.1, noise_multiplier=1.0, orders=orders)
    assert np.isinf(sub).tolist() == [True, True, False, False, False, False, False, True]


def test_order_two_by_hand() -> None:
    """A_2 = (1−q)² + 2q(1−q) + q² e^{1/σ²} = 1 + q²(e^{1/σ²} − 1), RDP = log A_2 / (2 − 1)."""
    q, sigma = 0.1, 1.0
    by_hand = math.log1p(q**2 * (math.e - 1))  # log(1.0171828…) = 0.0170369…
    got = rdp_poisson_gaussian(q=q, noise_multiplier=sigma, orders=[2.0])
    assert got[0] == pytest.approx(by_hand, rel=1e-14)
    assert got[0] == pytest.approx(0.01703686, abs=1e-8)


def test_orders_at_most_one_are_dp_accountings() -> None:
    acc = rdp_privacy_accountant.RdpAccountant([0.5, 0.9])
    acc.compose(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(1.0)))
    got = rdp_poisson_gaussian(q=0.2, noise_multiplier=1.0, orders=[0.5, 0.9])
    assert got.tolist() == acc.rdp.tolist()


def test_bad_parameters_raise_dp_accountings_errors() -> None:
    with pytest.raises(ValueError, match=r"Sampling rate must be in \[0, 1\]"):
        rdp_poisson_gaussian(q=1.5, noise_multiplier=1.0, orders=[2.0])
    with pytest.raises(ValueError, match="Noise multiplier must be non-negative"):
        rdp_poisson_gaussian(q=0.5, noise_multiplier=-1.0, orders=[2.0])


@pytest.mark.parametrize("orders", ["dp_accounting", "tf_privacy"])
def test_a_composed_clients_epsilon_equals_dp_accountings(orders: str) -> None:
    """Rounds at three sampling rates, one of them a plain Gaussian release."""
    acc = ACCOUNTANTS.build("rdp", {"orders": orders})
    specs = [(0.03, 1.1, 50), (0.0625, 0.9, 20), (0.03, 1.1, 50), (1.0, 5.0, 1)]
    ref = rdp_privacy_accountant.RdpAccountant(list(acc.orders))  # type: ignore[attr-defined]
    for q, z, count in specs:
        spec = {"mechanism": "poisson_gaussian", "noise_multiplier": z}
        acc.record(7, dp_event_from_spec({**spec, "sampling_probability": q, "count": count}))
        ref.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), count)
    for delta in (1e-5, 1e-8):
        assert acc.epsilon(7, delta) == pytest.approx(ref.get_epsilon(delta), rel=1e-12)


def _loop_stop(s0: list[float], s1: list[float], start: float) -> int:
    """dp_accounting's ``_compute_log_a_frac`` stopping rule, a term at a time."""
    total, last0, last1 = start, -math.inf, -math.inf
    for i, (a, b) in enumerate(zip(s0, s1, strict=True)):
        total = float(np.logaddexp(total, np.logaddexp(a, b)))
        if a < last0 and b < last1 and max(a, b) < total - 30:
            return i
        last0, last1 = a, b
    return -1


def test_stop_rule_with_an_underflowing_running_total() -> None:
    """Terms 1,000 below the block's largest: the linear-space total underflows and the
    rule falls back to log space; the carried sum of earlier blocks counts."""
    s0 = np.array([[-1000.0, -1001.0, 0.0, -50.0, -60.0], [-1000.0, -1001.0, -1002.0, 0.0, -1.0]])
    s1 = s0 - 1.0
    start = np.array([-np.inf, -960.0])
    ref = np.maximum(s0.max(axis=1), s1.max(axis=1))[:, None]
    e = (np.exp(s0 - ref), np.exp(s1 - ref))
    run = np.cumsum(e[0] + e[1], axis=1) + np.exp(start[:, None] - ref)
    first = (np.full(2, -np.inf), np.full(2, -np.inf))
    got = _stop_index(first, (s0, s1), e, run, start)
    want = [_loop_stop(s0[r].tolist(), s1[r].tolist(), start[r]) for r in range(2)]
    assert got.tolist() == want == [3, 1]


def test_fold_when_a_row_stops_before_its_largest_term() -> None:
    s0 = np.array([[0.0, -1.0, 5.0], [-2.0, -3.0, -4.0]])
    s1 = s0 - 0.5
    keep = np.array([[True, True, False], [True, True, True]])
    top, rest = np.array([-np.inf, -1.0]), np.array([0.0, 0.25])
    ref = np.maximum(top, np.maximum(s0.max(axis=1), s1.max(axis=1)))
    e = (np.exp(s0 - ref[:, None]), np.exp(s1 - ref[:, None]))
    got = _fold(top, rest, ref, (s0, s1), e, keep)
    terms = np.where(np.concatenate([keep, keep], axis=1), np.concatenate([s0, s1], 1), -np.inf)
    want = _add_terms(top, rest, terms)
    np.testing.assert_allclose(got[0] + np.log1p(got[1]), want[0] + np.log1p(want[1]), rtol=1e-15)
    # By hand: row 0 sums e⁰ + e⁻¹ + e^-0.5 + e^-1.5.
    assert got[0][0] + math.log1p(got[1][0]) == pytest.approx(
        math.log(1 + math.exp(-1) + math.exp(-0.5) + math.exp(-1.5)), rel=1e-15
    )
