"""Record-level accounting of DP-SGD rounds (001 §4.4): Poisson-sampled Gaussian steps."""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from geofl.plugins import ACCOUNTANTS, load_all
from geofl.privacy.accounting import TF_PRIVACY_ORDERS, _rdp_per_release, dp_event_from_spec
from geofl.privacy.budget import ledger_epsilon

load_all()


def _spec(q: float, z: float, count: int) -> dict[str, object]:
    return {
        "mechanism": "poisson_gaussian",
        "noise_multiplier": z,
        "sampling_probability": q,
        "count": count,
    }


@pytest.mark.parametrize(
    ("q", "z", "steps", "delta"),
    [(0.01, 1.0, 1000, 1e-5), (0.1, 2.0, 50, 1e-6), (0.25, 0.8, 7, 1e-5), (1.0, 1.5, 3, 1e-5)],
)
def test_rdp_equals_dp_accounting_computed_independently(
    q: float, z: float, steps: int, delta: float
) -> None:
    acc = ACCOUNTANTS.build("rdp", {})
    # Recorded as separate rounds: 2 rounds of ⌊steps/2⌋ and the rest.
    half = steps // 2
    for count in (half, steps - half):
        if count:
            acc.record(3, dp_event_from_spec(_spec(q, z, count)))
    ref = rdp_privacy_accountant.RdpAccountant(list(acc.orders))  # type: ignore[attr-defined]
    event = (
        dpa.GaussianDpEvent(z) if q == 1.0 else dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))
    )
    ref.compose(event, steps)
    assert acc.epsilon(3, delta) == pytest.approx(ref.get_epsilon(delta), rel=1e-9)


def test_pld_equals_dp_accounting_and_is_no_looser_than_rdp() -> None:
    pld, rdp = ACCOUNTANTS.build("pld", {}), ACCOUNTANTS.build("rdp", {})
    for acc in (pld, rdp):
        acc.record(0, dp_event_from_spec(_spec(0.05, 1.0, 200)))
    ref = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    ref.compose(
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.05, dpa.GaussianDpEvent(1.0)), 200)
    )
    assert pld.epsilon(0, 1e-5) == pytest.approx(ref.get_epsilon(1e-5), rel=1e-9)
    assert pld.epsilon(0, 1e-5) <= rdp.epsilon(0, 1e-5)


def test_epsilon_is_monotone_in_sigma_steps_and_q() -> None:
    def eps(q: float, z: float, steps: int) -> float:
        return ledger_epsilon([_spec(q, z, steps)], accountant="rdp", params={}, delta=1e-5)

    assert eps(0.05, 0.8, 100) > eps(0.05, 1.0, 100) > eps(0.05, 2.0, 100)
    assert eps(0.05, 1.0, 10) < eps(0.05, 1.0, 100) < eps(0.05, 1.0, 1000)
    assert eps(0.01, 1.0, 100) < eps(0.05, 1.0, 100) < eps(0.2, 1.0, 100)


def test_epsilon_with_is_the_epsilon_after_recording() -> None:
    acc = ACCOUNTANTS.build("rdp", {})
    acc.record(0, dp_event_from_spec(_spec(0.1, 1.0, 30)))
    planned = dp_event_from_spec(_spec(0.1, 1.0, 30))
    ahead = acc.epsilon_with(0, [planned], 1e-5)
    acc.record(0, planned)
    assert ahead == pytest.approx(acc.epsilon(0, 1e-5), rel=1e-12)


def test_tf_privacy_orders_are_the_papers_grid() -> None:
    assert TF_PRIVACY_ORDERS[:3] == (1.1, 1.2, 1.3) and TF_PRIVACY_ORDERS[98] == 10.9
    assert TF_PRIVACY_ORDERS[99:101] == (12.0, 13.0) and TF_PRIVACY_ORDERS[-1] == 63.0
    acc = ACCOUNTANTS.build("rdp", {"orders": "tf_privacy", "extra_orders": []})
    assert acc.orders == TF_PRIVACY_ORDERS  # type: ignore[attr-defined]


def test_a_round_of_100_clients_computes_one_rdp_curve_per_distinct_release() -> None:
    """Recording reuses the cached per-release RDP curve of each (q, σ); the time a round
    takes is measured by benchmarks/bench_dp_step.py, not here."""
    acc = ACCOUNTANTS.build("rdp", {"extra_orders": [1.0123]})  # fresh orders: cold cache
    before = _rdp_per_release.cache_info().misses
    for k in range(100):
        acc.record(k, dp_event_from_spec(_spec(0.064 + 0.001 * (k % 3), 1.0, 80)))
    eps = [acc.epsilon(k, 1e-5) for k in range(100)]
    assert _rdp_per_release.cache_info().misses - before == 3
    assert len(set(eps)) == 3 and all(math.isfinite(e) for e in eps)


def test_bad_event_specs_are_refused_before_changing_the_ledger() -> None:
    acc = ACCOUNTANTS.build("rdp", {})
    with pytest.raises(ValueError, match=r"q=1\.5"):
        acc.record(0, dp_event_from_spec(_spec(1.5, 1.0, 3)))
    with pytest.raises(ValueError, match="unsupported DpEvent"):
        acc.record(0, dpa.ComposedDpEvent([dpa.GaussianDpEvent(1.0), dpa.LaplaceDpEvent(1.0)]))
    assert acc.clients() == []
