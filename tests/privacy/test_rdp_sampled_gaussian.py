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
from geofl.privacy.rdp_sampled_gaussian import rdp_poisson_gaussian

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
